"""Fairness that remembers, from the database: each team's recent usage for the engine (``UsageDecay``).

A team's recent usage of a resource is the decayed average of the devices its jobs held over the cohort's window
before an instant ``T``: every allocation's time in ``[T − window, T)`` weighted by ``0.5^((T − t) / half_life)``,
divided by the weight of the whole window, so a team that held 4 GPUs the whole window has a recent usage of 4
whatever the half-life. In closed form, per allocation held over ``[a, b)`` inside the window:
``(0.5^((T − b) / h) − 0.5^((T − a) / h)) / (1 − 0.5^(window / h))``. The engine carries it forward from there
(``queues.engine.usage_decay``). Read only for cohorts that have the policy: nothing is read where it is off.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta

from django.db.models import Q

from pools.models import Allocation, Cluster
from queues.engine import model as m
from queues.models import Cohort, TeamQuota


def cohort_policies(cohorts: Iterable[Cohort]) -> dict[int, m.UsageDecay]:
    """The engine's policy of every cohort that has one (``usage_half_life`` set), by cohort id."""
    return {
        c.pk: m.UsageDecay(half_life=c.usage_half_life.total_seconds(), window=c.usage_window.total_seconds())
        for c in cohorts
        if c.usage_half_life
    }


def state_policies(state: m.ClusterState) -> dict[str, m.UsageDecay]:
    """Per ClusterQueue of ``state``: the policy of the highest cohort on its path that has one."""
    cohorts = {c.name: c for c in state.cohorts}
    out: dict[str, m.UsageDecay] = {}
    for cq in state.cluster_queues:
        name, found, seen = cq.cohort, None, set()
        while name is not None and name in cohorts and name not in seen:
            seen.add(name)
            if cohorts[name].usage_decay is not None:
                found = cohorts[name].usage_decay
            name = cohorts[name].parent
        if found is not None:
            out[cq.name] = found
    return out


def decayed_share(start: datetime, end: datetime, *, as_of: datetime, policy: m.UsageDecay) -> float:
    """The weight of ``[start, end)`` in the decayed average over the window before ``as_of`` (0 to 1)."""
    lo = max(start, as_of - timedelta(seconds=policy.window))
    hi = min(end, as_of)
    if hi <= lo or policy.half_life <= 0:
        return 0.0
    h = policy.half_life
    whole = 1.0 - 0.5 ** (policy.window / h)
    if whole <= 0:
        return 0.0
    return (0.5 ** ((as_of - hi).total_seconds() / h) - 0.5 ** ((as_of - lo).total_seconds() / h)) / whole


def recent_usage(
    *, cluster: Cluster, as_of: datetime, policies: Mapping[str, m.UsageDecay]
) -> dict[str, dict[str, float]]:
    """Per ClusterQueue of ``cluster`` named in ``policies``: its recent usage per device resource as of ``as_of``
    (one query over the window's allocations)."""
    if not policies:
        return {}
    teams = dict(
        TeamQuota.objects.filter(cluster=cluster, cluster_queue_name__in=list(policies)).values_list(
            "team_id", "cluster_queue_name"
        )
    )
    if not teams:
        return {}
    longest = max(policies[name].window for name in teams.values())
    since = as_of - timedelta(seconds=longest)
    rows = Allocation.objects.filter(
        Q(ended_at__isnull=True) | Q(ended_at__gt=since),
        job__cluster=cluster,
        job__team_id__in=list(teams),
        started_at__lt=as_of,
    ).values_list("job__team_id", "device__resource_name", "started_at", "ended_at")
    out: dict[str, dict[str, float]] = {name: {} for name in teams.values()}
    sums: dict[tuple[str, str], float] = defaultdict(float)
    for team_id, resource, started, ended in rows:
        name = teams[team_id]
        sums[(name, resource)] += decayed_share(started, ended or as_of, as_of=as_of, policy=policies[name])
    for (name, resource), value in sums.items():
        out[name][resource] = value
    return out


def with_recent_usage(state: m.ClusterState, *, cluster: Cluster, as_of: datetime) -> m.ClusterState:
    """``state`` with the recent usage of each ClusterQueue under a cohort with the policy, as of ``as_of`` (the
    state unchanged when no cohort of it has one)."""
    policies = state_policies(state)
    if not policies:
        return state
    recent = recent_usage(cluster=cluster, as_of=as_of, policies=policies)
    at = as_of.timestamp()
    return replace(
        state,
        cluster_queues=tuple(
            replace(cq, consumed=recent.get(cq.name, {}), consumed_at=at) if cq.name in policies else cq
            for cq in state.cluster_queues
        ),
    )


def without_recent_usage(state: m.ClusterState) -> m.ClusterState:
    """``state`` without the recorded recent usage (what a policy's digest compares: usage moves every minute)."""
    if not any(cq.consumed or cq.consumed_at is not None for cq in state.cluster_queues):
        return state
    return replace(
        state, cluster_queues=tuple(replace(cq, consumed={}, consumed_at=None) for cq in state.cluster_queues)
    )
