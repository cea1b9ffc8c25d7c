"""Django admin of the kubernetes sync: the reconciler's reports, the last one first, read-only."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html, format_html_join

from clusters.models import ReconcileReport


@admin.register(ReconcileReport)
class ReconcileReportAdmin(admin.ModelAdmin):
    """What each reconciler run found and did; written by ``clusters.kube_reconcile_cluster`` only."""

    list_display = ("cluster", "started_at", "finished_at", "dry_run", "repaired", "reported", "kinds", "failed")
    list_filter = ("cluster", "dry_run")
    date_hierarchy = "started_at"
    fields = ("cluster", "started_at", "finished_at", "dry_run", "repaired", "reported", "error", "findings_table")
    readonly_fields = fields

    def has_add_permission(self, request) -> bool:
        """Reports come from the reconciler."""
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        """Reports are a record: read-only."""
        return False

    @admin.display(description="findings")
    def kinds(self, obj: ReconcileReport) -> str:
        """Findings per kind, e.g. ``orphaned_allocation×2``."""
        return ", ".join(f"{k}×{v}" for k, v in sorted((obj.counts or {}).items())) or "none"

    @admin.display(description="error", boolean=True)
    def failed(self, obj: ReconcileReport) -> bool:
        """Whether the run stopped on an error (e.g. the cluster could not be reached)."""
        return bool(obj.error)

    @admin.display(description="findings")
    def findings_table(self, obj: ReconcileReport) -> str:
        """Every finding: kind, repaired or reported, the job or node, the message."""
        if not obj.findings:
            return "No mismatch found."
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (f.get("kind", ""), f.get("action", ""), f.get("job") or f.get("node") or "", f.get("message", ""))
                for f in obj.findings
            ),
        )
        return format_html(
            "<table><thead><tr><th>kind</th><th>action</th><th>job / node</th><th>message</th></tr></thead>"
            "<tbody>{}</tbody></table>",
            rows,
        )
