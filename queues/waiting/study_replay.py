"""What would have helped: the replays of a study (run by the worker; ``queues.waiting.study`` queues them).

Per cause of waiting, one action replayed on a cluster's recorded jobs, and the GPU-hours
of waiting it would have saved on that history (the what-if replay of ``queues.policy.whatif``).

A study replays the window's jobs once as they ran (the baseline) and once per action; each action is chosen from
the attribution of the same window (the team and class that waited most for that cause):

=============  ==================================================================================================
cause          action replayed
=============  ==================================================================================================
quota          more nominal quota for the team that waited most for its own quota: its average number of devices
               waiting for that cause over the window, or the largest job that waited for it if more
borrow_limit   that team's borrowing limits lifted
lent_out       that team reclaims what it lent (``reclaimWithinCohort: Any``)
class_full     one more node like the largest node of the class that waited most
fragmentation  defragmented placements: every job finds its devices together (topology rules dropped; an upper
               bound of what compacting placements can give)
health         repair turnaround: every device excluded for health back in service at once
reservation    the window without its reservations (the holds that took capacity from the cohort)
=============  ==================================================================================================

The replays hold the window's reservations as they held capacity then (``queues.reservations.holds``), the
baseline included. Priority (working as configured), provisioning, queue configuration, hardware that never matches
and unrecorded reasons are not replayed: the page says so, with the hours attributed to them. Saved hours are the
baseline's waiting GPU-hours of all the cluster's jobs minus the action's (an action helps or hurts every team: the
reserving team's own waits count too).
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from django.db.models import F, Max, Sum
from django.utils import timezone

from kernel.quantity import is_device_resource
from pools.models import Cluster, ResourceClass
from queues.engine import model as m
from queues.engine.placement import HEALTH_TAINT_KEYS
from queues.engine_input import WindowNode, ts, window_engine_nodes
from queues.models import TeamQuota, WaitActionStudy, WaitTally
from queues.policy.whatif import (
    WhatIfTooSlow,
    policy_configuration,
    recorded_jobs,
    replay_policy,
)
from queues.recent_usage import with_recent_usage
from queues.reservations.holds import cluster_holds
from queues.waiting.causes import CAUSES, cause_label
from queues.waiting.rollup import attribution_tz
from queues.waiting.spans import week_start

log = logging.getLogger(__name__)

#: The window a study replays when none is given, and the longest one allowed.
DEFAULT_DAYS = 7
MAX_DAYS = 28
US_PER_HOUR = 3_600_000_000
#: Causes no action is replayed for, and why.
NOT_REPLAYED = {
    "priority": "higher-priority work went first as the priorities are set: nothing to replay",
    "provisioning": "provisioning runs outside the portal: its turnaround cannot be replayed",
    "configuration": "fix the queue (stopped or misconfigured): all of these hours",
    "no_hardware": "the class asks for hardware that never matches: change the class or the jobs",
    "unknown": "no reason was recorded for this waiting",
}


def _set(study_id: int, **fields) -> None:
    WaitActionStudy.objects.filter(pk=study_id).update(**fields)


def wait_study_run(*, study_id: int) -> WaitActionStudy | None:
    """Run a queued study (a redelivered message finds it no longer queued and does nothing)."""
    if not WaitActionStudy.objects.filter(pk=study_id, state=WaitActionStudy.State.QUEUED).update(
        state=WaitActionStudy.State.RUNNING, step="loading recorded jobs"
    ):
        return None
    study = WaitActionStudy.objects.select_related("cluster").get(pk=study_id)
    try:
        results = study_results(
            cluster=study.cluster,
            start=study.window_start,
            end=study.window_end,
            on_step=lambda text: _set(study_id, step=text[:120]),
        )
    except Exception as exc:  # the study is a report: any failure is shown on it, never lost
        log.exception("wait study %s failed", study_id)
        _set(study_id, state=WaitActionStudy.State.FAILED, finished_at=timezone.now(), error=f"{exc}", step="")
        return WaitActionStudy.objects.get(pk=study_id)
    _set(study_id, state=WaitActionStudy.State.DONE, finished_at=timezone.now(), results=results, step="")
    return WaitActionStudy.objects.get(pk=study_id)


def attributed_hours(*, cluster: Cluster, start: datetime, end: datetime) -> dict[str, dict[tuple[int, int], float]]:
    """Per cause, the closed waiting GPU-hours of the cluster's jobs per (team, class) in the weeks of the window."""
    first = week_start(start, attribution_tz())
    rows = (
        WaitTally.objects.filter(job__cluster=cluster, week__gte=first, week__lte=end.date())
        .values("cause", "team_id", "resource_class_id")
        .annotate(us=Sum("device_us"))
        .order_by()
    )
    out: dict[str, dict[tuple[int, int], float]] = defaultdict(dict)
    for r in rows:
        out[r["cause"]][(r["team_id"], r["resource_class_id"])] = r["us"] / US_PER_HOUR
    return out


