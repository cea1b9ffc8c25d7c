"""Celery tasks of the queues app: thin, named; they call one service."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from kernel.tasks import DB_RETRY
from pools.models import Cluster
from queues.diagnosis_store import cluster_diagnosis_refresh
from queues.idle import idle_negotiations_scan
from queues.policy.preview_replay import policy_preview_run
from queues.policy.preview_replay import policy_previews_sweep as sweep
from queues.reservations.previews import reservation_preview_run, reservation_previews_sweep
from queues.reservations.services import reservation_edges_apply
from queues.waiting.rollup import wait_attribution_sync as attribution_sync
from queues.waiting.study_replay import wait_study_run


@shared_task(name="queues.policy_preview", ignore_result=True, acks_late=True, **DB_RETRY)
def policy_preview(preview_id: int) -> None:
    """Replay a queued what-if preview (a redelivered message finds it no longer queued and does nothing)."""
    policy_preview_run(preview_id=preview_id)


@shared_task(name="queues.policy_previews_sweep", ignore_result=True, **DB_RETRY)
def policy_previews_sweep() -> None:
    """Beat entry: delete old what-if previews (of policy changes and of reservations) and fail those whose worker
    died mid-replay."""
    sweep()
    reservation_previews_sweep()


@shared_task(name="queues.idle_scan", ignore_result=True, **DB_RETRY)
def idle_scan() -> None:
    """Beat entry: advance the idle-GPU negotiations (warn, withdraw, checkpoint, release); idempotent."""
    idle_negotiations_scan()


@shared_task(name="queues.wait_attribution_sync", ignore_result=True, **DB_RETRY)
def wait_attribution_sync() -> None:
    """Beat entry: roll the jobs' new wait reasons up into the wait attribution (incremental, idempotent)."""
    attribution_sync(now=timezone.now())


@shared_task(name="queues.wait_study", ignore_result=True, acks_late=True, **DB_RETRY)
def wait_study(study_id: int) -> None:
    """Replay a queued "what would have helped" study (a redelivered message finds it no longer queued)."""
    wait_study_run(study_id=study_id)


@shared_task(name="queues.diagnosis_refresh", ignore_result=True, **DB_RETRY)
def diagnosis_refresh(cluster_id: int) -> None:
    """Diagnose every pending job of a cluster at its current state version (asked for by a page that found the
    stored diagnoses behind); idempotent: a second run at the same version writes nothing."""
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is not None:
        cluster_diagnosis_refresh(cluster)


@shared_task(name="queues.reservation_edges", ignore_result=True, **DB_RETRY)
def reservation_edges() -> None:
    """Beat entry: apply the reservation windows' edges that are due (pushed ahead of a start); idempotent."""
    reservation_edges_apply()


@shared_task(name="queues.reservation_preview", ignore_result=True, acks_late=True, **DB_RETRY)
def reservation_preview(preview_id: int) -> None:
    """Replay a queued reservation preview (a redelivered message finds it no longer queued and does nothing)."""
    reservation_preview_run(preview_id=preview_id)
