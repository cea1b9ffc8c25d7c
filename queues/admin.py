"""Django admin for teams, cohorts, quotas, priorities and jobs."""

from __future__ import annotations

from django.contrib import admin

from queues.models import Allocation, Cohort, Job, JobEvent, Membership, PriorityClass, QuotaLine, Team, TeamQuota


class MembershipInline(admin.TabularInline):
    """Members of a team and their role."""

    model = Membership
    extra = 1
    raw_id_fields = ("user",)


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    """Teams (tenants)."""

    list_display = ("name", "slug", "namespace", "local_queue_name")
    search_fields = ("name", "slug", "namespace")
    inlines = [MembershipInline]


class CohortQuotaLineInline(admin.TabularInline):
    """Quota a cohort adds on top of its members'."""

    model = QuotaLine
    fk_name = "cohort"
    exclude = ("team_quota",)
    extra = 0


@admin.register(Cohort)
class CohortAdmin(admin.ModelAdmin):
    """Borrowing cohorts (nested)."""

    list_display = ("name", "parent", "fair_weight")
    list_select_related = ("parent",)
    search_fields = ("name",)
    inlines = [CohortQuotaLineInline]


class QuotaLineInline(admin.TabularInline):
    """Quota per flavor and resource of a team's ClusterQueue."""

    model = QuotaLine
    fk_name = "team_quota"
    exclude = ("cohort",)
    extra = 1


@admin.register(TeamQuota)
class TeamQuotaAdmin(admin.ModelAdmin):
    """Team quotas (Kueue ClusterQueues)."""

    list_display = (
        "cluster_queue_name",
        "team",
        "cluster",
        "cohort",
        "queueing_strategy",
        "within_cluster_queue",
        "reclaim_within_cohort",
    )
    list_filter = ("cluster", "cohort", "queueing_strategy")
    list_select_related = ("team", "cluster", "cohort")
    search_fields = ("cluster_queue_name", "team__name")
    inlines = [QuotaLineInline]


@admin.register(PriorityClass)
class PriorityClassAdmin(admin.ModelAdmin):
    """Priority classes (Kueue WorkloadPriorityClasses)."""

    list_display = ("name", "value", "may_preempt", "is_default", "description")


class JobEventInline(admin.TabularInline):
    """A job's timeline."""

    model = JobEvent
    extra = 0
    can_delete = False
    readonly_fields = ("at", "kind", "message", "details")
    ordering = ("at", "id")


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    """Jobs; state changes go through the services, so the lifecycle fields are read-only here."""

    list_display = ("name", "team", "owner", "resource_class", "state", "wait_reason", "submitted_at")
    list_filter = ("state", "wait_reason", "cluster", "team", "resource_class")
    list_select_related = ("team", "owner", "resource_class")
    search_fields = ("name", "k8s_name", "owner__username")
    date_hierarchy = "submitted_at"
    show_full_result_count = False
    raw_id_fields = ("owner",)
    readonly_fields = (
        "state",
        "wait_reason",
        "wait_message",
        "kueue_message",
        "wait_details",
        "wait_since",
        "assignment",
        "assigned_flavor",
        "borrowing",
        "submitted_at",
        "queued_at",
        "admitted_at",
        "started_at",
        "finished_at",
        "state_changed_at",
        "preemption_count",
        "run_seconds_banked",
    )
    inlines = [JobEventInline]


@admin.register(Allocation)
class AllocationAdmin(admin.ModelAdmin):
    """Device allocations."""

    list_display = ("job", "device", "pod_index", "started_at", "ended_at", "end_reason")
    list_filter = ("end_reason",)
    list_select_related = ("job", "device__node")
    raw_id_fields = ("job", "device")
    show_full_result_count = False
