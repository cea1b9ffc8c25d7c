"""The simulated cluster's DCGM: how busy each card held by a running job is, as dcgm-exporter would report it.

A simulated cluster has no exporter to scrape, so this stands in for its ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``: one
activity sample per held card every ``SIMULATED_DCGM_SECONDS`` (beat ``clusters.simulated_dcgm_sample``),
stored as the health ingestion stores a scrape's (pools.gpu_usage). The activity is a pure function of the job,
its kind, how long it has held the card and the minute, so the demo is the same each time and shows every case of
the idle-GPU negotiation (queues.idle):

* a development session is busy for its first 10 minutes, then either left idle (odd job ids: the forgotten
  notebook, warned and released after its class's idle window) or used in bursts (even ids: 10 busy minutes in
  every 30, never idle for a whole window);
* an inference service serves at 20-60 %;
* any other job computes at 70-95 %, except one in seven, which hangs after 10 minutes (a stuck data loader).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q

from pools.gpu_usage import utilisation_record
from pools.models import Allocation, Cluster
from pools.workload_kinds import WorkloadKind, kind_spec
from queues.models import Job

#: Minutes a session or a hanging job is busy before it goes idle.
WARM_UP_MINUTES = 10
SERVING = frozenset({WorkloadKind.INFERENCE, WorkloadKind.INFERENCE_LWS})


def _noise(job_id: int, minute: int) -> float:
    """A deterministic number in [0, 1) for a job and a minute."""
    return ((job_id * 2654435761 + minute * 40503) % 1000) / 1000


def simulated_activity(*, job_id: int, kind: str, held_since: datetime, at: datetime) -> float:
    """Percent of the time the card's engine was active at ``at`` (see the module's rules)."""
    minutes = int((at - held_since).total_seconds() // 60)
    noise = _noise(job_id, int(at.timestamp() // 60))
    warm = minutes < WARM_UP_MINUTES
    if kind in SERVING:
        return 20 + 40 * noise
    if kind_spec(kind).runs_until_stopped:
        if warm:
            return 35 + 30 * noise
        if job_id % 2:
            return noise  # left open: under 1 %
        return 40 + 40 * noise if (minutes // 10) % 3 == 0 else noise
    if job_id % 7 == 0 and not warm:
        return noise
    return 70 + 25 * noise


def simulated_dcgm_record(*, cluster: Cluster, start: datetime, end: datetime, step: timedelta) -> int:
    """Record the samples of every card held by a running job of ``cluster`` at ``start``, ``start + step``, … up
    to ``end`` (the beat records one instant; the demo its last hour). A card two jobs share (MIG slices, replicas)
    reports its busiest job. Returns how many samples were written (two queries per instant at most)."""
    held = list(
        Allocation.objects.filter(job__cluster=cluster, job__state=Job.State.RUNNING, started_at__lte=end)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start))
        .values_list("job_id", "job__kind", "device_id", "device__parent_id", "started_at", "ended_at")
    )
    written = 0
    at = start
    while at <= end:
        cards: dict[int, float] = {}
        for job_id, kind, device_id, parent_id, since, until in held:
            if since <= at and (until is None or until > at):
                card = parent_id or device_id
                percent = simulated_activity(job_id=job_id, kind=kind, held_since=since, at=at)
                cards[card] = max(cards.get(card, 0.0), percent)
        written += utilisation_record(sorted(cards.items()), now=at)
        at += step
    return written


@transaction.atomic
def simulated_dcgm_sample(*, now: datetime) -> int:
    """One sample per held card of every simulated cluster at ``now``; returns how many were written. All or none:
    a run that meets a database error writes nothing, so its retry (at a later ``now``) adds no second sample."""
    return sum(
        simulated_dcgm_record(cluster=cluster, start=now, end=now, step=timedelta(seconds=1))
        for cluster in Cluster.objects.filter(backend=Cluster.Backend.SIMULATED).order_by("pk")
    )
