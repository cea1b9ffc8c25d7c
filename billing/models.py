"""Models of metering and cost: rates, metered usage, daily rollups, budgets and their notifications.

Device time is kept in whole microseconds (``*_us`` integer columns) so that sums are exact on every
database; money is ``Decimal``. ``billing.services`` is the only writer of every model here.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from pools.models import Allocation, Cluster, Device, ResourceClass, ResourceFlavor
from queues.models import Cohort, Job, PriorityClass, Team

#: Microseconds in an hour: device-hours = ``*_us`` / US_PER_HOUR.
US_PER_HOUR = 3_600_000_000


class Rate(models.Model):
    """Price of one device-hour of a flavor, per unit kind (full card, MIG profile, time-shared replica).

    ``kind=full`` prices the whole card; ``kind=mig`` with a profile prices one slice of that profile, and
    ``kind=shared`` (profile empty, or the MIG profile being shared) one time-shared replica. A unit with no
    rate of its own is priced as its fraction of the full-card rate. A rate is in force from
    ``effective_from`` (inclusive) to ``effective_to`` (exclusive; empty = open); periods of one key never
    overlap (``billing.services.rate_set`` checks it).
    """

    class Kind(models.TextChoices):
        FULL = Device.Kind.FULL.value, "Full card"
        MIG = Device.Kind.MIG.value, "MIG slice"
        SHARED = Device.Kind.SHARED.value, "Time-shared replica"

    flavor = models.ForeignKey(ResourceFlavor, on_delete=models.PROTECT, related_name="rates")
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.FULL)
    mig_profile = models.CharField(
        max_length=40, blank=True, help_text="MIG profile such as 1g.10gb (MIG slices, shared MIG replicas)."
    )
    price_per_hour = models.DecimalField(max_digits=14, decimal_places=6, help_text="Per device-hour of this unit.")
    currency = models.CharField(max_length=3, help_text="ISO 4217 code, e.g. EUR.")
    effective_from = models.DateTimeField()
    effective_to = models.DateTimeField(null=True, blank=True, help_text="Exclusive; empty: still in force.")
    note = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["flavor", "kind", "mig_profile", "effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["flavor", "kind", "mig_profile", "effective_from"], name="rate_once_per_key_and_start"
            ),
            models.CheckConstraint(
                condition=Q(effective_to__isnull=True) | Q(effective_to__gt=models.F("effective_from")),
                name="rate_period_not_empty",
            ),
            models.CheckConstraint(condition=Q(price_per_hour__gte=0), name="rate_price_not_negative"),
            models.CheckConstraint(condition=~Q(kind="full") | Q(mig_profile=""), name="rate_full_has_no_profile"),
            models.CheckConstraint(condition=~Q(kind="mig") | ~Q(mig_profile=""), name="rate_mig_names_profile"),
        ]

    def __str__(self) -> str:
        unit = self.get_kind_display() + (f" {self.mig_profile}" if self.mig_profile else "")
        return f"{self.flavor.name} {unit}: {self.price_per_hour} {self.currency}/h from {self.effective_from:%Y-%m-%d}"


class UsageRecord(models.Model):
    """Metered device time of one allocation within one billing day and one rate period.

    Keyed by ``(allocation, start)``: a metering run recomputes an allocation's records from its
    timestamps and converges on the same rows, so running it again changes nothing. ``open`` records end
    at the time of the last run (the allocation was still held); ``final`` ones were computed from the
    allocation's true end and are not looked at again unless the allocation or a rate changes.
    """

    class Stop(models.TextChoices):
        OPEN = "open", "Still held (metered up to the last run)"
        ENDED = "ended", "Allocation ended"
        JOB_FINISHED = "job_finished", "Job finished while the allocation was open"
        DEVICE_GONE = "device_gone", "Device disappeared"
        NODE_GONE = "node_gone", "Node disappeared"
        SPLIT = "split", "Continues in the next record"

    allocation = models.ForeignKey(Allocation, on_delete=models.CASCADE, related_name="usage_records")
    start = models.DateTimeField()
    end = models.DateTimeField()
    duration_us = models.BigIntegerField(help_text="Microseconds the unit was held in [start, end).")
    day = models.DateField(help_text="Billing day (settings.BILLING_TIME_ZONE) of the record.")
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="usage_records")
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="usage_records")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="usage_records")
    resource_class = models.ForeignKey(ResourceClass, on_delete=models.PROTECT, related_name="usage_records")
    flavor = models.ForeignKey(
        ResourceFlavor, null=True, blank=True, on_delete=models.PROTECT, related_name="usage_records"
    )
    resource_name = models.CharField(max_length=253)
    unit_kind = models.CharField(max_length=10, choices=Rate.Kind.choices)
    mig_profile = models.CharField(max_length=40, blank=True)
    slice_fraction = models.DecimalField(max_digits=12, decimal_places=10, help_text="Share of a full card.")
    borrowed = models.BooleanField(help_text="Above the team's nominal quota at admission.")
    rate = models.ForeignKey(Rate, null=True, blank=True, on_delete=models.PROTECT, related_name="usage_records")
    unit_price = models.DecimalField(max_digits=20, decimal_places=10, help_text="Per hour of this unit.")
    currency = models.CharField(max_length=3)
    cost = models.DecimalField(max_digits=20, decimal_places=8)
    open = models.BooleanField(default=False)
    final = models.BooleanField(default=False)
    stop = models.CharField(max_length=20, choices=Stop.choices)
    source_start = models.DateTimeField(help_text="Allocation start the record was computed from.")
    source_end = models.DateTimeField(null=True, blank=True, help_text="Allocation end it was computed from.")
    metered_at = models.DateTimeField()

    class Meta:
        ordering = ["allocation", "start"]
        constraints = [
            models.UniqueConstraint(fields=["allocation", "start"], name="usage_once_per_allocation_start"),
            models.CheckConstraint(condition=Q(end__gte=models.F("start")), name="usage_end_after_start"),
            models.CheckConstraint(condition=Q(duration_us__gte=0), name="usage_duration_not_negative"),
        ]
        indexes = [
            models.Index(fields=["team", "day"], name="usage_team_day"),
            models.Index(fields=["day"], name="usage_day"),
            models.Index(fields=["allocation", "final"], name="usage_allocation_final"),
            models.Index(fields=["job"], name="usage_job"),
            # The metering sweep revisits records not yet final (open, or their allocation closed since).
            models.Index(fields=["allocation"], condition=Q(final=False), name="usage_not_final"),
        ]

    def __str__(self) -> str:
        return f"allocation {self.allocation_id} {self.start:%Y-%m-%d %H:%M}–{self.end:%H:%M}"


class UsageDaily(models.Model):
    """Daily rollup: team × user × class × flavor × day × currency; device time, cost and lost hours."""

    day = models.DateField()
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="usage_daily")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="usage_daily")
    resource_class = models.ForeignKey(ResourceClass, on_delete=models.CASCADE, related_name="usage_daily")
    flavor = models.ForeignKey(
        ResourceFlavor, null=True, blank=True, on_delete=models.CASCADE, related_name="usage_daily"
    )
    currency = models.CharField(max_length=3)
    owned_us = models.BigIntegerField(default=0)
    borrowed_us = models.BigIntegerField(default=0)
    owned_cost = models.DecimalField(max_digits=20, decimal_places=8, default=0)
    borrowed_cost = models.DecimalField(max_digits=20, decimal_places=8, default=0)
    lost_preemption_hours = models.DecimalField(max_digits=16, decimal_places=6, default=0)
    lost_hardware_hours = models.DecimalField(max_digits=16, decimal_places=6, default=0)
    idle_held_us = models.BigIntegerField(
        default=0, help_text="Device time held by running jobs while their GPUs were idle (DCGM), within the usage."
    )

    class Meta:
        ordering = ["day", "team", "user", "resource_class"]
        verbose_name_plural = "usage daily rollups"
        constraints = [
            models.UniqueConstraint(
                fields=["day", "team", "user", "resource_class", "flavor", "currency"],
                condition=Q(flavor__isnull=False),
                name="usage_daily_once",
            ),
            models.UniqueConstraint(
                fields=["day", "team", "user", "resource_class", "currency"],
                condition=Q(flavor__isnull=True),
                name="usage_daily_once_no_flavor",
            ),
        ]
        indexes = [models.Index(fields=["team", "day"], name="usage_daily_team_day")]

    def __str__(self) -> str:
        return f"{self.day} {self.team_id}/{self.user_id}/{self.resource_class_id}"


class UsageTeamDaily(models.Model):
    """Daily rollup without the user: team × class × flavor × day × currency (the same sums as ``UsageDaily``).

    Reports that are not filtered by user (and the all-teams view) read this one: ~users times fewer rows.
    """

    day = models.DateField()
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="usage_team_daily")
    resource_class = models.ForeignKey(ResourceClass, on_delete=models.CASCADE, related_name="usage_team_daily")
    flavor = models.ForeignKey(
        ResourceFlavor, null=True, blank=True, on_delete=models.CASCADE, related_name="usage_team_daily"
    )
    currency = models.CharField(max_length=3)
    owned_us = models.BigIntegerField(default=0)
    borrowed_us = models.BigIntegerField(default=0)
    owned_cost = models.DecimalField(max_digits=20, decimal_places=8, default=0)
    borrowed_cost = models.DecimalField(max_digits=20, decimal_places=8, default=0)
    lost_preemption_hours = models.DecimalField(max_digits=16, decimal_places=6, default=0)
    lost_hardware_hours = models.DecimalField(max_digits=16, decimal_places=6, default=0)
    idle_held_us = models.BigIntegerField(
        default=0, help_text="Device time held by running jobs while their GPUs were idle (DCGM), within the usage."
    )

    class Meta:
        ordering = ["day", "team", "resource_class"]
        verbose_name_plural = "usage team daily rollups"
        constraints = [
            models.UniqueConstraint(
                fields=["day", "team", "resource_class", "flavor", "currency"],
                condition=Q(flavor__isnull=False),
                name="usage_team_daily_once",
            ),
            models.UniqueConstraint(
                fields=["day", "team", "resource_class", "currency"],
                condition=Q(flavor__isnull=True),
                name="usage_team_daily_once_no_flavor",
            ),
        ]
        indexes = [
            models.Index(fields=["team", "day"], name="usage_team_daily_team_day"),
            models.Index(fields=["day"], name="usage_team_daily_day"),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.team_id}/{self.resource_class_id}"


class CapacityDaily(models.Model):
    """Daily rollup of a team's reserved capacity per (flavor, resource): nominal, owned use, idle, lent.

    Idle is computed hour by hour (nominal − owned use, never negative) and summed over the day; lent is
    the part of the idle time that other teams of the cohort consumed by borrowing. Reserved counts only the nominal
    quota healthy devices backed; the rest is ``unbacked`` (GPUs in repair), reported and not charged.
    """

    day = models.DateField()
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="capacity_daily")
    flavor = models.ForeignKey(ResourceFlavor, on_delete=models.CASCADE, related_name="capacity_daily")
    resource_name = models.CharField(max_length=253)
    nominal = models.DecimalField(max_digits=14, decimal_places=3, help_text="Units of nominal quota.")
    reserved_us = models.BigIntegerField(default=0, help_text="Nominal × the hours counted.")
    owned_us = models.BigIntegerField(default=0)
    idle_us = models.BigIntegerField(default=0)
    lent_us = models.BigIntegerField(default=0)
    unbacked_us = models.BigIntegerField(
        default=0,
        help_text="Nominal quota healthy devices did not back (repairs) × the hours: neither reserved nor charged.",
    )
    currency = models.CharField(max_length=3)
    idle_cost = models.DecimalField(max_digits=20, decimal_places=8, default=0)
    lent_credit = models.DecimalField(max_digits=20, decimal_places=8, default=0)
    counted_until = models.DateTimeField(help_text="Hours after this instant were not counted yet (today).")

    class Meta:
        ordering = ["day", "team", "flavor", "resource_name"]
        verbose_name_plural = "capacity daily rollups"
        constraints = [
            models.UniqueConstraint(fields=["day", "team", "flavor", "resource_name"], name="capacity_daily_once"),
            models.CheckConstraint(condition=Q(idle_us__gte=0) & Q(lent_us__gte=0), name="capacity_not_negative"),
        ]
        indexes = [models.Index(fields=["team", "day"], name="capacity_daily_team_day")]

    def __str__(self) -> str:
        return f"{self.day} {self.team_id} {self.flavor_id}/{self.resource_name}"


class UsageTeamMonthly(models.Model):
    """Monthly rollup: team × class × flavor × month × currency, the exact sums of ``UsageTeamDaily`` over the month.

    ``usage_rollup`` rewrites a month's rows each time it rolls one of its days, so they always equal the daily
    rows; reports over whole months (the all-teams view, per-month charts) read ~30 times fewer rows.
    """

    month = models.DateField(help_text="First day of the month.")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="usage_team_monthly")
    resource_class = models.ForeignKey(ResourceClass, on_delete=models.CASCADE, related_name="usage_team_monthly")
    flavor = models.ForeignKey(
        ResourceFlavor, null=True, blank=True, on_delete=models.CASCADE, related_name="usage_team_monthly"
    )
    currency = models.CharField(max_length=3)
    owned_us = models.BigIntegerField(default=0)
    borrowed_us = models.BigIntegerField(default=0)
    owned_cost = models.DecimalField(max_digits=20, decimal_places=8, default=0)
    borrowed_cost = models.DecimalField(max_digits=20, decimal_places=8, default=0)
    lost_preemption_hours = models.DecimalField(max_digits=16, decimal_places=6, default=0)
    lost_hardware_hours = models.DecimalField(max_digits=16, decimal_places=6, default=0)
    idle_held_us = models.BigIntegerField(
        default=0, help_text="Device time held by running jobs while their GPUs were idle (DCGM), within the usage."
    )

    class Meta:
        ordering = ["month", "team", "resource_class"]
        verbose_name_plural = "usage team monthly rollups"
        constraints = [
            models.UniqueConstraint(
                fields=["month", "team", "resource_class", "flavor", "currency"],
                condition=Q(flavor__isnull=False),
                name="usage_team_monthly_once",
            ),
            models.UniqueConstraint(
                fields=["month", "team", "resource_class", "currency"],
                condition=Q(flavor__isnull=True),
                name="usage_team_monthly_once_no_flavor",
            ),
        ]
        indexes = [
            models.Index(fields=["team", "month"], name="usage_team_monthly_team_month"),
            models.Index(fields=["month"], name="usage_team_monthly_month"),
        ]

    def __str__(self) -> str:
        return f"{self.month:%Y-%m} {self.team_id}/{self.resource_class_id}"


class CapacityTeamMonthly(models.Model):
    """Monthly rollup of a team's reserved capacity per currency: the exact sums of ``CapacityDaily`` over the month."""

    month = models.DateField(help_text="First day of the month.")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="capacity_team_monthly")
    currency = models.CharField(max_length=3)
    reserved_us = models.BigIntegerField(default=0)
    idle_us = models.BigIntegerField(default=0)
    lent_us = models.BigIntegerField(default=0)
    unbacked_us = models.BigIntegerField(default=0)
    idle_cost = models.DecimalField(max_digits=20, decimal_places=8, default=0)
    lent_credit = models.DecimalField(max_digits=20, decimal_places=8, default=0)

    class Meta:
        ordering = ["month", "team", "currency"]
        verbose_name_plural = "capacity team monthly rollups"
        constraints = [
            models.UniqueConstraint(fields=["month", "team", "currency"], name="capacity_team_monthly_once"),
        ]
        indexes = [models.Index(fields=["team", "month"], name="capacity_monthly_team_month")]

    def __str__(self) -> str:
        return f"{self.month:%Y-%m} {self.team_id} {self.currency}"


