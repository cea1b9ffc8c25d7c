"""Wait reasons about nodes: a pod set that can never be placed, health-blocked capacity and fragmentation.

``reasons`` decides which reason applies; this module writes the sentences with the numbers that matter:

* **health_blocked** names each node whose capacity is out for health and how many devices are out there, by
  cause: the device plugin lowering allocatable below capacity ("6 A100 GPUs on node-17 are marked unhealthy
  by the device plugin (capacity 8, allocatable 2)"), a health taint (NVSentinel / GPU Operator style), a
  NotReady node, or a node cordoned for health.
* **topology_fragmented** gives the free total, the job's need and the largest free block on one node ("20
  A100 GPUs are free in total, enough for this job's 16, but the largest free block on one node is 6"), and
  for a required topology level the domain with the most free ("the rack with the most free, r1, has 5").
"""

from __future__ import annotations

from kernel.quantity import is_device_resource

from . import messages as msg
from .decisions import WaitReason
from .labels import HOSTNAME_LABEL, taint_to_string
from .model import DEVICE_PLUGIN, NODE_REPORTS
from .placement import NodeState, PlacementResult, PodSetRequest
from .pod_placement import podset_request
from .records import (
    EXCEEDS_MAX_QUOTA,
    NO_MATCHING_FLAVOR,
    TOPOLOGY_PLACEMENT_FAILED,
    WAITING_FOR_QUOTA,
    ClusterQueueInfo,
    FlavorAssignment,
    PodSetFlavors,
    WorkloadInfo,
)
from .scheduler import Engine
from .wait_codes import WaitCode


def flavor_label(engine: Engine, flavor: str) -> str:
    """A flavor's display name (its name when it has none; the given text for an unknown flavor)."""
    spec = engine.flavors.get(flavor)
    return (spec.display_name or spec.name) if spec is not None else flavor


def name_list(items: list[str], limit: int = 5) -> str:
    """``a, b, c`` or ``a, b, c, d, e and 3 more``."""
    if len(items) <= limit:
        return ", ".join(items)
    return ", ".join(items[:limit]) + f" and {len(items) - limit} more"


def main_resource(per_pod: dict[str, int]) -> str:
    """The resource a pod set is about: its first device resource, else its first resource."""
    devices = [r for r in per_pod if is_device_resource(r)]
    if devices:
        return devices[0]
    return next(iter(per_pod), "")


def flavor_phrase(engine: Engine, att: dict) -> str:
    """Why one flavor attempt does not match, in words."""
    why = att.get("why", "")
    flavor = att.get("flavor", "")
    if why == "undeclared":
        return f"the queue offers no {att.get('resource')} at all"
    if why == "not_found":
        return f"flavor {flavor} does not exist"
    if why == "tas_not_supported":
        return f"flavor {flavor} has no topology (spec.topologyName), so a topology request cannot be honoured"
    if why == "tas_only":
        return f"flavor {flavor} is topology-aware only and the job has no topology request"
    if why == "tas_level_missing":
        return f"flavor {flavor}'s topology has no level the job asks for"
    if why == "tas_cache_missing":
        return f"flavor {flavor}'s Topology does not exist"
    if why == "taint":
        return f"flavor {flavor} is tainted and the job does not tolerate it"
    if why == "affinity":
        return f"the job's node selector/affinity excludes flavor {flavor}"
    if why == "no_nodes":
        return f"no node carries flavor {flavor}'s labels"
    if why == "nodes_excluded":
        return f"every node of flavor {flavor} is excluded by the job's node selector, affinity or tolerations"
    return att.get("reason", "")


# ------------------------------------------------------------------------------------------ never placed


def _preferred_flavors(psa: PodSetFlavors) -> dict[str, str]:
    flavors = dict(psa.flavors)
    if flavors:
        return flavors
    for attempts in psa.group_attempts:
        for att in attempts:
            if att.get("kind") != NO_MATCHING_FLAVOR and att.get("resources"):
                for info in att["resources"]:
                    flavors.setdefault(info["resource"], att["flavor"])
                break
    return flavors


