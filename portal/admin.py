"""Admin of the site shell's own records: Celery task failure counts (read-only; the workers write them), the
single sign-on mapping (editable, audited) and identities (read-only: sign-ins write them)."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from simple_history.admin import SimpleHistoryAdmin

from portal.models import SsoIdentity, SsoMapping, TaskFailure


@admin.register(TaskFailure)
class TaskFailureAdmin(admin.ModelAdmin):
    """Failures per Celery task, as ``/metrics`` exports them."""

    list_display = ("task", "count", "last_failure_at", "last_error")
    search_fields = ("task",)
    readonly_fields = ("task", "count", "last_failure_at", "last_error")

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Rows come from failing tasks only."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: TaskFailure | None = None) -> bool:
        """Counts are not edited by hand."""
        return False


@admin.register(SsoMapping)
class SsoMappingAdmin(SimpleHistoryAdmin):
    """Which group, role or domain of the identity provider grants which team and role, or admin / operator.

    Applied at the next sign-in of each user (not to signed-in sessions).
    """

    list_display = ("claim", "value", "grants", "team", "note")
    list_filter = ("claim", "grants", "team")
    list_select_related = ("team",)
    search_fields = ("value", "note", "team__name", "team__slug")


@admin.register(SsoIdentity)
class SsoIdentityAdmin(admin.ModelAdmin):
    """Provider accounts behind portal users; what the provider sent at the last sign-in (to check a mapping)."""

    list_display = ("user", "subject", "issuer", "last_sign_in_at", "admin_from_sso", "operator_from_sso")
    list_select_related = ("user",)
    search_fields = ("user__username", "user__email", "subject")
    readonly_fields = (
        "user",
        "issuer",
        "subject",
        "admin_from_sso",
        "operator_from_sso",
        "last_sign_in_at",
        "last_claim_values",
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Identities come from sign-ins only."""
        return False
