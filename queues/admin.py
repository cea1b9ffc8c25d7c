"""Django admin for teams, cohorts, quotas, priorities and jobs; policy models are audited, previewed and pushed."""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils.html import format_html_join
from simple_history.admin import SimpleHistoryAdmin

from kernel.admin_inlines import LabelledInlineFormSet
from pools.models import Allocation
from queues.api.tokens import api_token_create
from queues.models import (
    ApiToken,
    Cohort,
    Job,
    JobEvent,
    Membership,
    PolicyPush,
    PriorityClass,
    QuotaLine,
    Reservation,
    ReservationPolicy,
    Team,
    TeamQuota,
)
from queues.policy.admin_support import PolicyAdmin, WhatIfAdminMixin
from queues.policy.pushes import policy_push_retry_now
from queues.policy.selectors import cohort_tree, flatten
from queues.policy.validation import LineSpec, cohort_parent_check, cohort_shortfall_check, quota_lines_check


class MembershipInline(admin.TabularInline):
    """Members of a team and their role."""

    model = Membership
    formset = LabelledInlineFormSet
    extra = 1
    raw_id_fields = ("user",)


@admin.register(Team)
class TeamAdmin(PolicyAdmin):
    """Teams (tenants); changes are audited and pushed (namespaces, LocalQueues)."""

    list_display = ("name", "slug", "namespace", "local_queue_name")
    search_fields = ("name", "slug", "namespace")
    inlines = [MembershipInline]

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        """Priority classes as a list of check boxes: a few of them, each with its label (the admin's two-box
        filter widget names its search icons with ARIA a span may not carry)."""
        if db_field.name == "priority_classes":
            kwargs["widget"] = forms.CheckboxSelectMultiple
        return super().formfield_for_manytomany(db_field, request, **kwargs)


@admin.register(Membership)
class MembershipAdmin(SimpleHistoryAdmin):
    """Who is in which team, as member or lead; audited."""

    list_display = ("user", "team", "role", "source")
    list_filter = ("role", "source", "team")
    list_select_related = ("user", "team")
    search_fields = ("user__username", "team__name", "team__slug")
    raw_id_fields = ("user",)


def _line_specs(formset) -> list[LineSpec]:
    """The quota lines a formset would save (deleted rows left out)."""
    return [
        LineSpec(
            flavor=f.cleaned_data["flavor"],
            resource_name=f.cleaned_data.get("resource_name", ""),
            nominal=f.cleaned_data.get("nominal", ""),
            borrowing_limit=f.cleaned_data.get("borrowing_limit", "") or "",
            lending_limit=f.cleaned_data.get("lending_limit", "") or "",
        )
        for f in formset.forms
        if getattr(f, "cleaned_data", None) and not f.cleaned_data.get("DELETE") and f.cleaned_data.get("flavor")
    ]


class QuotaLineFormSet(LabelledInlineFormSet):
    """Checks all lines together with the policy rules; errors block the save, warnings are shown."""

    policy_warnings: list[str]

    def clean(self) -> None:
        """Run quota_lines_check on the lines as they would be saved."""
        super().clean()
        self.policy_warnings = []
        if any(self.errors):
            return
        owner = self.instance
        if isinstance(owner, TeamQuota):
            check = quota_lines_check(
                lines=_line_specs(self),
                in_cohort=owner.cohort_id is not None,
                owner="queue",
                cluster=owner.cluster if owner.cluster_id else None,
            )
        else:
            check = quota_lines_check(lines=_line_specs(self), in_cohort=owner.parent_id is not None, owner="cohort")
        if check.errors:
            raise ValidationError(check.errors)
        self.policy_warnings = check.warnings


class QuotaLineForm(forms.ModelForm):
    """A quota line with inputs sized to their content, so a team's or cohort's quota form fits a 1,400 px window
    (the admin's default 20em text inputs made the line table ~1,800 px wide)."""

    class Meta:
        model = QuotaLine
        fields = ("flavor", "flavor_order", "resource_name", "nominal", "borrowing_limit", "lending_limit")
        widgets = {
            "flavor_order": forms.NumberInput(attrs={"style": "width: 4em", "min": 0}),
            "resource_name": forms.TextInput(attrs={"size": 24}),
            "nominal": forms.TextInput(attrs={"size": 8, "inputmode": "decimal"}),
            "borrowing_limit": forms.TextInput(attrs={"size": 8, "inputmode": "decimal"}),
            "lending_limit": forms.TextInput(attrs={"size": 8, "inputmode": "decimal"}),
        }


class CohortQuotaLineInline(admin.TabularInline):
    """Quota a cohort adds on top of its members'."""

    model = QuotaLine
    form = QuotaLineForm
    fk_name = "cohort"
    formset = QuotaLineFormSet
    exclude = ("team_quota",)
    extra = 0