class RollupDay(models.Model):
    """Bookkeeping of one billing day: metering changed it since its last rollup, and until when it was rolled."""

    day = models.DateField(unique=True)
    dirty = models.BooleanField(default=True)
    complete = models.BooleanField(default=False, help_text="Rolled up after the day had ended.")
    rolled_at = models.DateTimeField(null=True, blank=True)
    rolled_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["day"]

    def __str__(self) -> str:
        return f"{self.day}{' (dirty)' if self.dirty else ''}"


class MeteringCursor(models.Model):
    """Where the incremental metering sweep starts looking for allocations it has never metered.

    Every allocation with ``pk <= checked_allocation_id`` has been metered (or is open, or has records not yet
    final, which the sweep revisits anyway). ``seen_allocation_id`` is the highest pk at the run at
    ``seen_at``; it becomes the checked mark once it is ``CURSOR_LAG`` old, so an insert committed late (its
    pk was taken before a run but committed after it) is still found. The daily full sweep heals the rest.
    """

    name = models.CharField(max_length=60, unique=True)
    checked_allocation_id = models.BigIntegerField(default=0)
    seen_allocation_id = models.BigIntegerField(default=0)
    seen_at = models.DateTimeField(null=True, blank=True)
    full_sweep_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name}: checked up to allocation {self.checked_allocation_id}"


