"""Django admin for billing: rates and budgets are edited through the services; usage and rollups are read-only."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.utils import timezone

from billing import services
from billing.models import (
    Budget,
    CapacityDaily,
    CapacityTeamMonthly,
    CohortSettlement,
    LedgerMonthly,
    Notification,
    Rate,
    ReclaimRecord,
    TeamDemotion,
    UsageDaily,
    UsageRecord,
    UsageTeamDaily,
    UsageTeamMonthly,
)
from billing.services.settlement import settlement_errors, settlement_set


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows written only by the billing services."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class RateForm(forms.ModelForm):
    """Shows the service's validation (overlaps, MIG profile, currency) as form errors."""

    class Meta:
        model = Rate
        fields = [
            "flavor",
            "kind",
            "mig_profile",
            "price_per_hour",
            "currency",
            "effective_from",
            "effective_to",
            "note",
        ]

    def clean(self):
        data = super().clean()
        if self.errors or not data.get("flavor"):
            return data
        errors = services.rate_errors(
            flavor=data["flavor"],
            kind=data.get("kind") or Rate.Kind.FULL,
            mig_profile=data.get("mig_profile") or "",
            price_per_hour=data.get("price_per_hour"),
            currency=data.get("currency") or "",
            effective_from=data.get("effective_from"),
            effective_to=data.get("effective_to"),
            rate=self.instance if self.instance.pk else None,
        )
        for field, messages_ in errors.items():
            self.add_error(field if field in self.fields else None, messages_)
        return data


@admin.register(Rate)
class RateAdmin(admin.ModelAdmin):
    """Rates per flavor and unit, with effective dates; saving goes through ``rate_set``."""

    form = RateForm
    list_display = ("flavor", "kind", "mig_profile", "price_per_hour", "currency", "effective_from", "effective_to")
    list_filter = ("flavor", "kind", "currency")
    readonly_fields = ("created_at",)

    def save_model(self, request, obj: Rate, form, change: bool) -> None:
        """Save through the service (it closes an earlier open rate and re-prices history)."""
        saved = services.rate_set(
            rate=obj if change else None,
            flavor=obj.flavor,
            kind=obj.kind,
            mig_profile=obj.mig_profile,
            price_per_hour=obj.price_per_hour,
            currency=obj.currency,
            effective_from=obj.effective_from,
            effective_to=obj.effective_to,
            note=obj.note,
        )
        obj.pk = saved.pk


@admin.register(Budget)
class BudgetAdmin(admin.ModelAdmin):
    """Team budgets and their thresholds."""

    list_display = ("team", "period", "amount", "currency", "thresholds", "action_at_limit", "active")
    list_filter = ("period", "active", "action_at_limit")
    search_fields = ("team__slug", "team__name")


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    """Metered usage (read-only)."""

    list_display = ("allocation", "team", "user", "flavor", "start", "end", "borrowed", "cost", "currency", "stop")
    list_filter = ("borrowed", "open", "final", "stop", "flavor")
    search_fields = ("team__slug", "user__username", "job__name")
    date_hierarchy = "day"
    list_select_related = ("team", "user", "flavor", "allocation")


@admin.register(UsageDaily)
class UsageDailyAdmin(ReadOnlyAdmin):
    """Daily usage rollups (read-only)."""

    list_display = ("day", "team", "user", "resource_class", "flavor", "owned_us", "borrowed_us", "currency")
    list_filter = ("team",)
    date_hierarchy = "day"
    list_select_related = ("team", "user", "resource_class", "flavor")


@admin.register(UsageTeamDaily)
class UsageTeamDailyAdmin(ReadOnlyAdmin):
    """Daily team-level usage rollups (read-only)."""

    list_display = ("day", "team", "resource_class", "flavor", "owned_us", "borrowed_us", "currency")
    list_filter = ("team",)
    date_hierarchy = "day"
    list_select_related = ("team", "resource_class", "flavor")


@admin.register(CapacityDaily)
class CapacityDailyAdmin(ReadOnlyAdmin):
    """Daily reserved-capacity rollups (read-only)."""

    list_display = ("day", "team", "flavor", "resource_name", "nominal", "idle_us", "lent_us", "idle_cost")
    list_filter = ("team",)
    date_hierarchy = "day"