class CohortForm(forms.ModelForm):
    """A cohort; its parent may not lead back to it; fairness that remembers within bounds."""

    class Meta:
        model = Cohort
        fields = ("name", "parent", "fair_weight", "usage_half_life", "usage_window", "shortfall_policy", "spare_team")

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["usage_window"].required = False  # empty: the default week

    def clean(self):
        """Refuse a cycle among cohorts, naming the path; a half-life and window from an hour to 90 days; a shortfall
        policy only on a root cohort, with a spare team of its tree for "spare team first"."""
        data = super().clean()
        if not data.get("usage_window"):
            data["usage_window"] = Cohort._meta.get_field("usage_window").get_default()
        for name in ("usage_half_life", "usage_window"):
            value = data.get(name)
            if value is not None and not USAGE_PERIOD_MIN <= value <= USAGE_PERIOD_MAX:
                self.add_error(name, "Choose from 1 hour to 90 days (e.g. 3 00:00:00 for three days).")
        check = cohort_parent_check(
            cohort=self.instance if self.instance.pk else None,
            name=data.get("name") or self.instance.name,
            parent=data.get("parent"),
        )
        for message in check.errors:
            self.add_error("parent", message)
        shortfall = cohort_shortfall_check(
            cohort=self.instance if self.instance.pk else None,
            parent=data.get("parent"),
            policy=data.get("shortfall_policy") or Cohort.ShortfallPolicy.WARN,
            spare_team=data.get("spare_team"),
        )
        for message in shortfall.errors:
            field_name, _, text = message.partition(": ")
            self.add_error(field_name if field_name in self.fields else None, text)
        return data


#: Bounds of a cohort's usage half-life and window (fairness that remembers).
USAGE_PERIOD_MIN, USAGE_PERIOD_MAX = timedelta(hours=1), timedelta(days=90)


@admin.register(Cohort)
class CohortAdmin(WhatIfAdminMixin, PolicyAdmin):
    """Borrowing cohorts (nested), listed as a tree with the quota summed under each; saving previews first."""

    form = CohortForm
    list_display = ("name", "parent", "fair_weight", "usage_half_life", "shortfall_policy")
    list_select_related = ("parent",)
    search_fields = ("name",)
    inlines = [CohortQuotaLineInline]
    change_list_template = "admin/queues/cohort/change_list.html"
    readonly_fields = ("members",)

    @admin.display(description="Members (team queues and child cohorts)")
    def members(self, obj: Cohort) -> str:
        """The team queues and the child cohorts that borrow in this cohort, each linked to its page."""
        if obj.pk is None:
            return "–"
        links = [
            (
                reverse("admin:queues_teamquota_change", args=[q.pk]),
                f"{q.cluster.name}/{q.cluster_queue_name} (team {q.team.name})",
            )
            for q in obj.team_quotas.select_related("cluster", "team").order_by("cluster__name", "cluster_queue_name")
        ] + [
            (reverse("admin:queues_cohort_change", args=[c.pk]), f"cohort {c.name}")
            for c in obj.children.order_by("name")
        ]
        return format_html_join(", ", '<a href="{}">{}</a>', links) if links else "none yet"

    def changelist_view(self, request, extra_context=None):
        """The list, with the cohort tree above it."""
        extra_context = {**(extra_context or {}), "tree": flatten(cohort_tree())}
        return super().changelist_view(request, extra_context)


class QuotaLineInline(admin.TabularInline):
    """Quota per flavor and resource of a team's ClusterQueue."""

    model = QuotaLine
    form = QuotaLineForm
    fk_name = "team_quota"
    formset = QuotaLineFormSet
    exclude = ("cohort",)
    extra = 1


@admin.register(TeamQuota)
class TeamQuotaAdmin(WhatIfAdminMixin, PolicyAdmin):
    """Team quotas (Kueue ClusterQueues); saving shows a what-if replay first, applying pushes to the cluster."""

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
    readonly_fields = ("cluster_follows",)

    @admin.display(description="cluster follows the policy?")
    def cluster_follows(self, obj: TeamQuota) -> str:
        """The latest push of this quota's cluster: applied, or failing with its error and the next retry."""
        if obj is None or not obj.cluster_id:
            return "–"
        push = PolicyPush.objects.filter(cluster_id=obj.cluster_id).first()
        if push is None:
            return "no policy change pushed yet"
        when = f"{push.requested_at:%Y-%m-%d %H:%M:%S} UTC"
        if push.state == PolicyPush.State.SUCCEEDED:
            return f"yes: last change ({push.reason}, {when}) applied — {push.report}"
        if push.state == PolicyPush.State.PENDING:
            return f"pushing the change of {when}…"
        retry = f"; next attempt {push.next_attempt_at:%H:%M:%S} UTC" if push.next_attempt_at else "; gave up"
        return f"NO: push of {when} failed after {push.attempts} attempt(s): {push.error}{retry}"


@admin.register(PriorityClass)
class PriorityClassAdmin(PolicyAdmin):
    """Priority classes (Kueue WorkloadPriorityClasses)."""

    list_display = ("name", "value", "may_preempt", "is_default", "description")