class QuotaPeriod(models.Model):
    """A team's nominal quota (and lending limit) on a (cluster, flavor, resource) during a period of time.

    Recorded by ``billing.services.quota_history_sync`` from the live quota lines on every metering run, so idle
    reserved hours of past days use the nominal in force at the time. ``valid_from`` empty: in force since
    before billing first looked (a backfill assumes the first quota seen); ``valid_to`` empty: still in force.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="quota_periods")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    flavor = models.ForeignKey(ResourceFlavor, on_delete=models.CASCADE, related_name="+")
    resource_name = models.CharField(max_length=253)
    nominal = models.DecimalField(max_digits=14, decimal_places=3)
    lending_limit = models.DecimalField(
        max_digits=14, decimal_places=3, null=True, blank=True, help_text="Empty: all unused quota may be lent."
    )
    backed = models.DecimalField(
        max_digits=14,
        decimal_places=3,
        null=True,
        blank=True,
        help_text="How much of the nominal quota healthy devices backed (queues.guarantees): the reservation charged. "
        "Empty: all of it.",
    )
    valid_from = models.DateTimeField(null=True, blank=True)
    valid_to = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["team", "flavor", "resource_name", "valid_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "cluster", "flavor", "resource_name"],
                condition=Q(valid_to__isnull=True),
                name="one_current_quota_period",
            ),
        ]
        indexes = [models.Index(fields=["team", "flavor", "resource_name"], name="quota_period_key")]

    def __str__(self) -> str:
        until = f"{self.valid_to:%Y-%m-%d %H:%M}" if self.valid_to else "now"
        since = f"{self.valid_from:%Y-%m-%d %H:%M}" if self.valid_from else "…"
        return f"{self.team_id} {self.flavor_id}/{self.resource_name} = {self.nominal} ({since} – {until})"


class BillingLock(models.Model):
    """A named row locked (``SELECT … FOR UPDATE``) to serialise metering and rollups across workers."""

    name = models.CharField(max_length=60, unique=True)

    def __str__(self) -> str:
        return self.name


class Budget(models.Model):
    """A team's spending budget per month or quarter, with alert thresholds in percent."""

    class Period(models.TextChoices):
        MONTH = "month", "Month"
        QUARTER = "quarter", "Quarter"

    class Action(models.TextChoices):
        NONE = "", "Notify only"
        DEMOTE = "demote", "Demote to borrow-only / preemptible at 100 %"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="budgets")
    period = models.CharField(max_length=10, choices=Period.choices, default=Period.MONTH)
    amount = models.DecimalField(max_digits=16, decimal_places=2)
    currency = models.CharField(max_length=3)
    thresholds = models.JSONField(default=list, help_text="Percentages, e.g. [50, 80, 100].")
    action_at_limit = models.CharField(max_length=10, choices=Action.choices, default=Action.NONE, blank=True)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team", "period"]
        constraints = [
            models.UniqueConstraint(fields=["team", "period", "currency"], name="budget_once_per_team_period"),
            models.CheckConstraint(condition=Q(amount__gt=0), name="budget_amount_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.team} {self.amount} {self.currency} per {self.period}"


class Notification(models.Model):
    """An in-portal notice to a team (shown on the cost page); budget alerts are unique per threshold and period."""

    class Kind(models.TextChoices):
        BUDGET_THRESHOLD = "budget_threshold", "Budget threshold reached"
        DEMOTED = "demoted", "Team demoted to borrow-only"
        DEMOTION_LIFTED = "demotion_lifted", "Demotion lifted"
        DEMOTION_FAILED = "demotion_failed", "Demotion could not be applied"
        RESERVATION_UNUSED = "reservation_unused", "Reservation (partly) unused"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="billing_notifications")
    kind = models.CharField(max_length=30, choices=Kind.choices)
    budget = models.ForeignKey(Budget, null=True, blank=True, on_delete=models.CASCADE, related_name="notifications")
    reservation = models.ForeignKey(
        "queues.Reservation", null=True, blank=True, on_delete=models.CASCADE, related_name="billing_notifications"
    )
    period_start = models.DateField(null=True, blank=True)
    threshold = models.PositiveIntegerField(null=True, blank=True)
    spent = models.DecimalField(max_digits=20, decimal_places=2, null=True, blank=True)
    message = models.TextField()
    created_at = models.DateTimeField()
    emailed_to = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["budget", "period_start", "threshold"],
                condition=Q(kind="budget_threshold"),
                name="budget_threshold_notified_once",
            ),
            models.UniqueConstraint(
                fields=["reservation"],
                condition=Q(kind="reservation_unused"),
                name="reservation_unused_notified_once",
            ),
        ]
        indexes = [models.Index(fields=["team", "-created_at"], name="notification_team_recent")]

    def __str__(self) -> str:
        return f"{self.team}: {self.message[:60]}"


