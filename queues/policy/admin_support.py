"""Admin plumbing shared by the policy ModelAdmins: push after save, the what-if preview, the audit trail.

The preview is the admin's own save path run inside its transaction and then rolled back: the proposed
policy is read back from the database exactly as it would be stored, replayed next to the current one,
and nothing is kept. Apply re-posts the same form with ``_whatif_apply``.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from simple_history.admin import SimpleHistoryAdmin

from pools.models import Cluster
from queues.policy.charts import whatif_figure
from queues.policy.push import policy_push_clusters, policy_push_request
from queues.policy.whatif import (
    WhatIfRequest,
    WhatIfTooSlow,
    config_changes,
    policy_configuration,
    whatif_compare,
)

PREVIEW_FLAG = "_whatif"
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
    """Saving shows a what-if preview first (replay of recorded jobs, current vs proposed); Apply saves."""

    whatif_template = "admin/queues/whatif_preview.html"

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        """On a save without ``_whatif_apply``, capture the current policy of every cluster, then save to preview."""
        if request.method == "POST" and "_whatif_apply" not in request.POST:
            setattr(request, PREVIEW_FLAG, {c.pk: (c, policy_configuration(cluster=c)) for c in Cluster.objects.all()})
        return super().changeform_view(request, object_id, form_url, extra_context)

    def response_add(self, request, obj, post_url_continue=None):
        """The preview instead of the redirect, unless this is the apply."""
        if getattr(request, PREVIEW_FLAG, None) is not None:
            return self._whatif_response(request, obj, add=True)
        return super().response_add(request, obj, post_url_continue)

    def response_change(self, request, obj):
        """The preview instead of the redirect, unless this is the apply."""
        if getattr(request, PREVIEW_FLAG, None) is not None:
            return self._whatif_response(request, obj, add=False)
        return super().response_change(request, obj)

    def _days(self, request) -> int:
        try:
            days = int(request.POST.get("_whatif_days") or getattr(settings, "WHATIF_DEFAULT_DAYS", 14))
        except ValueError:
            days = getattr(settings, "WHATIF_DEFAULT_DAYS", 14)
        return max(1, min(days, MAX_DAYS))

    def _whatif_response(self, request, obj, *, add: bool):
        """Replay under both policies, roll the save back, and render the preview (before the rollback runs)."""
        days = self._days(request)
        captured = getattr(request, PREVIEW_FLAG)
        results, changes, failures = [], [], []
        for cluster, current in captured.values():
            # The cluster row itself may be what was saved (its fair-sharing switch): read it again.
            cluster.refresh_from_db()
            proposed = policy_configuration(cluster=cluster)
            if proposed == current:
                continue
            changes.extend(f"{cluster.name}: {line}" for line in config_changes(current, proposed))
            try:
                whatif = whatif_compare(
                    cluster=cluster, current=current, proposed=proposed, request=WhatIfRequest(days=days)
                )
            except WhatIfTooSlow as exc:
                failures.append(f"{cluster.name}: {exc}")
                continue
            results.append(
                {
                    "whatif": whatif,
                    "rows": whatif.rows(),
                    "figure": whatif_figure(whatif.rows()),
                    "chart_id": f"whatif-fig-{len(results) + 1}",
                    "unsettled": [
                        (side, [datetime.fromtimestamp(t, tz=UTC) for t in outcome.unsettled])
                        for side, outcome in (("current", whatif.current), ("proposed", whatif.proposed))
                        if outcome.unsettled
                    ],
                }
            )
        warnings = list(getattr(request, "_policy_warnings", []))
        transaction.set_rollback(True)
        opts = self.model._meta
        hidden = [
            (key, value)
            for key, values in request.POST.lists()
            for value in values
            if key != "csrfmiddlewaretoken" and not key.startswith("_whatif")
        ]
        if add:
            discard_url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
        else:
            discard_url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])
        context = {
            **self.admin_site.each_context(request),
            "title": f"What if: {opts.verbose_name} {obj}",
            "opts": opts,
            "object": obj,
            "add": add,
            "days": days,
            "results": results,
            "changes": changes,
            "warnings": warnings,
            "failures": failures,
            "hidden": hidden,
            "discard_url": discard_url,
        }
        response = TemplateResponse(request, self.whatif_template, context)
        return response.render()
