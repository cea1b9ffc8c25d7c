"""Placing a flavor assignment's pod sets on nodes (Kueue's TAS step), over ``placement.NodePool``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from . import messages as msg
from .placement import PODS, PodSetRequest
from .records import (
    PS_FIT,
    PS_PREEMPT,
    TOPOLOGY_PLACEMENT_FAILED,
    ClusterQueueInfo,
    FlavorAssignment,
    PodSetFlavors,
    PodSetInfo,
    WorkloadInfo,
)

if TYPE_CHECKING:
    from .scheduler import Engine


def podset_request(
    engine: Engine, cq: ClusterQueueInfo, ps: PodSetInfo, flavors: Mapping[str, str]
) -> tuple[PodSetRequest, str | None]:
    """The node request for a pod set under its flavors, and the name of its topology (None without TAS)."""
    values = flavors.values()
    names = tuple(values) if len(flavors) == 1 else tuple(sorted(set(values)))
    key = (names, engine.pool.counts_pods)
    cached = ps.requests.get(key)
    if cached is None:
        # Pod sets of the same shape share their requests (most workloads are one of a few shapes).
        spec = ps.spec
        shared_key = (
            key,
            ps.count,
            tuple(ps.per_pod.items()),
            tuple(spec.node_selector.items()),
            spec.node_affinity,
            spec.tolerations,
            spec.topology,
        )
        cached = engine.podset_requests.get(shared_key)
        if cached is None:
            cached = engine.podset_requests[shared_key] = _podset_request(engine, ps, names)
        ps.requests[key] = cached
    return cached


def _podset_request(engine: Engine, ps: PodSetInfo, names: tuple[str, ...]) -> tuple[PodSetRequest, str | None]:
    labels: dict[str, str] = {}
    tolerations = list(ps.spec.tolerations)
    tas_flavor = None
    for fname in names:
        flavor = engine.flavors.get(fname)
        if flavor is None:
            continue
        labels.update(flavor.node_labels)
        tolerations.extend(flavor.tolerations)
        if flavor.topology_name and tas_flavor is None:
            tas_flavor = flavor
    levels: tuple[str, ...] = ()
    topo_name = None
    required = preferred = None
    if tas_flavor is not None and tas_flavor.topology_name in engine.topologies:
        topo_name = tas_flavor.topology_name
        levels = engine.topologies[topo_name].levels
        if ps.spec.topology is not None:
            required = ps.spec.topology.required
            preferred = ps.spec.topology.preferred
    per_pod = dict(ps.per_pod)
    if engine.pool.counts_pods:
        # Each pod takes one of a node's allocatable pods (a node that does not report pods is not limited).
        per_pod.setdefault(PODS, 1)
    req = PodSetRequest(
        count=ps.count,
        per_pod=per_pod,
        node_labels=labels,
        node_selector=dict(ps.spec.node_selector),
        node_affinity=ps.spec.node_affinity,
        tolerations=tuple(tolerations),
        levels=levels,
        topology_name=topo_name,
        required=required,
        preferred=preferred,
    )
    return req, topo_name


def place_all(
    engine,
    wl: WorkloadInfo,
    cq: ClusterQueueInfo,
    psas: list[PodSetFlavors],
    *,
    empty: bool = False,
    healthy: bool = False,
    lean: bool = False,
) -> list[list[str]] | None:
    """Place every pod set in turn (earlier pod sets' pods count for later ones); None if any fails.

    ``lean``: only the nodes are wanted (``NodePool.place_nodes``): the pod sets' ``placement`` is left as it is.
    """
    placed: list[tuple[str, dict[str, int]]] = []
    out: list[list[str]] = []
    ok = True
    pairs = list(zip(wl.pod_sets, psas, strict=False))
    # Only a later pod set needs the earlier ones' pods accounted: the last one adds nothing (no spurious
    # change of the pool's version, which would invalidate every cached placement).
    last = max((i for i, (ps, _) in enumerate(pairs) if ps.per_pod and ps.count), default=-1)
    for i, (ps, psa) in enumerate(pairs):
        if not ps.per_pod or ps.count == 0:
            out.append([])
            continue
        req, _ = podset_request(engine, cq, ps, psa.flavors)
        if lean and not empty and not healthy:
            nodes = engine.pool.place_nodes(req)
        else:
            res = engine.pool.place(req, empty=empty, healthy=healthy)
            psa.placement = res
            nodes = res.nodes if res.ok else None
        if nodes is None:
            ok = False
            break
        if not empty and i < last:
            pods = [(n, ps.per_pod) for n in nodes]
            engine.pool.add(pods)
            placed.extend(pods)
        out.append(nodes)
    if placed:
        engine.pool.remove(placed)
    return out if ok else None


def placement_stage(
    engine: Engine,
    wl: WorkloadInfo,
    cq: ClusterQueueInfo,
    result: FlavorAssignment,
    *,
    defer: bool = False,
    fit: bool | None = None,
    request: PodSetRequest | None = None,
) -> None:
    """Kueue's TAS step, applied to every flavor: place, else preempt if it could fit, else no fit.

    ``defer``: when a single pod set fits as the nodes are, only say so (``result.nodes_deferred``); the
    cycle places it if it is admitted before anything changes (the same nodes, as nothing changed). ``fit``:
    whether ``result.mode`` is ``PS_FIT``, when the caller knows. ``request``: the single pod set's node request
    (``podset_request``), when the caller has it.
    """
    if (result.mode == PS_FIT) if fit is None else fit:
        result.placement_read = "usage"
        if defer and len(wl.pod_sets) == 1:
            ps = wl.pod_sets[0]
            if ps.per_pod and ps.count:
                if request is None:
                    request = podset_request(engine, cq, ps, result.pod_sets[0].flavors)[0]
                if engine.pool.fits(request):
                    result.nodes_deferred = True
                    result.deferred_request = request
                    return
        nodes = place_all(engine, wl, cq, result.pod_sets)
        if nodes is not None:
            for psa, n in zip(result.pod_sets, nodes, strict=False):
                psa.nodes = n
            return
        failed = next(p for p in result.pod_sets if p.placement is not None and not p.placement.ok)
        _add_placement_reason(engine, cq, wl, failed)
        for res in failed.modes:
            failed.modes[res] = PS_PREEMPT
    if result.mode == PS_PREEMPT:
        result.placement_read = result.placement_read or "empty"
        probe = [PodSetFlavors(p.name, p.count, flavors=dict(p.flavors)) for p in result.pod_sets]
        if place_all(engine, wl, cq, probe, empty=True) is not None:
            _preempt_for_topology(engine, wl, cq, result)
        else:
            failed_probe = next(p for p in probe if p.placement is not None and not p.placement.ok)
            target = next(p for p in result.pod_sets if p.name == failed_probe.name)
            if target.placement is None:
                target.placement = failed_probe.placement
                _add_placement_reason(engine, cq, wl, target)
            target.failed = True
            target.no_fit_reason = TOPOLOGY_PLACEMENT_FAILED


def _preempt_for_topology(engine: Engine, wl: WorkloadInfo, cq: ClusterQueueInfo, result: FlavorAssignment) -> None:
    """Kueue's ``updateModeForTASRequests``: an assignment that preempts and fits on an empty cluster preempts in
    every resource of its TAS pod sets, so a victim that frees only node capacity (quota being enough) counts too."""
    for ps, psa in zip(wl.pod_sets, result.pod_sets, strict=False):
        if not ps.per_pod or ps.count == 0:
            continue
        if podset_request(engine, cq, ps, psa.flavors)[1] is None:
            continue
        for res in psa.modes:
            psa.modes[res] = PS_PREEMPT


def _add_placement_reason(engine: Engine, cq: ClusterQueueInfo, wl: WorkloadInfo, psa: PodSetFlavors) -> None:
    ps = next(p for p in wl.pod_sets if p.name == psa.name)
    _, topo = podset_request(engine, cq, ps, psa.flavors)
    res = psa.placement
    assert res is not None
    if topo is not None:
        psa.reasons.append(msg.tas_not_fit(topo, res.fit, ps.count, res.exclusion_text()))
    else:
        psa.reasons.append("")


def placement_ok(
    engine: Engine, wl: WorkloadInfo, cq: ClusterQueueInfo, assignment: FlavorAssignment
) -> list[list[str]] | None:
    """Where the assignment's pod sets would go now (node names per pod set), or None if one does not fit."""
    request = assignment.deferred_request
    if request is not None and assignment.nodes_deferred:
        # ``place_all``'s lean path for its single pod set, with the request it was nominated with.
        nodes = engine.pool.place_nodes(request)
        return [nodes] if nodes is not None else None
    return place_all(engine, wl, cq, assignment.pod_sets, lean=True)