class TeamDemotion(models.Model):
    """A team's future submissions forced to a non-preempting, lowest priority class (reversible).

    At most one active demotion per team; lifting it sets ``lifted_at`` and keeps the row as history.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="demotions")
    priority_class = models.ForeignKey(PriorityClass, on_delete=models.PROTECT, related_name="+")
    budget = models.ForeignKey(Budget, null=True, blank=True, on_delete=models.SET_NULL, related_name="demotions")
    period_start = models.DateField(null=True, blank=True)
    reason = models.TextField()
    started_at = models.DateTimeField()
    lifted_at = models.DateTimeField(null=True, blank=True)
    lifted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    lift_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at"]
        constraints = [
            models.UniqueConstraint(fields=["team"], condition=Q(lifted_at__isnull=True), name="one_active_demotion"),
        ]

    def __str__(self) -> str:
        state = "lifted" if self.lifted_at else "active"
        return f"{self.team} → {self.priority_class.name} ({state})"


class LedgerDaily(models.Model):
    """The borrowing ledger: device time one team used of another's guaranteed quota in one billing day.

    Written by ``usage_rollup`` with the day's capacity rows, from the same hour-by-hour attribution: the lender's
    lent time of each hour (``CapacityDaily.lent_us``) split over the teams that borrowed in that hour in
    proportion to what each borrowed; ``value`` is the lender's lent credit of those hours split the same way, so a
    lender's rows add up to its ``lent_us`` and ``lent_credit`` exactly. ``cohort`` is the root cohort both teams
    share (its settlement, if any, applies).
    """

    day = models.DateField()
    cohort = models.ForeignKey(Cohort, on_delete=models.CASCADE, related_name="+")
    lender = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="ledger_lent_daily")
    borrower = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="ledger_borrowed_daily")
    flavor = models.ForeignKey(ResourceFlavor, on_delete=models.CASCADE, related_name="+")
    resource_name = models.CharField(max_length=253)
    currency = models.CharField(max_length=3)
    lent_us = models.BigIntegerField(default=0)
    value = models.DecimalField(max_digits=20, decimal_places=8, default=0)

    class Meta:
        ordering = ["day", "lender", "borrower"]
        verbose_name_plural = "ledger daily rows"
        constraints = [
            models.UniqueConstraint(
                fields=["day", "lender", "borrower", "flavor", "resource_name", "currency"], name="ledger_daily_once"
            ),
            models.CheckConstraint(condition=~Q(lender=models.F("borrower")), name="ledger_daily_two_teams"),
        ]
        indexes = [
            models.Index(fields=["lender", "day"], name="ledger_daily_lender"),
            models.Index(fields=["borrower", "day"], name="ledger_daily_borrower"),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.lender_id} → {self.borrower_id}: {self.lent_us} µs"


class LedgerMonthly(models.Model):
    """The borrowing ledger per month: the exact sums of ``LedgerDaily`` (rewritten with the month's rollup)."""

    month = models.DateField(help_text="First day of the month.")
    cohort = models.ForeignKey(Cohort, on_delete=models.CASCADE, related_name="+")
    lender = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="ledger_lent_monthly")
    borrower = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="ledger_borrowed_monthly")
    flavor = models.ForeignKey(ResourceFlavor, on_delete=models.CASCADE, related_name="+")
    resource_name = models.CharField(max_length=253)
    currency = models.CharField(max_length=3)
    lent_us = models.BigIntegerField(default=0)
    value = models.DecimalField(max_digits=20, decimal_places=8, default=0)

    class Meta:
        ordering = ["month", "lender", "borrower"]
        verbose_name_plural = "ledger monthly rows"
        constraints = [
            models.UniqueConstraint(
                fields=["month", "lender", "borrower", "flavor", "resource_name", "currency"],
                name="ledger_monthly_once",
            ),
        ]
        indexes = [
            models.Index(fields=["lender", "month"], name="ledger_monthly_lender"),
            models.Index(fields=["borrower", "month"], name="ledger_monthly_borrower"),
        ]

    def __str__(self) -> str:
        return f"{self.month:%Y-%m} {self.lender_id} → {self.borrower_id}: {self.lent_us} µs"


