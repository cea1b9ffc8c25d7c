"""Admin of the site shell's own records: Celery task failure counts (read-only; the workers write them)."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from portal.models import TaskFailure


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