def never_placed(
    engine: Engine, wl: WorkloadInfo, cq: ClusterQueueInfo, assignment: FlavorAssignment, kueue_message: str
) -> WaitReason | None:
    """exceeds_maximum / no_matching_flavor from the nodes: a pod set that does not fit even on empty, healthy nodes."""
    for ps, psa in zip(wl.pod_sets, assignment.pod_sets, strict=False):
        if not ps.per_pod or ps.count == 0:
            continue
        flavors = _preferred_flavors(psa)
        if not flavors:
            continue
        req, topo = podset_request(engine, cq, ps, flavors)
        res = engine.pool.place(req, empty=True, healthy=True)
        if res.ok:
            continue
        flavor_names = sorted(set(flavors.values()))
        fname = flavor_names[0] if len(flavor_names) == 1 else ", ".join(flavor_names)
        if res.total_nodes == 0 or not res.free_units:
            why = "no_nodes" if res.total_nodes == 0 else "nodes_excluded"
            phrase = flavor_phrase(engine, {"why": why, "flavor": fname})
            return WaitReason(
                code="no_matching_flavor",
                message=f"No hardware matches this job: {phrase}.",
                kueue_message=kueue_message,
                kueue_reason=TOPOLOGY_PLACEMENT_FAILED if topo else NO_MATCHING_FLAVOR,
                details={
                    "clusterQueue": cq.name,
                    "podSet": ps.name,
                    "flavor": fname,
                    "totalNodes": res.total_nodes,
                    "excluded": dict(res.exclusions),
                },
            )
        main = main_resource(ps.per_pod)
        per = ps.per_pod.get(main, 0)
        biggest = max((n.capacity.get(main, 0) for n in engine.pool.flavor_nodes(req.node_labels)), default=0)
        label = flavor_label(engine, flavors.get(main, fname))
        if per > biggest:
            text = (
                f"Each pod of this job needs {msg.noun(main, per, label)} but the largest node of flavor {fname} "
                f"has {msg.qty(main, biggest)}. Split the job into more, smaller pods."
            )
        elif req.required:
            text = (
                f"This job needs {ps.count} pod(s) of {msg.noun(main, per, label)} in one {req.required}, "
                f"but no {req.required} can ever hold more than {res.fit} of them. Relax the topology rule or "
                "ask for fewer pods."
            )
        else:
            total_units = sum(n.capacity.get(main, 0) for n in engine.pool.flavor_nodes(req.node_labels))
            text = (
                f"This job needs {msg.noun(main, per * ps.count, label)} in total, more than the "
                f"{msg.qty(main, total_units)} that all nodes of flavor {fname} have."
            )
        return WaitReason(
            code="exceeds_maximum",
            message=text,
            kueue_message=kueue_message,
            kueue_reason=TOPOLOGY_PLACEMENT_FAILED if topo else EXCEEDS_MAX_QUOTA,
            details={
                "clusterQueue": cq.name,
                "podSet": ps.name,
                "flavor": fname,
                "resource": main,
                "perPod": per,
                "count": ps.count,
                "largestNode": biggest,
                "fitEver": res.fit,
            },
        )
    return None


# ------------------------------------------------------------------------------------------ placement


def placement_reason(
    engine: Engine, wl: WorkloadInfo, cq: ClusterQueueInfo, assignment: FlavorAssignment
) -> WaitReason:
    """Quota fits but the pods do not: health_blocked, topology_fragmented or class_exhausted, with numbers."""
    kueue_message = assignment.message()
    failed = next(
        (p for p in assignment.pod_sets if p.placement is not None and not p.placement.ok),
        None,
    )
    if failed is None:
        # Quota fits and nodes fit but no preemption path: report the queue state.
        return WaitReason(
            code="quota_exhausted",
            message="This job cannot be admitted now and no lower-priority job can be preempted for it.",
            kueue_message=kueue_message,
            kueue_reason=WAITING_FOR_QUOTA,
            details={"clusterQueue": cq.name},
        )
    ps = next(p for p in wl.pod_sets if p.name == failed.name)
    req, topo = podset_request(engine, cq, ps, failed.flavors)
    actual = engine.pool.place(req)
    main = main_resource(ps.per_pod)
    per = ps.per_pod.get(main, 0)
    need = per * ps.count
    flavor = failed.flavors.get(main) or next(iter(failed.flavors.values()), "")
    label = flavor_label(engine, flavor)
    kueue_reason = _placement_kueue_reason(assignment) if topo else ""
    free = actual.free_units.get(main, 0)
    details: dict[str, object] = {
        "clusterQueue": cq.name,
        "podSet": ps.name,
        "flavor": flavor,
        "resource": main,
        "perPod": per,
        "count": ps.count,
        "needed": need,
        "free": free,
        "fit": actual.fit,
        "totalNodes": actual.total_nodes,
        "excluded": dict(actual.exclusions),
    }
    if actual.ok and len(wl.pod_sets) > 1:
        # This pod set fits the free nodes by itself: the job's earlier pod sets, placed first, took the room.
        return _together_reason(wl, main, label, flavor, free, kueue_message, kueue_reason, details)
    if engine.pool.place(req, healthy=True).ok:
        text = _health_text(engine.pool.eligible_nodes(req, healthy=True), main, label, free, need, details)
        return WaitReason(
            code="health_blocked",
            message=text,
            kueue_message=kueue_message,
            kueue_reason=kueue_reason,
            details=details,
        )
    if free >= need:
        return WaitReason(
            code="topology_fragmented",
            message=_fragmented_text(engine, req, ps.count, main, per, label, actual, details),
            kueue_message=kueue_message,
            kueue_reason=kueue_reason,
            details=details,
        )
    total = sum(
        n.allocatable.get(main, 0) for n in engine.pool.flavor_nodes(req.node_labels) if n.ready and not n.unschedulable
    )
    return WaitReason(
        code="class_exhausted",
        message=(
            f"The {msg.noun(main, total, label)} on the nodes of flavor {flavor} are in use: "
            f"{msg.qty(main, free)} free, this job needs {msg.qty(main, need)} "
            f"({ps.count} pod(s) × {msg.qty(main, per)})."
        ),
        kueue_message=kueue_message,
        kueue_reason=kueue_reason,
        details=details,
    )


