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
from datetime import UTC, datetime
from functools import partial

from django.db import transaction
from django.utils import timezone

from kernel.errors import Conflict
from pools.models import Cluster
from queues import tasks
from queues.engine import model as m
from queues.engine.codec import to_data
from queues.models import PolicyPreview
from queues.policy.charts import whatif_figure, whatif_zero_metrics
from queues.policy.preview_replay import policy_previews_prune
from queues.policy.whatif import (
    policy_configuration,
    whatif_from_data,
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
    tasks.policy_preview.delay(preview_id)


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