def _largest_waiting(cluster: Cluster, team_id: int, cause: str, start: datetime) -> int:
    """The most devices one job of the team asked for while it waited for ``cause`` in the window's weeks."""
    largest = (
        WaitTally.objects.filter(
            job__cluster=cluster, team_id=team_id, cause=cause, week__gte=week_start(start, attribution_tz())
        )
        .annotate(devices=F("job__devices_per_pod") * F("job__pod_count"))
        .aggregate(m=Max("devices"))["m"]
    )
    return int(largest or 0)


def _top(per: dict[tuple[int, int], float]) -> tuple[int, int, float]:
    """(team, class, hours) with the most hours."""
    (team_id, class_id), value = max(per.items(), key=lambda kv: (kv[1], -kv[0][0], -kv[0][1]))
    return team_id, class_id, value


def _with_queue(
    config: m.ClusterState, name: str, change: Callable[[m.ClusterQueue], m.ClusterQueue]
) -> m.ClusterState:
    return replace(config, cluster_queues=tuple(change(cq) if cq.name == name else cq for cq in config.cluster_queues))


def _more_quota(cq: m.ClusterQueue, extra: int) -> m.ClusterQueue:
    """The queue with ``extra`` more nominal quota of its first device resource in its first flavor."""
    groups = list(cq.resource_groups)
    for gi, grp in enumerate(groups):
        for fi, flavor in enumerate(grp.flavors):
            for ri, res in enumerate(flavor.resources):
                if is_device_resource(res.name):
                    resources = list(flavor.resources)
                    resources[ri] = replace(res, nominal=res.nominal + extra)
                    flavors = list(grp.flavors)
                    flavors[fi] = replace(flavor, resources=tuple(resources))
                    groups[gi] = replace(grp, flavors=tuple(flavors))
                    return replace(cq, resource_groups=tuple(groups))
    return cq


def _unlimited(cq: m.ClusterQueue) -> m.ClusterQueue:
    return replace(
        cq,
        resource_groups=tuple(
            replace(
                g,
                flavors=tuple(
                    replace(f, resources=tuple(replace(r, borrowing_limit=None) for r in f.resources))
                    for f in g.flavors
                ),
            )
            for g in cq.resource_groups
        ),
    )


def _healed(node: m.Node) -> m.Node:
    """The node with every health exclusion gone: allocatable back to capacity, health taints and cordon lifted."""
    return replace(
        node,
        ready=True,
        unschedulable=node.unschedulable and not node.health_reason,
        allocatable={**node.allocatable, **{r: v for r, v in node.capacity.items() if is_device_resource(r)}},
        taints=tuple(t for t in node.taints if t.key not in HEALTH_TAINT_KEYS and "xid" not in t.key.lower()),
        health_reason="",
    )