def _together_reason(
    wl: WorkloadInfo,
    main: str,
    label: str,
    flavor: str,
    free: int,
    kueue_message: str,
    kueue_reason: str,
    details: dict[str, object],
) -> WaitReason:
    """The pod sets of a gang do not fit the free nodes together (each may alone): class_exhausted when the free
    units are fewer than all pod sets need, topology_fragmented when they are enough but spread wrongly."""
    need = sum(ps.per_pod.get(main, 0) * ps.count for ps in wl.pod_sets)
    parts = " + ".join(
        f"{ps.name} {ps.count} × {msg.qty(main, ps.per_pod.get(main, 0))}" for ps in wl.pod_sets if ps.per_pod.get(main)
    )
    details = {**details, "needed": need, "free": free}
    code: WaitCode
    if free >= need:
        code = "topology_fragmented"
        text = (
            f"{msg.noun(main, free, label)} are free on the nodes of flavor {flavor}, enough for the {need} this job "
            f"needs in all ({parts}), but not on nodes where every pod of every pod set fits."
        )
    else:
        code = "class_exhausted"
        text = (
            f"The {label} nodes of flavor {flavor} have {msg.qty(main, free)} free; this job needs "
            f"{msg.qty(main, need)} in all ({parts})."
        )
    return WaitReason(code=code, message=text, kueue_message=kueue_message, kueue_reason=kueue_reason, details=details)


def _placement_kueue_reason(assignment: FlavorAssignment) -> str:
    """Kueue's condition reason for a TAS pod set that does not fit now: TopologyPlacementFailed only when it does
    not fit even with every workload's pods gone (NoFit); otherwise the assignment is in Preempt mode and Kueue
    waits for quota (flavorassigner: the empty-cluster probe marks the TopologyPlacementFailed attempt)."""
    if any(p.failed and p.no_fit_reason == TOPOLOGY_PLACEMENT_FAILED for p in assignment.pod_sets):
        return TOPOLOGY_PLACEMENT_FAILED
    return WAITING_FOR_QUOTA


# ------------------------------------------------------------------------------------------ health


def health_phrase(node: NodeState, resource: str, label: str) -> dict[str, object]:
    """How much of ``resource`` is out for health on ``node`` and why, as a phrase and as figures.

    Causes, most encompassing first: the node is NotReady; it is cordoned for health; it carries a health
    taint; allocatable is below capacity (the device plugin marked devices unhealthy, or the portal did).
    """
    units = node.health_excluded_units(resource)
    amount = f"{msg.noun(resource, units, label)} on {node.name} {'is' if units == 1 else 'are'}"
    capacity = node.capacity.get(resource, 0)
    allocatable = node.allocatable.get(resource, 0)
    reason = node.health_reason
    if not node.ready:
        cause, text = "not_ready", f"{amount} on a node that is NotReady"
    elif node.health_node:
        cause, text = "cordoned", f"{amount} on a node cordoned for health"
    elif node.health_taints:
        taints = ", ".join(taint_to_string(t) for t in node.health_taints)
        cause, text = "taint", f"{amount} held back by the health taint {taints}"
    else:
        by = node.health_gap_by or DEVICE_PLUGIN
        cause = {DEVICE_PLUGIN: "device_plugin", NODE_REPORTS: "node_reports"}.get(by, "portal")
        text = (
            f"{amount} marked unhealthy by {by} (capacity {msg.qty(resource, capacity)}, "
            f"allocatable {msg.qty(resource, allocatable)})"
        )
        if node.health_gap_by == DEVICE_PLUGIN:
            reason = ""  # the portal's note only repeats what the numbers say
    if reason and reason != "NotReady":
        text += f": {reason}"
    return {
        "node": node.name,
        "units": units,
        "cause": cause,
        "capacity": capacity,
        "allocatable": allocatable,
        "text": text,
    }


