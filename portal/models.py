"""Models of the site shell: what the metrics endpoint needs that no app records (Celery task failures)."""

from __future__ import annotations

from django.db import models


class TaskFailure(models.Model):
    """How often a Celery task has failed, over every worker process (a counter the ``/metrics`` scrape reads).

    One row per task name; written by the ``task_failure`` signal handler in :mod:`portal.task_failures`.
    """

    task = models.CharField(max_length=200, unique=True, help_text="The registered Celery task name.")
    count = models.PositiveBigIntegerField(default=0)
    last_failure_at = models.DateTimeField()
    last_error = models.TextField(blank=True, help_text="The last exception, as its class and message.")

    class Meta:
        ordering = ["task"]

    def __str__(self) -> str:
        return f"{self.task}: {self.count} failure(s)"
