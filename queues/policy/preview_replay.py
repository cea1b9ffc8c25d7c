"""The worker's side of the what-if previews: replay a queued proposal, prune old previews, fail abandoned ones.

``queues.policy.previews`` records a proposal and sends ``queues.tasks.policy_preview`` after commit; that task
calls :func:`policy_preview_run` here. The two halves are separate modules so that the request side can import
the task itself (no look-up by name, which fails in a web process that never imported the tasks module).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from pools.models import Cluster
from queues.engine import model as m
from queues.engine.codec import from_data
from queues.models import PolicyPreview
from queues.policy.whatif import WhatIfRequest, WhatIfTooSlow, whatif_compare, whatif_to_data

log = logging.getLogger(__name__)
Status = PolicyPreview.Status


def _set(preview_id: int, **fields) -> int:
    # Field updates by pk: a preview discarded (deleted) meanwhile is simply not there any more.
    return PolicyPreview.objects.filter(pk=preview_id).update(**fields)


def policy_preview_run(*, preview_id: int) -> PolicyPreview | None:
    """Replay a queued preview under both policies per cluster and store the outcome; None if it was not queued.

    The window ends when the preview was asked for, so a replay run late answers the same question. A replay past
    ``WHATIF_MAX_SECONDS`` is reported per cluster; any other error fails the preview with its text.
    """
    started = timezone.now()
    claimed = PolicyPreview.objects.filter(pk=preview_id, status=Status.QUEUED).update(
        status=Status.RUNNING, started_at=started, progress=0.0, progress_text="loading recorded jobs"
    )
    if not claimed:
        return None
    preview = PolicyPreview.objects.get(pk=preview_id)
    total = max(1, len(preview.inputs))
    results: list[dict] = []
    failures: list[str] = []
    try:
        for index, item in enumerate(preview.inputs):
            name = item["cluster"]
            cluster = Cluster.objects.filter(pk=item["cluster_id"]).first()
            if cluster is None:
                failures.append(f"{name}: the cluster was deleted since the preview was asked for")
                continue
            current = from_data(m.ClusterState, item["current"])
            proposed = from_data(m.ClusterState, item["proposed"])

            def report(side: str, share: float, index: int = index, name: str = name) -> None:
                done = index + (0.5 if side == "proposed" else 0.0) + share / 2
                _set(preview_id, progress=round(done / total, 3), progress_text=f"{name}: replaying the {side} policy")

            report("current", 0.0)
            try:
                whatif = whatif_compare(
                    cluster=cluster,
                    current=current,
                    proposed=proposed,
                    request=WhatIfRequest(days=preview.days, now=preview.requested_at),
                    on_progress=report,
                    apply_at=preview.apply_at,
                )
            except WhatIfTooSlow as exc:
                failures.append(f"{name}: {exc}")
                continue
            results.append(whatif_to_data(whatif))
    except Exception as exc:
        log.exception("what-if preview %s failed", preview_id)
        _set(preview_id, status=Status.FAILED, finished_at=timezone.now(), error=f"{type(exc).__name__}: {exc}")
        return PolicyPreview.objects.filter(pk=preview_id).first()
    failed = bool(failures) and not results
    _set(
        preview_id,
        status=Status.FAILED if failed else Status.DONE,
        finished_at=timezone.now(),
        progress=1.0,
        progress_text="",
        result={"clusters": results, "failures": failures},
        error="; ".join(failures) if failed else "",
    )
    return PolicyPreview.objects.filter(pk=preview_id).first()


def _keep() -> timedelta:
    return timedelta(days=float(settings.WHATIF_PREVIEW_KEEP_DAYS))


def policy_previews_prune(*, now: datetime) -> int:
    """Delete previews asked for more than ``WHATIF_PREVIEW_KEEP_DAYS`` ago; how many went."""
    deleted, _ = PolicyPreview.objects.filter(requested_at__lt=now - _keep()).delete()
    return deleted


def policy_previews_sweep(*, now: datetime | None = None) -> tuple[int, int]:
    """Prune old previews and fail those running past any possible end (their worker died); (pruned, failed).

    A replay stops itself after ``WHATIF_MAX_SECONDS``; a preview runs two per cluster, plus loading.
    """
    now = now or timezone.now()
    pruned = policy_previews_prune(now=now)
    budget = float(settings.WHATIF_MAX_SECONDS or 600)
    failed = 0
    for preview in PolicyPreview.objects.filter(status=Status.RUNNING).only("pk", "started_at", "inputs"):
        limit = timedelta(seconds=2 * budget * max(1, len(preview.inputs)) + 300)
        if preview.started_at is None or preview.started_at < now - limit:
            failed += PolicyPreview.objects.filter(pk=preview.pk, status=Status.RUNNING).update(
                status=Status.FAILED,
                finished_at=now,
                error="the worker running this preview stopped before it finished; preview again",
            )
    return pruned, failed