def _health_text(
    eligible: list[NodeState], main: str, label: str, free: int, need: int, details: dict[str, object]
) -> str:
    """The health_blocked sentence: each node whose capacity is out for health, how much, and why."""
    sick = [n for n in eligible if n.health_excluded and n.health_excluded_units(main) > 0]
    phrases = [health_phrase(n, main, label) for n in sick]
    details.update(
        {
            "unhealthyNodes": [n.name for n in sick],
            "excludedForHealth": sum(int(p["units"]) for p in phrases),  # type: ignore[call-overload]
            "healthNotes": sorted(f"{n.name}: {n.health_note()}" for n in sick),
            "healthNodes": [{k: v for k, v in p.items() if k != "text"} for p in phrases],
        }
    )
    shown = [str(p["text"]) for p in phrases[:5]]
    if len(phrases) > 5:
        shown.append(f"and {len(phrases) - 5} more node(s)")
    return (
        f"The capacity this job needs exists, but part of it is out for health: {'; '.join(shown)}. "
        f"Free now on healthy devices: {msg.qty(main, free)}, needed: {msg.qty(main, need)}; "
        "once repaired this job can start."
    )


# ------------------------------------------------------------------------------------------ fragmentation


def level_word(level: str) -> str:
    """A topology level in words: ``node`` for the hostname level, else the label's last part (``rack``)."""
    if level == HOSTNAME_LABEL:
        return "node"
    return level.rsplit("/", 1)[-1]


def free_blocks(nodes: list[NodeState], resource: str, levels: tuple[str, ...], level: str | None) -> list:
    """Free ``resource`` per node (``level`` None or the hostname level) or per domain of ``level``.

    Returns (free, name) pairs, most free first (the smaller name among equals). A domain is keyed by its values
    along ``levels`` down to ``level`` (a rack is one rack of its block) and named by its own value.
    """
    if level is None or level == HOSTNAME_LABEL or level not in levels:
        pairs = [(max(0, n.allocatable.get(resource, 0) - n.used.get(resource, 0)), n.name) for n in nodes]
    else:
        path = [lvl for lvl in levels[: levels.index(level) + 1] if lvl != HOSTNAME_LABEL]
        sums: dict[tuple[str, ...], int] = {}
        for n in nodes:
            key = tuple(n.labels.get(lvl, "") for lvl in path)
            sums[key] = sums.get(key, 0) + max(0, n.allocatable.get(resource, 0) - n.used.get(resource, 0))
        pairs = [(free, key[-1]) for key, free in sums.items()]
    return sorted(pairs, key=lambda p: (-p[0], p[1]))


def _fragmented_text(
    engine: Engine,
    req: PodSetRequest,
    count: int,
    main: str,
    per: int,
    label: str,
    actual: PlacementResult,
    details: dict[str, object],
) -> str:
    """The topology_fragmented sentence: free in total, needed, the largest block on one node (and per domain)."""
    nodes = engine.pool.eligible_nodes(req)
    free = actual.free_units.get(main, 0)
    need = per * count
    blocks = free_blocks(nodes, main, req.levels, None)
    block, block_node = blocks[0] if blocks else (0, "")
    details.update({"largestFreeBlock": block, "largestFreeNode": block_node})
    head = (
        f"{msg.noun(main, free, label)} are free in total, enough for this job's {msg.qty(main, need)}, "
        f"but the largest free block on one node is {msg.qty(main, block)}"
    )
    pods = f"{count} pod(s) of {msg.qty(main, per)}"
    if req.required == HOSTNAME_LABEL:
        return f"{head}, and all {pods} must run on one node: there is room for {actual.fit} of them."
    if req.required and req.required in req.levels:
        word = level_word(req.required)
        domains = free_blocks(nodes, main, req.levels, req.required)
        dom_free, dom = domains[0] if domains else (0, "")
        details.update({"level": req.required, "largestDomain": dom, "largestDomainFree": dom_free})
        return (
            f"{head}, and all {pods} must run in one {word}: the {word} with the most free, {dom}, has "
            f"{msg.qty(main, dom_free)}, room for {actual.fit} of them."
        )
    return f"{head}: there is room for {actual.fit} of its {pods}."