@admin.register(ReservationPolicy)
class ReservationPolicyAdmin(SimpleHistoryAdmin):
    """The reservation rules (one row): hard limits that refuse at once, and the limits of automatic approval."""

    list_display = (
        "__str__",
        "auto_approve",
        "auto_max_devices",
        "auto_max_hours_per_week",
        "auto_max_days_ahead",
        "max_hours_per_week",
        "max_days_ahead",
    )

    def has_add_permission(self, request):
        """One row: edit it."""
        return not ReservationPolicy.objects.exists()

    def has_delete_permission(self, request, obj=None):
        """The rules are edited, never deleted."""
        return False


@admin.register(Reservation)
class ReservationAdmin(SimpleHistoryAdmin):
    """Reservations, read-only: leads request them and admins decide on the Reservations page (with a preview)."""

    list_display = ("__str__", "team", "cluster", "count", "starts_at", "ends_at", "state", "decision", "opened_at")
    list_filter = ("state", "decision", "cluster", "flavor")
    list_select_related = ("team", "cluster", "flavor")
    readonly_fields = [f.name for f in Reservation._meta.fields]

    def has_add_permission(self, request):
        """Requested on the Reservations page (the rules are checked there)."""
        return False

    def has_delete_permission(self, request, obj=None):
        """Kept: billing charges them; cancel one on its page instead."""
        return False

    def view_on_site(self, obj):
        """Its page in the portal (decide, preview, cancel)."""
        return reverse("queues:reservation_detail", args=[obj.pk])


@admin.register(PolicyPush)
class PolicyPushAdmin(admin.ModelAdmin):
    """Whether each cluster followed a policy change: state, attempts, the last error; retry failed ones."""

    list_display = ("requested_at", "cluster", "reason", "state", "attempts", "next_attempt_at", "short_error")
    list_filter = ("state", "cluster")
    list_select_related = ("cluster", "requested_by")
    readonly_fields = [f.name for f in PolicyPush._meta.fields]
    actions = ["retry_now"]

    @admin.display(description="error")
    def short_error(self, obj: PolicyPush) -> str:
        """The last error, shortened for the list."""
        return (obj.error[:140] + "…") if len(obj.error) > 140 else obj.error

    def has_add_permission(self, request):
        """Pushes are requested by saving policy."""
        return False

    @admin.action(description="Retry now", permissions=["change"])
    def retry_now(self, request, queryset):
        """Make the selected failed pushes due at once."""
        for push in queryset.exclude(state=PolicyPush.State.SUCCEEDED).order_by("pk"):
            push = policy_push_retry_now(push=push)
            self.message_user(request, f"push #{push.pk} to {push.cluster}: {push.get_state_display()}")


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

    list_display = ("name", "team", "owner", "resource_class", "kind", "state", "wait_reason", "submitted_at")
    list_filter = ("state", "wait_reason", "kind", "cluster", "team", "resource_class")
    list_select_related = ("team", "owner", "resource_class")
    search_fields = ("name", "k8s_name", "owner__username")
    date_hierarchy = "submitted_at"
    show_full_result_count = False
    raw_id_fields = ("owner",)
    readonly_fields = (
        "kind",
        "companion_pod_sets",  # resolved and checked at submission (queues.pod_sets)
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


class ApiTokenAddForm(forms.ModelForm):
    """Issue a token: the key is generated by the service and shown once after saving."""

    class Meta:
        model = ApiToken
        fields = ("team", "user", "name", "expires_at")

    def clean(self):
        data = super().clean()
        team, user = data.get("team"), data.get("user")
        if team and user and not Membership.objects.filter(team=team, user=user).exists():
            raise forms.ValidationError(f"{user} is not a member of team {team.slug}.")
        return data


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Team-scoped API tokens; only a hash of each key is stored."""

    list_display = ("name", "team", "user", "prefix", "created_at", "last_used_at", "expires_at", "revoked")
    list_filter = ("revoked", "team")
    list_select_related = ("team", "user")
    search_fields = ("name", "prefix", "user__username", "team__slug")
    raw_id_fields = ("user",)
    readonly_fields = ("team", "user", "name", "prefix", "created_at", "last_used_at", "expires_at")
    fields = ("team", "user", "name", "prefix", "created_at", "last_used_at", "expires_at", "revoked")

    def get_form(self, request, obj=None, **kwargs):
        if obj is None:
            kwargs["form"] = ApiTokenAddForm
            kwargs["fields"] = ApiTokenAddForm.Meta.fields
        return super().get_form(request, obj, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields if obj is not None else ()

    def get_fields(self, request, obj=None):
        return self.fields if obj is not None else ApiTokenAddForm.Meta.fields

    def save_model(self, request, obj, form, change):
        if change:
            super().save_model(request, obj, form, change)
            return
        issued = api_token_create(
            user=obj.user, team=obj.team, name=obj.name, expires_at=form.cleaned_data.get("expires_at")
        )
        obj.pk = issued.token.pk
        obj._state.adding = False
        messages.warning(request, f"Token key (shown only now, copy it): {issued.key}")
