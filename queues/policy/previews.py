"""What-if previews in the background: the request records the proposal, a worker replays it, the page polls.

The replay is of the window's history as it happened (its recorded policy changes at their times), with the
proposal taken into effect at the time the admin chose (``apply_at``; by default the window's start).

The admin's save path still computes the proposed policy (its own save, rolled back); what it stores here is
each changed cluster's current and proposed policy as engine data without nodes (the replay takes the nodes
the cluster had during the window when it runs), the form as posted, and a digest of every cluster's policy.
Applying re-posts the stored form through the admin, after checking the digests: a policy someone changed since
the preview is refused (the preview was of another starting point) and the admin is asked to preview again.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import partial

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from kernel.errors import Conflict
from pools.models import Cluster
from queues.engine import model as m
from queues.engine.codec import from_data, to_data
from queues.models import PolicyPreview
from queues.policy.charts import whatif_figure, whatif_zero_metrics
from queues.policy.whatif import (
    WhatIfRequest,
    WhatIfTooSlow,
    policy_configuration,
    whatif_compare,
    whatif_from_data,
    whatif_to_data,
)
from queues.recent_usage import without_recent_usage

log = logging.getLogger(__name__)
Status = PolicyPreview.Status


@dataclass(frozen=True)
class PreviewSide:
    """One cluster whose queue configuration the proposal alters: its policy now and as proposed (nodes ignored)."""

    cluster: Cluster
    current: m.ClusterState
    proposed: m.ClusterState


def _policy_only(config: m.ClusterState) -> m.ClusterState:
    return replace(without_recent_usage(config), nodes=(), workloads=())


def policy_digest(config: m.ClusterState) -> str:
    """A digest of a cluster's policy (nodes and workloads left out: they change without anyone editing policy)."""
    text = json.dumps(to_data(_policy_only(config)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def policy_digests() -> dict[str, str]:
    """Cluster id (as a string, the JSON key) → digest of its policy as the database holds it now."""
    return {
        str(c.pk): policy_digest(policy_configuration(cluster=c, nodes=False)) for c in Cluster.objects.order_by("pk")
    }


def _enqueue(preview_id: int) -> None:
    # By its registered name: queues.tasks imports this module, so importing the task here would be a cycle.
    current_app.tasks["queues.policy_preview"].delay(preview_id)


@transaction.atomic
def policy_preview_request(
    *,
    user,
    model_label: str,
    object_id: str,
    object_repr: str,
    days: int,
    apply_at: datetime | None = None,
    form_data: list[tuple[str, str]],
    sides: list[PreviewSide],
    changes: list[str],
    warnings: list[str],
    digests: dict[str, str],
    now: datetime | None = None,
) -> PolicyPreview:
    """Record a proposal and enqueue its replay after commit (nothing to replay: done at once); prune old ones."""
    now = now or timezone.now()
    policy_previews_prune(now=now)
    preview = PolicyPreview.objects.create(
        requested_by=user if getattr(user, "pk", None) else None,
        requested_at=now,
        model_label=model_label,
        object_id=object_id,
        object_repr=object_repr[:200],
        days=days,
        apply_at=apply_at,
        form_data=[list(pair) for pair in form_data],
        inputs=[
            {
                "cluster_id": side.cluster.pk,
                "cluster": side.cluster.name,
                "current": to_data(_policy_only(side.current)),
                "proposed": to_data(_policy_only(side.proposed)),
            }
            for side in sides
        ],
        policy_digests=digests,
        changes=changes,
        warnings=warnings,
    )
    if not sides:
        preview.status = Status.DONE
        preview.progress = 1.0
        preview.started_at = preview.finished_at = now
        preview.result = {"clusters": [], "failures": []}
        preview.save(update_fields=["status", "progress", "started_at", "finished_at", "result"])
    else:
        transaction.on_commit(partial(_enqueue, preview.pk))
    return preview


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


def policy_preview_stale(*, preview: PolicyPreview) -> list[str]:
    """Why applying ``preview`` now would not apply what was previewed (empty: it still holds)."""
    reasons = []
    if preview.applied_at is not None:
        reasons.append(f"this preview was applied at {preview.applied_at:%Y-%m-%d %H:%M:%S} UTC")
    now = policy_digests()
    names = dict(Cluster.objects.values_list("pk", "name"))
    for key in sorted(set(now) | set(preview.policy_digests), key=int):
        if now.get(key) != preview.policy_digests.get(key):
            name = names.get(int(key), f"#{key}")
            if key not in preview.policy_digests:
                reasons.append(f"cluster {name} was added since the preview")
            elif key not in now:
                reasons.append(f"cluster {name} was deleted since the preview")
            else:
                reasons.append(f"the policy of cluster {name} changed since the preview")
    return reasons


def policy_preview_check_apply(*, preview: PolicyPreview) -> None:
    """Raise ``Conflict`` unless the preview is finished and the policy is still the one it started from."""
    if not preview.is_finished:
        raise Conflict("the preview is still running: apply once it has finished")
    reasons = policy_preview_stale(preview=preview)
    if reasons:
        raise Conflict("; ".join(reasons) + ". Preview again to see the change against the policy as it is now.")


def policy_preview_mark_applied(*, preview: PolicyPreview, now: datetime | None = None) -> None:
    """Record that the preview's proposal was saved (a second apply of it is refused)."""
    preview.applied_at = now or timezone.now()
    preview.save(update_fields=["applied_at"])


def policy_preview_discard(*, preview: PolicyPreview) -> None:
    """Forget a preview (a replay still running finds its row gone and stores nothing)."""
    preview.delete()


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


def preview_display(preview: PolicyPreview) -> dict:
    """What the preview page shows of a finished preview: per cluster the what-if, table rows and figure."""
    result = preview.result or {}
    clusters = []
    for index, data in enumerate(result.get("clusters", []), start=1):
        whatif = whatif_from_data(data)
        rows = whatif.rows()
        clusters.append(
            {
                "whatif": whatif,
                "rows": rows,
                "figure": whatif_figure(rows),
                "zero_metrics": whatif_zero_metrics(rows),
                "chart_id": f"whatif-fig-{index}",
                "unsettled": [
                    (side, [datetime.fromtimestamp(t, tz=UTC) for t in outcome.unsettled])
                    for side, outcome in (("current", whatif.current), ("proposed", whatif.proposed))
                    if outcome.unsettled
                ],
            }
        )
    return {"results": clusters, "failures": result.get("failures", [])}
