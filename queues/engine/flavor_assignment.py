"""Kueue's flavor assignment: for each pod set and resource group, the first (or best) flavor that fits.

A flavor is checked against the pod set (taints, affinity, topology), then each resource against the
quota tree; a resource that does not fit may still be reached by preemption or reclaim. With nodes known,
the assignment then goes through the placement stage.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from . import messages as msg
from .labels import first_untolerated, node_affinity_matches, taint_go_struct
from .model import FlavorResource
from .placement import PodSetRequest
from .pod_placement import placement_stage, podset_request
from .preemption import find_targets
from .quota import QuotaTree
from .records import (
    EXCEEDS_MAX_QUOTA,
    FIT,
    NO_CANDIDATES,
    NO_MATCHING_FLAVOR,
    NOFIT,
    PREEMPT,
    PS_FIT,
    PS_NOFIT,
    PS_PREEMPT,
    RECLAIM,
    SEVERITY,
    WAITING_FOR_QUOTA,
    ClusterQueueInfo,
    FlavorAssignment,
    PodSetFlavors,
    PodSetInfo,
    ResourceGroupInfo,
    WorkloadInfo,
)
from .victims import remove_many, restore_many

if TYPE_CHECKING:
    from .scheduler import Engine


def _check_flavor(engine: Engine, cq: ClusterQueueInfo, fname: str, ps: PodSetInfo) -> tuple[str, str] | None:
    flavor = engine.flavors.get(fname)
    if flavor is None:
        return msg.flavor_not_found(fname), "not_found"
    spec = ps.spec
    topo = spec.topology
    requested = (topo is not None and topo.requested) or cq.tas_only
    if requested:
        if not flavor.topology_name:
            return msg.tas_not_supported(fname), "tas_not_supported"
        topology = engine.topologies.get(flavor.topology_name)
        if topology is None:
            return msg.tas_cache_missing(fname), "tas_cache_missing"
        level = (topo.required or topo.preferred) if topo is not None else None
        if level and level not in topology.levels:
            return msg.tas_level_missing(fname), "tas_level_missing"
    elif flavor.topology_name and not cq.tas_only:
        return msg.tas_only(fname), "tas_only"
    taint = first_untolerated(flavor.node_taints, (*spec.tolerations, *flavor.tolerations))
    if taint is not None:
        return msg.untolerated_taint(taint_go_struct(taint), fname), "taint"
    if not node_affinity_matches(spec.node_selector, spec.node_affinity, flavor.node_labels, flavor.node_labels):
        return msg.affinity_mismatch(fname), "affinity"
    return None


def _fits_resource_quota(
    engine, wl: WorkloadInfo, cq: ClusterQueueInfo, fr: FlavorResource, assumed: int, request: int, explain: bool
) -> tuple[int, int, str | tuple, dict | None]:
    node = cq.node
    if assumed + request == 0:
        # A zero request (a pod set of count 0, or a resource asked for with 0) always fits, at no borrowing.
        return FIT, 0, "", None
    # ``QuotaTree``'s caches read here first (most lookups hit them).
    cached = node.available_cache.get(fr)
    if cached is not None and cached[0] == cq.root.usage_version:
        available = cached[1]
    else:
        available = QuotaTree.available(node, fr)
    maximum = node.potential.get(fr)
    if maximum is None:
        maximum = QuotaTree.potential_available(node, fr)
    val = assumed + request
    info = (
        {"flavor": fr[0], "resource": fr[1], "request": val, "available": available, "maximum": maximum}
        if explain
        else None
    )
    if val > maximum:
        if info is not None:
            info["kind"] = EXCEEDS_MAX_QUOTA
        return NOFIT, 0, ("max", fr[1], fr[0], assumed, request, maximum), info
    borrow, may_reclaim = QuotaTree.lowest_subtree_that_fits(node, fr, val)
    if val <= available:
        if info is not None:
            info["kind"] = ""
        return FIT, borrow, "", info
    reason = ("iuq", fr[1], fr[0], val - available)
    if info is not None:
        info["kind"] = WAITING_FOR_QUOTA
    quota = cq.quotas.get(fr)
    nominal = quota.nominal if quota is not None else 0
    bwc = cq.spec.preemption.borrow_within_cohort.policy != "Never" or (
        engine.fair is not None and cq.spec.preemption.reclaim_within_cohort != "Never"
    )
    if nominal >= val or may_reclaim or bwc:
        targets = find_targets(engine, wl, cq, {fr}, {fr: val}, check_placement=False)
        if not targets:
            return NO_CANDIDATES, borrow, reason, info
        # Borrowing height once the targets are gone.
        remove_many(engine, [t for t, _ in targets])
        borrow_after, _ = QuotaTree.lowest_subtree_that_fits(node, fr, val)
        restore_many(engine, [t for t, _ in targets])
        mode = PREEMPT if any(t.cq == cq.name for t, _ in targets) else RECLAIM
        return mode, borrow_after, reason, info
    return NOFIT, borrow, reason, info


def _preferred(a: tuple[int, int], b: tuple[int, int], preference: str = "BorrowingOverPreemption") -> bool:
    """Kueue's isPreferred (pkg/scheduler/flavorassigner): is (mode, borrowing height) ``a`` better than ``b``?

    A flavor that cannot fit is worst, then one that needs preemption but has no candidates. Then
    ``BorrowingOverPreemption`` (the default) prefers the better mode (fit over reclaim over preemption within
    the queue), a lower borrowing height breaking ties; ``PreemptionOverBorrowing`` prefers the lower
    borrowing height, the better mode breaking ties.
    """
    if a[0] == NOFIT:
        return False
    if b[0] == NOFIT:
        return True
    a_nc, b_nc = a[0] == NO_CANDIDATES, b[0] == NO_CANDIDATES
    if a_nc != b_nc:
        return not a_nc
    if preference == "PreemptionOverBorrowing":
        if a[1] != b[1]:
            return a[1] < b[1]
        return a[0] > b[0]
    if a[0] != b[0]:
        return a[0] > b[0]
    return a[1] < b[1]


def _try_next(mode: tuple[int, int], cq: ClusterQueueInfo) -> bool:
    fung = cq.spec.flavor_fungibility
    if mode[0] in (NOFIT, NO_CANDIDATES):
        return True
    if mode[0] in (PREEMPT, RECLAIM) and fung.when_can_preempt == "TryNextFlavor":
        return True
    return mode[1] > 0 and fung.when_can_borrow == "TryNextFlavor"


def _flavor_check(
    engine: Engine, wl: WorkloadInfo, cq: ClusterQueueInfo, fname: str, ps: PodSetInfo
) -> tuple[str, str] | None:
    """``_check_flavor`` of a pod set on a queue's flavor, shared by the workloads of the same shape and kept on
    the pod set too (hashing the shape costs)."""
    checks = ps.flavor_checks
    key = (cq.name, fname)
    if key in checks:
        return checks[key]
    shared = engine.flavor_checks
    check_key = (cq.name, fname, wl.shape, ps.name)
    bad = shared[check_key] if check_key in shared else _check_flavor(engine, cq, fname, ps)
    shared[check_key] = checks[key] = bad
    return bad


def _find_flavor(
    engine,
    wl: WorkloadInfo,
    cq: ClusterQueueInfo,
    ps: PodSetInfo,
    rg: ResourceGroupInfo,
    requests: Mapping[str, int],
    assumed: Mapping[FlavorResource, int],
    explain: bool = True,
) -> tuple[dict[str, str], dict[str, int], list[str | tuple], int, list[dict]]:
    reasons: list[str | tuple] = []
    attempts: list[dict] = []
    preference = cq.spec.flavor_fungibility.preference
    best: dict[str, str] = {}
    best_modes: dict[str, int] = {}
    best_mode = (NOFIT, 1 << 30)
    for fname in rg.flavors:
        bad = _flavor_check(engine, wl, cq, fname, ps)
        if bad is not None:
            reasons.append(bad[0])
            if explain:
                attempts.append({"flavor": fname, "kind": NO_MATCHING_FLAVOR, "why": bad[1], "reason": bad[0]})
            continue
        rep = (FIT, 0)
        assigned: dict[str, str] = {}
        modes: dict[str, int] = {}
        flavor_kind = ""
        infos = []
        for rname in sorted(requests):
            val = requests[rname]
            fr = (fname, rname)
            pmode, borrow, reason, info = _fits_resource_quota(engine, wl, cq, fr, assumed.get(fr, 0), val, explain)
            if reason:
                reasons.append(reason)
            if info is not None:
                infos.append(info)
                if reason and SEVERITY[info["kind"]] > SEVERITY[flavor_kind]:
                    flavor_kind = info["kind"]
            mode = (pmode, borrow)
            # A mode is never preferred to itself (skips the call in the common case: all resources fit).
            if mode != rep and _preferred(rep, mode, preference):
                rep = mode
            if rep[0] == NOFIT:
                break
            assigned[rname] = fname
            modes[rname] = PS_FIT if pmode == FIT else PS_PREEMPT
        if explain:
            attempts.append(
                {
                    "flavor": fname,
                    "kind": flavor_kind if rep[0] != FIT else "",
                    "mode": rep[0],
                    "borrow": rep[1],
                    "resources": infos,
                }
            )
        if rep[0] == NOFIT:
            assigned, modes = {}, {}
        if not _try_next(rep, cq):
            best, best_modes, best_mode = assigned, modes, rep
            break
        if _preferred(rep, best_mode, preference):
            best, best_modes, best_mode = assigned, modes, rep
    if best_mode[0] == FIT:
        return best, best_modes, [], best_mode[1], attempts
    return best, best_modes, reasons, (best_mode[1] if best_mode[0] != NOFIT else 0), attempts


def assign(
    engine: Engine,
    wl: WorkloadInfo,
    cq: ClusterQueueInfo,
    *,
    place: bool = True,
    defer_nodes: bool = False,
    explain: bool = True,
) -> FlavorAssignment:
    """Kueue's flavor assignment for every pod set (then node placement when nodes are known).

    ``defer_nodes``: see ``pod_placement.placement_stage``'s ``defer`` (the cycle's nomination). ``explain``
    False leaves the pod sets' ``group_attempts`` (what each flavor was found to be, for wait reasons) empty.
    """
    result = FlavorAssignment(pod_sets=[], usage={})
    covers_pods = "pods" in cq.rg_of
    for ps in wl.pod_sets:
        requests = dict(ps.total)
        if ps.zero:
            # Kueue assigns a flavor (usage 0) to a zero request its ClusterQueue covers, and drops it otherwise.
            for res in ps.zero:
                requests.setdefault(res, 0)
        if covers_pods:
            requests["pods"] = ps.count
        psa = PodSetFlavors(ps.name, ps.count, usage=requests)
        result.pod_sets.append(psa)
        for res in sorted(requests):
            if res in psa.flavors:
                continue
            rg_idx = cq.rg_of.get(res)
            if rg_idx is None:
                if requests[res] == 0:
                    continue
                psa.reasons.append(msg.resource_unavailable(res))
                psa.no_fit_reason = NO_MATCHING_FLAVOR
                psa.failed = True
                if explain:
                    psa.group_attempts.append(
                        [
                            {
                                "flavor": "",
                                "kind": NO_MATCHING_FLAVOR,
                                "why": "undeclared",
                                "resource": res,
                                "reason": psa.reasons[-1],
                            }
                        ]
                    )
                break
            rg = cq.rgs[rg_idx]
            group_requests = {r: v for r, v in requests.items() if r in rg.covered}
            flavors, modes, reasons, borrow, attempts = _find_flavor(
                engine, wl, cq, ps, rg, group_requests, result.usage, explain
            )
            if explain:
                psa.group_attempts.append(attempts)
            if not flavors:
                psa.reasons.extend(reasons)
                psa.failed = True
                break
            psa.flavors.update(flavors)
            psa.modes.update(modes)
            psa.reasons.extend(reasons)
            result.borrow = max(result.borrow, borrow)
        if psa.failed:
            return result
        for res, val in requests.items():
            flavor = psa.flavors.get(res)
            if flavor is not None:
                fr = (flavor, res)
                result.usage[fr] = result.usage.get(fr, 0) + val
    if result.mode == PS_NOFIT:
        return result
    if place and engine.pool.enabled:
        placement_stage(engine, wl, cq, result, defer=defer_nodes)
    return result


def quota_fit_plan(engine: Engine, wl: WorkloadInfo, cq: ClusterQueueInfo) -> tuple | None:
    """What ``assign_if_fits`` checks for a shape: (its flavor, its ((flavor, resource), request) pairs in resource
    order, then the flavors, modes, requests and usage its assignment holds when it fits, to be copied); None when
    the shape is not that simple (then ``assign`` decides).

    Simple: one pod set whose requests are all positive and covered by one resource group of a single flavor that
    passes its checks (``_check_flavor``).
    """
    single = cq.single_pod_set_requests(wl)
    if single is None:
        return None
    ps, requests = single
    if not requests or ps.zero or any(v <= 0 for v in requests.values()):
        return None
    groups = {cq.rg_of.get(r) for r in requests}
    if len(groups) != 1 or None in groups:
        return None
    (idx,) = groups
    rg = cq.rgs[idx]  # type: ignore[index]
    if len(rg.flavors) != 1:
        return None
    fname = rg.flavors[0]
    if _flavor_check(engine, wl, cq, fname, ps) is not None:
        return None
    checks = tuple(((fname, r), requests[r]) for r in sorted(requests))
    flavors = {fr[1]: fname for fr, _ in checks}
    usage = {(fname, r): v for r, v in requests.items()}
    # The pod set's node request, by whether nodes count pods: the same object for every workload of the shape.
    node_requests: dict[bool, PodSetRequest] = {}
    return fname, checks, flavors, dict.fromkeys(flavors, PS_FIT), requests, usage, node_requests


def assign_if_fits(
    engine: Engine, wl: WorkloadInfo, cq: ClusterQueueInfo, plan: tuple, *, defer_nodes: bool = False
) -> FlavorAssignment | None:
    """``assign(engine, wl, cq, defer_nodes=..., explain=False)`` for a shape with a ``quota_fit_plan`` when every
    resource fits its quota as it is; None otherwise (``assign`` then decides, as without this shortcut).

    With a single flavor that fits, ``assign`` takes it with the highest borrowing height among its resources and
    no reasons; this builds that result directly.
    """
    _, checks, flavors, modes, requests, usage, node_requests = plan
    borrow = 0
    for fr, val in checks:
        pmode, height, _, _ = _fits_resource_quota(engine, wl, cq, fr, 0, val, False)
        if pmode != FIT:
            return None
        if height > borrow:
            borrow = height
    ps = wl.pod_sets[0]
    psa = PodSetFlavors(ps.name, ps.count, flavors=dict(flavors), modes=dict(modes), usage=dict(requests))
    result = FlavorAssignment(pod_sets=[psa], usage=dict(usage), borrow=borrow)
    pool = engine.pool
    if pool.enabled:
        counts_pods = pool.counts_pods
        request = node_requests.get(counts_pods)
        if request is None:
            request = node_requests[counts_pods] = podset_request(engine, cq, ps, flavors)[0]
        placement_stage(engine, wl, cq, result, defer=defer_nodes, fit=True, request=request)
    return result
