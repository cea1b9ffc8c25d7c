"""Admin plumbing shared by the policy ModelAdmins: push after save, the what-if preview, the audit trail.

The preview is the admin's own save path run inside its transaction and then rolled back: the proposed
policy is read back from the database exactly as it would be stored, and nothing of it is kept. The proposal
is recorded as a ``PolicyPreview`` that a Celery worker replays next to the current policy
(``queues.policy.previews``); Apply re-posts the stored form with ``_whatif_apply``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import BadRequest, PermissionDenied
from django.db import transaction
from django.http import Http404, HttpResponse, QueryDict
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from simple_history.admin import SimpleHistoryAdmin

from kernel.errors import Conflict
from pools.models import Cluster
from queues.models import PolicyPreview
from queues.policy.previews import (
    PreviewSide,
    policy_digest,
    policy_preview_check_apply,
    policy_preview_mark_applied,
    policy_preview_request,
)
from queues.policy.pushes import policy_push_clusters, policy_push_request
from queues.policy.selectors import previews_visible_to
from queues.policy.whatif import config_changes, policy_configuration

PREVIEW_FLAG = "_whatif"
#: POST key naming the stored preview an Apply or Preview again works from.
PREVIEW_ID = "_whatif_preview"
MAX_DAYS = 90


class PolicyAdmin(SimpleHistoryAdmin):
    """A policy model's admin: history (who, when, before/after) and a push to the clusters after each save."""

    def save_related(self, request, form, formsets, change):
        """Save inlines, pass on validation warnings, then push the change (after commit)."""
        super().save_related(request, form, formsets, change)
        warnings = [w for fs in formsets for w in getattr(fs, "policy_warnings", [])]
        warnings += getattr(form, "policy_warnings", [])
        request._policy_warnings = warnings
        if getattr(request, PREVIEW_FLAG, None) is not None:
            return
        for warning in warnings:
            self.message_user(request, warning, messages.WARNING)
        self._push(request, form.instance, "changed" if change else "created")

    def history_form_view(self, request, object_id, version_id, extra_context=None):
        """Old versions can be viewed, not saved back: a revert would skip validation, the preview and the push."""
        if request.method == "POST":
            raise PermissionDenied("Reverting from history is disabled: edit the object to restore old values.")
        return super().history_form_view(request, object_id, version_id, extra_context)

    def delete_model(self, request, obj):
        """Delete, then push the clusters the object reached."""
        clusters = policy_push_clusters(model_name=obj._meta.model_name, instance=obj)
        label = f"{obj._meta.verbose_name} {obj} deleted"
        super().delete_model(request, obj)
        policy_push_request(clusters=clusters, reason=label, user=request.user)

    def delete_queryset(self, request, queryset):
        """Bulk delete, then push every cluster."""
        super().delete_queryset(request, queryset)
        policy_push_request(
            clusters=Cluster.objects.all(),
            reason=f"{queryset.model._meta.verbose_name_plural} deleted",
            user=request.user,
        )

    def _push(self, request, obj, verb: str) -> None:
        pushes = policy_push_request(
            clusters=policy_push_clusters(model_name=obj._meta.model_name, instance=obj),
            reason=f"{obj._meta.verbose_name} {obj} {verb}",
            user=request.user,
        )
        if pushes:
            self.message_user(
                request,
                format_html(
                    'Pushing the change to {} cluster(s): <a href="{}">see whether they followed</a>.',
                    len(pushes),
                    reverse("admin:queues_policypush_changelist"),
                ),
            )


