"""Wait attribution's rollups: GPU-time of waiting per job × week × cause, its sums per team × class × week ×
cause, the open span of each waiting job, and the cursor of the incremental sync (``queues.waiting.rollup``)."""

from __future__ import annotations

from django.db import models

from pools.models import Cluster, ResourceClass
from queues.models.jobs import Job
from queues.models.teams import Team
from queues.waiting.causes import CAUSE_LABELS

WaitCause = models.TextChoices(
    "WaitCause", [(c.upper(), (c, label)) for c, label in CAUSE_LABELS.items()], module=__name__
)
WaitCause.__doc__ = "What waiting is attributed to (queues.waiting.causes)."


class WaitTally(models.Model):
    """The closed waiting of one job in one week and one cause: device-µs (devices × time) and wall µs.

    Rewritten whole for a job each time its timeline changes; its time still open is in ``WaitOpen``.
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="wait_tallies")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    resource_class = models.ForeignKey(ResourceClass, on_delete=models.CASCADE, related_name="+")
    week = models.DateField(help_text="Monday of the week (BILLING_TIME_ZONE).")
    cause = models.CharField(max_length=20, choices=WaitCause.choices)
    device_us = models.BigIntegerField(default=0)
    wait_us = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "week", "cause"], name="wait_tally_once")]
        indexes = [models.Index(fields=["team", "week", "cause", "-device_us"], name="wait_tally_drill")]

    def __str__(self) -> str:
        return f"job {self.job_id} {self.week} {self.cause}: {self.device_us} device-µs"


class WaitWeekly(models.Model):
    """Closed waiting of a team in one class, week and cause: the sums of its ``WaitTally`` rows (``jobs`` of them)."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    resource_class = models.ForeignKey(ResourceClass, on_delete=models.CASCADE, related_name="+")
    week = models.DateField()
    cause = models.CharField(max_length=20, choices=WaitCause.choices)
    device_us = models.BigIntegerField(default=0)
    wait_us = models.BigIntegerField(default=0)
    jobs = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "resource_class", "week", "cause"], name="wait_weekly_once")
        ]
        indexes = [models.Index(fields=["week", "team"], name="wait_weekly_week")]

    def __str__(self) -> str:
        return f"{self.team_id} {self.week} {self.cause}: {self.device_us} device-µs"


class WaitOpen(models.Model):
    """The open wait span of a job still waiting: since when, for which cause, with how many devices.

    Pages add ``devices × (now − since)`` to the closed sums at read time, so a waiting job's hours grow without a
    write; ``since_us`` (µs since the epoch) lets SQL sum what the open spans of a week add.
    """

    job = models.OneToOneField(Job, primary_key=True, on_delete=models.CASCADE, related_name="wait_open")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    resource_class = models.ForeignKey(ResourceClass, on_delete=models.CASCADE, related_name="+")
    cause = models.CharField(max_length=20, choices=WaitCause.choices)
    code = models.CharField(max_length=30, blank=True)
    since = models.DateTimeField()
    since_us = models.BigIntegerField()
    since_week = models.DateField()
    devices = models.PositiveIntegerField()

    class Meta:
        indexes = [models.Index(fields=["team", "since_week"], name="wait_open_team")]

    def __str__(self) -> str:
        return f"job {self.job_id} waits ({self.cause}) since {self.since:%Y-%m-%d %H:%M}"


class WaitCursor(models.Model):
    """Where the incremental wait-attribution sync stands in the timeline (one row, ``pk=1``; its row lock
    serialises runs).

    Events above ``checked_event_id`` are read on every run; the cursor moves up to the highest id a run saw at
    least ``LAG`` earlier, so an event committed late (its id taken before a run, its transaction committed after)
    is still read.
    """

    checked_event_id = models.BigIntegerField(default=0)
    seen_event_id = models.BigIntegerField(default=0)
    seen_at = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_run_jobs = models.PositiveIntegerField(default=0)
    last_run_seconds = models.FloatField(default=0.0)

    def __str__(self) -> str:
        return f"wait attribution checked up to event {self.checked_event_id}"


class WaitActionStudy(models.Model):
    """The what-if replays behind the admins' "what would have helped": per cause, the action tried on one
    cluster's recorded jobs over a window and the GPU-hours of waiting it saved (``results``), with a status the
    page polls."""

    class State(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="wait_studies")
    requested_at = models.DateTimeField()
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    state = models.CharField(max_length=10, choices=State.choices, default=State.QUEUED)
    step = models.CharField(max_length=120, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    results = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-requested_at", "-id"]

    def __str__(self) -> str:
        return f"wait study of {self.cluster_id} at {self.requested_at:%Y-%m-%d %H:%M} ({self.state})"
