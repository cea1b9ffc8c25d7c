"""What would have helped, the requests: queue a study of a cluster's recent history (the replays are
``queues.waiting.study_replay``, run by the worker), and read the latest ones."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from kernel.errors import ValidationFailed
from pools.models import Cluster
from queues.models import WaitActionStudy
from queues.tasks import wait_study
from queues.waiting.study_replay import DEFAULT_DAYS, MAX_DAYS

__all__ = ["DEFAULT_DAYS", "MAX_DAYS", "latest_studies", "wait_study_request"]


def _enqueue(study_id: int) -> None:
    wait_study.delay(study_id)


@transaction.atomic
def wait_study_request(*, cluster: Cluster, days: int = DEFAULT_DAYS, now: datetime | None = None) -> WaitActionStudy:
    """Queue a study of the last ``days`` days of ``cluster``; it runs in a worker after commit."""
    if not 1 <= days <= MAX_DAYS:
        raise ValidationFailed({"days": [f"choose between 1 and {MAX_DAYS} days, not {days}"]})
    now = now or timezone.now()
    study = WaitActionStudy.objects.create(
        cluster=cluster, requested_at=now, window_start=now - timedelta(days=days), window_end=now
    )
    transaction.on_commit(lambda: _enqueue(study.pk))
    return study


def latest_studies() -> list[WaitActionStudy]:
    """The latest study of each cluster."""
    seen: set[int] = set()
    out = []
    for study in WaitActionStudy.objects.select_related("cluster").order_by("-requested_at", "-pk")[:50]:
        if study.cluster_id not in seen:
            seen.add(study.cluster_id)
            out.append(study)
    return out
