"""Reservations: a team books devices of one class for a time window; the rules they are checked against; previews."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from kernel.history import PolicyHistory
from pools.models import Cluster, ResourceClass, ResourceFlavor
from queues.models.teams import Team


class ReservationPolicy(models.Model):
    """The rules a reservation request is checked against (one row, edited in the admin).

    Hard limits refuse a request at once with the reason; within the automatic limits it is approved at once,
    beyond them (but within the hard limits and the capacity) it waits for an admin.
    """

    auto_approve = models.BooleanField(
        default=True, help_text="Approve requests within the automatic limits at once (off: an admin decides all)."
    )
    auto_max_devices = models.PositiveIntegerField(
        default=8, help_text="Requests of at most this many devices may be approved automatically."
    )
    auto_max_hours_per_week = models.PositiveIntegerField(
        default=24,
        help_text="… while the team's reservations (this one included) cover at most this many hours in each week.",
    )
    auto_max_days_ahead = models.PositiveIntegerField(
        default=14, help_text="… and the window starts at most this many days ahead."
    )
    max_hours_per_week = models.PositiveIntegerField(
        default=72,
        help_text="A team's reservations may cover at most this many hours in one week (Monday to Sunday); more is "
        "refused.",
    )
    max_days_ahead = models.PositiveIntegerField(
        default=90, help_text="A window may start at most this many days ahead; later is refused."
    )
    max_window_hours = models.PositiveIntegerField(default=72, help_text="One window may last at most this long.")
    min_window_minutes = models.PositiveIntegerField(default=30, help_text="One window lasts at least this long.")
    history = PolicyHistory()

    class Meta:
        verbose_name = "reservation rules"
        verbose_name_plural = "reservation rules"

    def __str__(self) -> str:
        return "reservation rules"


class Reservation(models.Model):
    """Devices of one flavor (and class) booked by a team for a window on one cluster, and what became of it.

    While approved and in its window the team's guaranteed quota of that flavor rises by ``count`` and the rest of
    its cohort's falls by as much (``queues.engine.reservations``); ``opened_at`` / ``closed_at`` record when the
    portal applied the window's edges to the cluster and ``shifts`` what moved then (billing reads it).
    """

    class State(models.TextChoices):
        REQUESTED = "requested", "Waiting for an admin"
        APPROVED = "approved", "Approved"
        REFUSED = "refused", "Refused"
        CANCELLED = "cancelled", "Cancelled"

    class Decision(models.TextChoices):
        AUTO = "auto", "Approved automatically within the rules"
        ADMIN = "admin", "Decided by an admin"
        RULES = "rules", "Refused at once by the rules"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="reservations")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="reservations")
    resource_class = models.ForeignKey(
        ResourceClass, null=True, blank=True, on_delete=models.SET_NULL, related_name="reservations"
    )
    flavor = models.ForeignKey(ResourceFlavor, on_delete=models.PROTECT, related_name="reservations")
    resource_name = models.CharField(max_length=253)
    count = models.PositiveIntegerField()
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    purpose = models.CharField(max_length=200, help_text='What it is for, e.g. "evaluation run before the release".')
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_at = models.DateTimeField()
    state = models.CharField(max_length=10, choices=State.choices, default=State.REQUESTED)
    decision = models.CharField(max_length=10, choices=Decision.choices, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    reasons = models.JSONField(
        default=list, blank=True, help_text="Why it was refused, or why it waits for an admin: one sentence each."
    )
    decision_note = models.CharField(max_length=300, blank=True, help_text="The admin's words with the decision.")
    cancelled_at = models.DateTimeField(null=True, blank=True)
    cancelled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    opened_at = models.DateTimeField(null=True, blank=True, help_text="When its start was applied to the cluster.")
    closed_at = models.DateTimeField(null=True, blank=True, help_text="When its end was applied to the cluster.")
    shifts = models.JSONField(
        default=list, blank=True, help_text="What moved when it opened: [{kind, name, team_id, delta}], by queue."
    )
    history = PolicyHistory(bookkeeping=("opened_at", "closed_at", "shifts"))

    class Meta:
        ordering = ["starts_at", "pk"]
        constraints = [
            models.CheckConstraint(condition=Q(ends_at__gt=F("starts_at")), name="reservation_ends_after_start"),
            models.CheckConstraint(condition=Q(count__gt=0), name="reservation_count_positive"),
        ]
        indexes = [
            models.Index(fields=["cluster", "flavor", "state", "starts_at"], name="reservation_window"),
            models.Index(fields=["team", "starts_at"], name="reservation_team"),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.team} {self.count}× {self.flavor} {self.starts_at:%Y-%m-%d %H:%M}"

    @property
    def window_end(self) -> datetime:
        """When it stops holding capacity: its end, or when it was cancelled if that was earlier."""
        if self.cancelled_at is not None and self.cancelled_at < self.ends_at:
            return max(self.cancelled_at, self.starts_at)
        return self.ends_at

    @property
    def hours(self) -> float:
        """Length of the window booked, in hours."""
        return (self.ends_at - self.starts_at).total_seconds() / 3600

    @property
    def is_live(self) -> bool:
        """Requested or approved: it still counts (against the week's limit; approved ones against capacity)."""
        return self.state in (self.State.REQUESTED, self.State.APPROVED)


class ReservationPreview(models.Model):
    """A what-if of a reservation before it is decided: recent history replayed with it in place (a status row)."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    reservation = models.ForeignKey(Reservation, on_delete=models.CASCADE, related_name="previews")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_at = models.DateTimeField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    progress = models.FloatField(default=0.0)
    progress_text = models.CharField(max_length=200, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-requested_at", "-id"]

    def __str__(self) -> str:
        return f"preview #{self.pk} of reservation #{self.reservation_id} ({self.status})"

    @property
    def is_finished(self) -> bool:
        """Whether the replay ended (done or failed)."""
        return self.status in (self.Status.DONE, self.Status.FAILED)