class ReclaimRecord(models.Model):
    """A reclaim: a running job of one team preempted so that another team of the cohort gets its quota back
    (Kueue's ``InCohortReclamation``, ``InCohortReclaimWhileBorrowing`` or ``InCohortFairSharing``), with the
    device-hours of work it lost (its requeue's ``lostDeviceHours``; 0 when it had checkpointed)."""

    day = models.DateField()
    at = models.DateTimeField()
    victim_job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="+")
    victim_team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="reclaims_suffered")
    preemptor_job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    reclaimer_team = models.ForeignKey(
        Team, null=True, blank=True, on_delete=models.SET_NULL, related_name="reclaims_made"
    )
    reason = models.CharField(max_length=40)
    devices = models.PositiveIntegerField(default=0)
    lost_device_hours = models.DecimalField(max_digits=16, decimal_places=6, default=0)

    class Meta:
        ordering = ["at", "victim_job"]
        constraints = [models.UniqueConstraint(fields=["victim_job", "at"], name="reclaim_once")]
        indexes = [
            models.Index(fields=["victim_team", "day"], name="reclaim_victim_day"),
            models.Index(fields=["reclaimer_team", "day"], name="reclaim_reclaimer_day"),
            models.Index(fields=["day"], name="reclaim_day"),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} job {self.victim_job_id} reclaimed ({self.reason})"