def study_results(
    *, cluster: Cluster, start: datetime, end: datetime, on_step: Callable[[str], None] = lambda text: None
) -> dict:
    """Replay the window as it ran and once per action; the saved GPU-hours per cause (JSON-ready)."""
    attributed = attributed_hours(cluster=cluster, start=start, end=end)
    jobs, _left_out = recorded_jobs(cluster=cluster, start=start, end=end)
    teams = dict(TeamQuota.objects.filter(cluster=cluster).values_list("cluster_queue_name", "team__name"))
    queue_of = dict(TeamQuota.objects.filter(cluster=cluster).values_list("team_id", "cluster_queue_name"))
    names = dict(TeamQuota.objects.filter(cluster=cluster).values_list("team_id", "team__name"))
    nodes = window_engine_nodes(cluster=cluster, start=start, end=end)
    config = with_recent_usage(policy_configuration(cluster=cluster, nodes=False), cluster=cluster, as_of=start)
    config = replace(config, reservations=cluster_holds(cluster=cluster, start=start, end=end, now=end))
    window_hours = max((end - start).total_seconds() / 3600, 1e-9)

    def replay(label: str, cfg: m.ClusterState, window_nodes: list[WindowNode], relax: bool = False) -> float:
        on_step(f"replaying: {label}")
        outcome = replay_policy(
            config=cfg, jobs=jobs, start=ts(start), end=ts(end), teams=teams, nodes=window_nodes,
            relax_topology=relax,
        )  # fmt: skip
        return sum(t.waited_device_hours for t in outcome.teams)

    baseline = replay("the window as it ran", config, nodes)
    causes: dict[str, dict] = {}
    for cause in CAUSES:
        per = attributed.get(cause, {})
        hours = sum(per.values())
        if hours <= 0:
            continue
        entry: dict = {"label": cause_label(cause), "hours": round(hours, 3), "action": "", "saved_hours": None}
        causes[cause] = entry
        if cause in NOT_REPLAYED:
            entry["note"] = NOT_REPLAYED[cause]
            if cause == "configuration":
                entry["action"] = "Fix the stopped or misconfigured queue"
                entry["saved_hours"] = round(hours, 3)
            continue
        team_id, class_id, team_hours = _top(per)
        queue = queue_of.get(team_id)
        team = names.get(team_id, "?")
        try:
            if cause == "quota" and queue:
                extra = max(1, math.ceil(team_hours / window_hours), _largest_waiting(cluster, team_id, "quota", start))
                entry["action"] = f"{extra} more GPU(s) of nominal quota for {team}"
                after = replay(
                    entry["action"], _with_queue(config, queue, lambda cq, n=extra: _more_quota(cq, n)), nodes
                )
            elif cause == "borrow_limit" and queue:
                entry["action"] = f"Lift {team}'s borrowing limit"
                after = replay(entry["action"], _with_queue(config, queue, _unlimited), nodes)
            elif cause == "lent_out" and queue:
                entry["action"] = f"Let {team} reclaim what it lent (reclaimWithinCohort: Any)"
                after = replay(
                    entry["action"],
                    _with_queue(
                        config,
                        queue,
                        lambda cq: replace(cq, preemption=replace(cq.preemption, reclaim_within_cohort="Any")),
                    ),
                    nodes,
                )
            elif cause == "class_full":
                flavors = set(
                    ResourceClass.objects.filter(pk=class_id).values_list("flavor_links__flavor__name", flat=True)
                )
                candidates = [w.node for w in nodes if w.node.labels and _on_flavors(w.node, config, flavors)]
                if not candidates:
                    entry["note"] = "no node of the class to copy"
                    continue
                model_node = max(
                    candidates,
                    key=lambda n: (sum(n.capacity.get(r, 0) for r in n.capacity if is_device_resource(r)), n.name),
                )
                copy = replace(
                    model_node,
                    name=f"{model_node.name}-whatif",
                    labels={**model_node.labels, "kubernetes.io/hostname": f"{model_node.name}-whatif"},
                )
                entry["action"] = f"One more node like {model_node.name}"
                after = replay(entry["action"], config, [*nodes, WindowNode(copy, None, None)])
            elif cause == "fragmentation":
                entry["action"] = "Defragment placements (every job finds its GPUs together)"
                after = replay(entry["action"], config, nodes, relax=True)
            elif cause == "health":
                entry["action"] = "Repair turnaround: unhealthy devices back in service at once"
                after = replay(entry["action"], config, [replace(w, node=_healed(w.node)) for w in nodes])
            elif cause == "reservation":
                if not config.reservations:
                    entry["note"] = "no reservation of the window holds capacity any more (cancelled or refused since)"
                    continue
                holders = sorted({h.holder or h.cluster_queue for h in config.reservations})
                count = len(config.reservations)
                entry["action"] = (
                    f"Without the window's {count} reservation{'' if count == 1 else 's'} (for {', '.join(holders)})"
                )
                after = replay(entry["action"], replace(config, reservations=()), nodes)
            else:
                continue
        except WhatIfTooSlow as exc:
            entry["note"] = str(exc)
            continue
        entry["saved_hours"] = round(baseline - after, 3)
    return {
        "cluster": cluster.name,
        "start": start.isoformat(),
        "end": end.isoformat(),
        "jobs": len(jobs),
        "baseline_hours": round(baseline, 3),
        "causes": causes,
    }


def _on_flavors(node: m.Node, config: m.ClusterState, flavors: set[str]) -> bool:
    """Whether the node carries the labels of one of ``flavors``."""
    for flavor in config.flavors:
        if (
            flavor.name in flavors
            and flavor.node_labels
            and all(node.labels.get(k) == v for k, v in flavor.node_labels.items())
        ):
            return True
    return False