@admin.register(UsageTeamMonthly)
class UsageTeamMonthlyAdmin(ReadOnlyAdmin):
    """Monthly team-level usage rollups, the sums of the daily ones (read-only)."""

    list_display = ("month", "team", "resource_class", "flavor", "owned_us", "borrowed_us", "currency")
    list_filter = ("team",)
    date_hierarchy = "month"
    list_select_related = ("team", "resource_class", "flavor")


@admin.register(CapacityTeamMonthly)
class CapacityTeamMonthlyAdmin(ReadOnlyAdmin):
    """Monthly reserved-capacity rollups per team, the sums of the daily ones (read-only)."""

    list_display = ("month", "team", "currency", "reserved_us", "idle_us", "lent_us", "idle_cost")
    list_filter = ("team",)
    date_hierarchy = "month"
    list_select_related = ("team",)


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdmin):
    """Billing notifications sent to teams (read-only)."""

    list_display = ("created_at", "team", "kind", "threshold", "message")
    list_filter = ("kind",)


@admin.register(TeamDemotion)
class TeamDemotionAdmin(ReadOnlyAdmin):
    """Budget demotions; the action lifts them (the row stays as history)."""

    list_display = ("team", "priority_class", "started_at", "lifted_at", "lifted_by")
    list_filter = ("lifted_at",)
    actions = ["lift"]

    def has_change_permission(self, request, obj=None) -> bool:
        """Allow the list action (the fields themselves stay read-only)."""
        return request.user.has_perm("billing.change_teamdemotion")

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    @admin.action(description="Lift the selected demotions")
    def lift(self, request, queryset) -> None:
        """Undo demotions through the service."""
        lifted = 0
        for demotion in queryset.filter(lifted_at__isnull=True).select_related("team"):
            services.team_demotion_lift(
                team=demotion.team, now=timezone.now(), user=request.user, reason="Lifted in admin."
            )
            lifted += 1
        self.message_user(request, f"{lifted} demotion(s) lifted.")


class CohortSettlementForm(forms.ModelForm):
    """A settlement from a month's first day, for a root cohort (where the ledger's borrowing is attributed)."""

    class Meta:
        model = CohortSettlement
        fields = ("cohort", "effective_from", "share_percent", "note")

    def clean(self):
        data = super().clean()
        if data.get("cohort") is not None and data.get("effective_from") is not None:
            errors = settlement_errors(
                cohort=data["cohort"], effective_from=data["effective_from"], share_percent=data.get("share_percent")
            )
            for field, messages in errors.items():
                for message in messages:
                    self.add_error(field, message[0].upper() + message[1:] + ".")
        return data


@admin.register(CohortSettlement)
class CohortSettlementAdmin(admin.ModelAdmin):
    """Internal settlement of a cohort's borrowing, month by month (docs/billing.md, Borrowing ledger)."""

    form = CohortSettlementForm
    list_display = ("cohort", "effective_from", "share_percent", "note", "created_at")
    list_select_related = ("cohort",)
    ordering = ("cohort__name", "-effective_from")

    def save_model(self, request, obj, form, change) -> None:
        """Through the service (the one writer)."""
        saved = settlement_set(
            cohort=obj.cohort, effective_from=obj.effective_from, share_percent=obj.share_percent, note=obj.note
        )
        obj.pk = saved.pk


@admin.register(LedgerMonthly)
class LedgerMonthlyAdmin(ReadOnlyAdmin):
    """The borrowing ledger per month (read-only: the rollups write it)."""

    list_display = ("month", "lender", "borrower", "flavor", "resource_name", "lent_us", "value", "currency")
    list_filter = ("month",)
    list_select_related = ("lender", "borrower", "flavor")


@admin.register(ReclaimRecord)
class ReclaimRecordAdmin(ReadOnlyAdmin):
    """Reclaims of borrowed capacity (read-only: the rollups write them)."""

    list_display = ("at", "victim_team", "reclaimer_team", "victim_job", "devices", "lost_device_hours", "reason")
    list_select_related = ("victim_team", "reclaimer_team", "victim_job")
