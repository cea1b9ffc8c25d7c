"""Heartbeats of the worker and beat processes, and the record of each periodic task (beat entry)."""

from __future__ import annotations

from django.db import models


class ProcessHeartbeat(models.Model):
    """One worker or beat process: when it started, when it was last heard from, when it stopped cleanly.

    Written every ``HEARTBEAT_SECONDS`` by the process itself (a worker's heartbeat thread, beat's loop); a process
    that is killed or frozen stops writing, which is how the portal notices it.
    """

    class Kind(models.TextChoices):
        WORKER = "worker", "Celery worker"
        BEAT = "beat", "Celery beat (scheduler)"

    kind = models.CharField(max_length=10, choices=Kind.choices)
    hostname = models.CharField(max_length=255, help_text="The worker's node name (celery@host), or beat's host.")
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    stopped_at = models.DateTimeField(null=True, blank=True, help_text="Set when the process shut down cleanly.")

    class Meta:
        ordering = ["kind", "-last_seen_at"]
        constraints = [models.UniqueConstraint(fields=["kind", "hostname", "pid", "started_at"], name="heartbeat_once")]
        indexes = [models.Index(fields=["kind", "last_seen_at"], name="heartbeat_kind_seen")]

    def __str__(self) -> str:
        return f"{self.kind} {self.hostname} pid {self.pid}"


class PeriodicTaskState(models.Model):
    """What happened to one beat entry: when beat last sent it, when a worker last ran it, how late, how it ended.

    ``lag`` is the time from beat's send to a worker's start; a run is late past ``PERIODIC_TASK_LATE_SECONDS``
    (or when it expired unrun). Counters add up over every process since the database was created.
    """

    entry = models.CharField(max_length=200, unique=True, help_text="The beat entry's name (CELERY_BEAT_SCHEDULE).")
    task = models.CharField(max_length=200, help_text="The registered Celery task name.")
    interval_seconds = models.FloatField(null=True, blank=True, help_text="Empty for a crontab schedule.")
    last_sent_at = models.DateTimeField(null=True, blank=True)
    last_started_at = models.DateTimeField(null=True, blank=True)
    last_lag_seconds = models.FloatField(null=True, blank=True)
    last_succeeded_at = models.DateTimeField(null=True, blank=True)
    last_failed_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, help_text="The last failure, as its class and message.")
    sent = models.PositiveBigIntegerField(default=0)
    runs = models.PositiveBigIntegerField(default=0)
    failures = models.PositiveBigIntegerField(default=0)
    late = models.PositiveBigIntegerField(default=0, help_text="Runs started late, and sends that expired unrun.")

    class Meta:
        ordering = ["entry"]

    def __str__(self) -> str:
        return self.entry