class CohortSettlement(models.Model):
    """Internal settlement of a root cohort's borrowing, from a month on: the borrower pays the lender
    ``share_percent`` of the rate for what it used of the lender's guaranteed quota, instead of the platform
    charging the borrower and crediting the lender the full rate. Empty ``share_percent``: off from that month.

    The row with the latest ``effective_from`` on or before a month's first day applies to the whole month.
    """

    cohort = models.ForeignKey(Cohort, on_delete=models.CASCADE, related_name="settlements")
    effective_from = models.DateField(help_text="First day of the first month it applies to.")
    share_percent = models.DecimalField(
        max_digits=5,
        decimal_places=2,
        null=True,
        blank=True,
        help_text="Share of the rate the lender is credited and the borrower charged (0–100); empty: off.",
    )
    note = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["cohort", "effective_from"]
        constraints = [
            models.UniqueConstraint(fields=["cohort", "effective_from"], name="settlement_once_per_month"),
            models.CheckConstraint(
                condition=Q(share_percent__isnull=True) | (Q(share_percent__gte=0) & Q(share_percent__lte=100)),
                name="settlement_share_in_range",
            ),
        ]

    def __str__(self) -> str:
        state = "off" if self.share_percent is None else f"{self.share_percent} %"
        return f"{self.cohort} settles {state} from {self.effective_from:%Y-%m}"
