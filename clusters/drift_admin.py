"""Django admin for the Kueue configuration the portal pushes: drift, with re-apply (portal wins) and adopt.

Thin: the page reads :mod:`clusters.kube_sync.drift`; each button sends its action to the worker (the web process may
not change a cluster) and shows the answer when it comes back within ``KUBE_DRIFT_REPLY_SECONDS``
(:mod:`clusters.drift_replies`).
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.views.decorators.http import require_POST

from clusters import tasks
from clusters.drift_replies import reply_key, reply_wait
from clusters.kube_sync import drift
from clusters.kube_sync.kueue_config import fix_hint
from clusters.models import KubeConfigObject
from pools.models import Cluster

_LEVELS = {"success": messages.SUCCESS, "warning": messages.WARNING, "error": messages.ERROR, "info": messages.INFO}


class NeedsAttentionFilter(admin.SimpleListFilter):
    """Rows an admin must look at (the default) or every row."""

    title = "attention"
    parameter_name = "attention"

    def lookups(self, request, model_admin):
        """Drifted/conflict/orphaned/error, or all."""
        return [("all", "All objects")]

    def choices(self, changelist):
        """The default (no parameter) shows only what needs attention."""
        yield {
            "selected": self.value() is None,
            "query_string": changelist.get_query_string(remove=[self.parameter_name]),
            "display": "Needs attention",
        }
        yield {
            "selected": self.value() == "all",
            "query_string": changelist.get_query_string({self.parameter_name: "all"}),
            "display": "All objects",
        }

    def queryset(self, request, queryset):
        """Filter on status unless "all" was picked."""
        if self.value() == "all":
            return queryset
        return queryset.filter(status__in=drift.ATTENTION)


@admin.register(KubeConfigObject)
class KubeConfigObjectAdmin(admin.ModelAdmin):
    """Kueue objects and team namespaces the portal applies; drifted ones show their difference."""

    list_display = ("object", "cluster", "status_badge", "fields_differing", "drift_detected_at", "checked_at")
    list_filter = (NeedsAttentionFilter, "status", "kind", "cluster")
    search_fields = ("name", "namespace", "kind")
    list_select_related = ("cluster",)
    actions = ("reapply_selected", "adopt_selected")
    readonly_fields = (
        "cluster",
        "kind",
        "namespace",
        "name",
        "status",
        "message",
        "difference",
        "yaml_diff",
        "adopt_writes",
        "applied_at",
        "checked_at",
        "drift_detected_at",
        "live_resource_version",
    )
    fieldsets = (
        (None, {"fields": ("cluster", "kind", "namespace", "name", "status", "message")}),
        ("Difference (fields the portal manages)", {"fields": ("difference", "yaml_diff", "adopt_writes")}),
        ("Bookkeeping", {"fields": ("applied_at", "checked_at", "drift_detected_at", "live_resource_version")}),
    )

    def has_add_permission(self, request, obj=None):
        """Rows are written by the push only."""
        return False

    def has_delete_permission(self, request, obj=None):
        """Deleting a row would only hide drift: re-apply or adopt instead."""
        return False

    @admin.display(description="object", ordering="kind")
    def object(self, obj: KubeConfigObject) -> str:
        """Kind namespace/name."""
        return str(obj)

    @admin.display(description="status", ordering="status")
    def status_badge(self, obj: KubeConfigObject) -> str:
        """The status in words."""
        return format_html('<span class="kube-status kube-status-{}">{}</span>', obj.status, obj.get_status_display())

    @admin.display(description="fields differing")
    def fields_differing(self, obj: KubeConfigObject) -> int:
        """How many portal-managed fields differ."""
        return len(obj.drift or [])

    @admin.display(description="fields")
    def difference(self, obj: KubeConfigObject) -> str:
        """Field by field: path, the portal's value, the cluster's."""
        fields = drift.drift_fields(obj)
        if not fields:
            return "No difference."
        rows = format_html_join(
            "",
            "<tr><td><code>{}</code></td><td>{}</td><td><code>{}</code></td><td><code>{}</code></td></tr>",
            ((f.path, f.change, f.portal, f.live) for f in fields),
        )
        return format_html(
            '<table class="kube-drift"><thead><tr><th>field</th><th>change</th><th>portal</th><th>cluster</th>'
            "</tr></thead><tbody>{}</tbody></table>",
            rows,
        )

    @admin.display(description="YAML diff (portal → cluster)")
    def yaml_diff(self, obj: KubeConfigObject) -> str:
        """A unified diff of the managed fields."""
        text = drift.drift_yaml_diff(obj)
        return format_html('<pre class="kube-drift-diff">{}</pre>', text) if text else "—"

    @admin.display(description="adopt writes")
    def adopt_writes(self, obj: KubeConfigObject) -> str:
        """Where adopting would copy the cluster's values."""
        return drift.adopt_target(obj)

    # --- buttons and actions -------------------------------------------------------------------------------------

    def get_urls(self):
        """Re-apply and adopt one object; check clusters now."""
        info = self.opts.app_label, self.opts.model_name
        wrap = self.admin_site.admin_view
        return [
            path("check/", wrap(self.check_view), name="{}_{}_check".format(*info)),
            path("<int:pk>/reapply/", wrap(self.reapply_view), name="{}_{}_reapply".format(*info)),
            path("<int:pk>/adopt/", wrap(self.adopt_view), name="{}_{}_adopt".format(*info)),
            *super().get_urls(),
        ]

    def _require_change(self, request: HttpRequest) -> None:
        if not self.has_change_permission(request):
            raise PermissionDenied("changing the cluster configuration needs the change permission")

    def _back(self, pk: int) -> HttpResponseRedirect:
        return HttpResponseRedirect(reverse("admin:clusters_kubeconfigobject_change", args=[pk]))

    def _ask_worker(self, request: HttpRequest, action: str, ids: list[int], what: str) -> None:
        """Send the action to the worker, wait briefly for its messages and show them (or say it was sent)."""
        key = reply_key()
        tasks.kube_drift_action.delay(action, ids, key)
        answer = reply_wait(key)
        if answer is None:
            self.message_user(
                request, f"{what}: sent to the worker; the list shows the outcome once it has run.", messages.INFO
            )
            return
        for level, text in answer:
            self.message_user(request, text, _LEVELS.get(level, messages.INFO))

    def _run(self, request: HttpRequest, pk: int, action: str, what: str) -> HttpResponse:
        self._require_change(request)
        row = get_object_or_404(KubeConfigObject, pk=pk)
        if action == "adopt" and not drift.can_adopt(row):
            self.message_user(request, f"{row}: cannot be adopted: {drift.adopt_target(row)}", messages.ERROR)
            return self._back(pk)
        self._ask_worker(request, action, [pk], f"{what} {row}")
        if KubeConfigObject.objects.filter(pk=pk).exists():
            return self._back(pk)
        return HttpResponseRedirect(reverse("admin:clusters_kubeconfigobject_changelist"))

    def reapply_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """POST: the portal's version wins."""
        return require_POST(lambda r: self._run(r, pk, "reapply", "Re-apply of"))(request)

    def adopt_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """POST: the cluster's values are copied into the portal."""
        return require_POST(lambda r: self._run(r, pk, "adopt", "Adoption of"))(request)

    def check_view(self, request: HttpRequest) -> HttpResponse:
        """POST: push and look for drift in every kubernetes cluster now."""
        if request.method != "POST":
            return HttpResponse(status=405, headers={"Allow": "POST"})
        self._require_change(request)
        ids = list(
            Cluster.objects.filter(backend=Cluster.Backend.KUBERNETES).order_by("name").values_list("pk", flat=True)
        )
        if ids:
            self._ask_worker(request, "check", ids, "The drift check")
        return HttpResponseRedirect(reverse("admin:clusters_kubeconfigobject_changelist"))

    def changelist_view(self, request, extra_context=None):
        """The list, under each kubernetes cluster's check of Kueue's own configuration (no button: not ours)."""
        clusters = list(drift.kueue_config_outcomes())
        extra = {
            "kueue_clusters": clusters,
            "kueue_mismatch": any(c.kueue_config_state == Cluster.KueueConfig.MISMATCH for c in clusters),
            "kueue_fix_hint": fix_hint(),
            **(extra_context or {}),
        }
        return super().changelist_view(request, extra)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        """Read-only page with the re-apply / adopt buttons."""
        row = self.get_object(request, object_id)
        extra = {
            "show_save": False,
            "show_save_and_continue": False,
            "show_save_and_add_another": False,
            "can_reapply": row is not None and row.status != KubeConfigObject.Status.IN_SYNC,
            "can_adopt": row is not None and drift.can_adopt(row),
            **(extra_context or {}),
        }
        return super().change_view(request, object_id, form_url, extra)

    @admin.action(description="Re-apply the portal's version (portal wins)", permissions=["change"])
    def reapply_selected(self, request: HttpRequest, queryset: QuerySet[KubeConfigObject]) -> None:
        """Re-apply each selected object; report each failure."""
        self._bulk(request, queryset, "reapply", "to re-apply")

    @admin.action(description="Adopt the cluster's values into the portal", permissions=["change"])
    def adopt_selected(self, request: HttpRequest, queryset: QuerySet[KubeConfigObject]) -> None:
        """Adopt each selected object; report each failure."""
        self._bulk(request, queryset, "adopt", "to adopt")

    def _bulk(self, request: HttpRequest, queryset, action: str, verb: str) -> None:
        ids = list(queryset.order_by("pk").values_list("pk", flat=True))
        if ids:
            self._ask_worker(request, action, ids, f"{len(ids)} object(s) {verb}")
