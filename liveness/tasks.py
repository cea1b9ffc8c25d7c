"""Celery tasks of liveness (``liveness.*`` task names)."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from kernel.tasks import DB_RETRY
from liveness.broker import embedded_broker_prune
from liveness.services import heartbeats_prune


@shared_task(name="liveness.prune", ignore_result=True, **DB_RETRY)
def prune() -> None:
    """Beat entry: forget heartbeats of processes gone for a week, and messages the embedded broker's workers took
    more than an hour ago (idempotent)."""
    now = timezone.now()
    heartbeats_prune(now=now)
    embedded_broker_prune(now=now)