class WhatIfAdminMixin:
    """Saving asks for a what-if preview first (replayed by a worker, current vs proposed); Apply saves the proposal.

    A save without ``_whatif_apply`` runs the admin's own save path, reads the proposed policy back, rolls the save
    back and records a ``PolicyPreview``; the admin is sent to the preview page, which polls until the replay is
    done. The page's Apply and Preview again post ``_whatif_preview`` here: the stored form replaces the posted one,
    and an apply is refused when the policy changed since the preview. A form posted with ``_whatif_apply`` and no
    preview (a script) is saved as posted.
    """

    change_form_template = "admin/policy/whatif_change_form.html"

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        """Swap in a stored proposal; capture the current policies before a preview save; record the preview after.

        The form says that Save opens a preview, and lists the object's recent previews, each linked.
        """
        if request.method == "GET":
            opts = self.model._meta
            extra_context = {
                **(extra_context or {}),
                "whatif_days": settings.WHATIF_DEFAULT_DAYS,
                "recent_previews": previews_visible_to(
                    request.user, model_label=f"{opts.app_label}.{opts.model_name}", object_id=object_id or ""
                )
                if object_id
                else [],
            }
        if request.method == "POST" and PREVIEW_ID in request.POST:
            preview = self._stored_preview(request, object_id)
            if "_whatif_apply" in request.POST:
                try:
                    policy_preview_check_apply(preview=preview)
                except Conflict as exc:
                    self.message_user(request, f"Not applied: {exc}", messages.ERROR)
                    return redirect("policy:preview", pk=preview.pk)
                request._whatif_applying = preview
            request.POST = _stored_post(preview, request.POST)
        if request.method == "POST" and "_whatif_apply" not in request.POST:
            current = {c.pk: (c, policy_configuration(cluster=c, nodes=False)) for c in Cluster.objects.order_by("pk")}
            setattr(request, PREVIEW_FLAG, current)
        response = super().changeform_view(request, object_id, form_url, extra_context)
        pending = getattr(request, "_whatif_pending", None)
        if pending is None:
            return response
        # The admin's transaction (and the save in it) is rolled back by now: the preview row is kept.
        preview = policy_preview_request(user=request.user, **pending)
        return redirect("policy:preview", pk=preview.pk)

    def _stored_preview(self, request, object_id) -> PolicyPreview:
        try:
            preview = PolicyPreview.objects.get(pk=int(request.POST[PREVIEW_ID]))
        except (ValueError, PolicyPreview.DoesNotExist):
            raise Http404("No such what-if preview (previews are deleted after a few days).") from None
        opts = self.model._meta
        if preview.model_label != f"{opts.app_label}.{opts.model_name}" or preview.object_id != (object_id or ""):
            raise BadRequest("This preview is of another object.")
        return preview

    def response_add(self, request, obj, post_url_continue=None):
        """The preview instead of the redirect, unless this is the apply."""
        if getattr(request, PREVIEW_FLAG, None) is not None:
            return self._whatif_response(request, obj, add=True)
        self._mark_applied(request)
        return super().response_add(request, obj, post_url_continue)

    def response_change(self, request, obj):
        """The preview instead of the redirect, unless this is the apply."""
        if getattr(request, PREVIEW_FLAG, None) is not None:
            return self._whatif_response(request, obj, add=False)
        self._mark_applied(request)
        return super().response_change(request, obj)

    def _mark_applied(self, request) -> None:
        preview = getattr(request, "_whatif_applying", None)
        if preview is not None:
            policy_preview_mark_applied(preview=preview)

    def _days(self, request) -> int:
        try:
            days = int(request.POST.get("_whatif_days") or settings.WHATIF_DEFAULT_DAYS)
        except ValueError:
            days = settings.WHATIF_DEFAULT_DAYS
        return max(1, min(days, MAX_DAYS))

    def _apply_at(self, request, days: int) -> tuple[datetime | None, str]:
        """``_whatif_apply_at`` (a UTC time ``YYYY-MM-DDTHH:MM``) when it falls in the window replayed, and a warning
        naming the field and the window otherwise (the change then takes effect from the window's start)."""
        raw = (request.POST.get("_whatif_apply_at") or "").strip()
        if not raw:
            return None, ""
        end = timezone.now()
        start = end - timedelta(days=days)
        try:
            when = datetime.fromisoformat(raw)
        except ValueError:
            when = None
        if when is not None and when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        if when is None or not start <= when <= end:
            return None, (
                f"_whatif_apply_at: {raw!r} is not a time of the window replayed ({start:%Y-%m-%d %H:%M} to "
                f"{end:%Y-%m-%d %H:%M} UTC); the change takes effect from the window's start"
            )
        return when, ""

    def _whatif_response(self, request, obj, *, add: bool):
        """Read the proposed policy back, note what to record once the save is rolled back, roll it back."""
        captured = getattr(request, PREVIEW_FLAG)
        sides, changes = [], []
        for cluster, current in captured.values():
            # The cluster row itself may be what was saved (its fair-sharing switch): read it again.
            cluster.refresh_from_db()
            proposed = policy_configuration(cluster=cluster, nodes=False)
            if proposed == current:
                continue
            changes.extend(f"{cluster.name}: {line}" for line in config_changes(current, proposed))
            sides.append(PreviewSide(cluster=cluster, current=current, proposed=proposed))
        opts = self.model._meta
        days = self._days(request)
        apply_at, apply_warning = self._apply_at(request, days)
        request._whatif_pending = {
            "model_label": f"{opts.app_label}.{opts.model_name}",
            "object_id": "" if add else str(obj.pk),
            "object_repr": f"{opts.verbose_name} {obj}",
            "days": days,
            "apply_at": apply_at,
            "form_data": [
                (key, value)
                for key, values in request.POST.lists()
                for value in values
                if key != "csrfmiddlewaretoken" and not key.startswith("_whatif")
            ],
            "sides": sides,
            "changes": changes,
            "warnings": [*getattr(request, "_policy_warnings", []), *([apply_warning] if apply_warning else [])],
            "digests": {str(pk): policy_digest(current) for pk, (_, current) in captured.items()},
        }
        transaction.set_rollback(True)
        return HttpResponse(status=204)


def _stored_post(preview: PolicyPreview, posted: QueryDict) -> QueryDict:
    """The preview's stored form, plus the ``_whatif_*`` buttons and the CSRF token of the form just posted."""
    data = QueryDict(mutable=True)
    for key, value in preview.form_data:
        data.appendlist(key, value)
    for key in posted:
        if key.startswith("_whatif") or key == "csrfmiddlewaretoken":
            data.setlist(key, posted.getlist(key))
    data._mutable = False
    return data
