"""Kueue's classical preemption: candidates within the ClusterQueue and across the cohort tree, minimal victims.

With fair sharing on, ``find_targets`` hands over to ``fair_sharing.fair_targets``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from .fair_sharing import fair_targets
from .model import FlavorResource
from .pod_placement import placement_ok
from .quota import QuotaNode
from .records import (
    EVICTING,
    PS_PREEMPT,
    V_NEVER,
    V_RECLAIM_NO_BORROW,
    VARIANT_REASON,
    ClusterQueueInfo,
    FlavorAssignment,
    WorkloadInfo,
)
from .victims import candidate_order, classify, minimal_victims, quota_fits, remove_many, restore_many

if TYPE_CHECKING:
    from .scheduler import Engine


def _collect_subtree(
    engine,
    cq: ClusterQueueInfo,
    wl: WorkloadInfo,
    frs: set[FlavorResource],
    current: QuotaNode,
    lca: QuotaNode,
    skip: QuotaNode | None,
    advantage: bool,
    out: list[tuple[WorkloadInfo, QuotaNode, int]],
) -> None:
    for child in current.child_cohorts:
        if child is skip or child.within_nominal(frs):
            continue
        _collect_subtree(engine, cq, wl, frs, child, lca, skip, advantage, out)
    for child in current.child_cqs:
        if child is cq.node or child.within_nominal(frs):
            continue
        for cand in engine.cqs[child.name].admitted.values():
            variant = classify(engine, cq, wl, cand, frs, advantage)
            if variant != V_NEVER:
                out.append((cand, lca, variant))


def _fits_in_quota(node: QuotaNode, requests: Mapping[FlavorResource, int]) -> tuple[bool, dict[FlavorResource, int]]:
    fits = True
    remaining = {}
    for fr, v in requests.items():
        if node.usage.get(fr, 0) + v > node.subtree.get(fr, 0):
            fits = False
        remaining[fr] = max(0, v - node.local_available(fr))
    return fits, remaining


def find_targets(
    engine,
    wl: WorkloadInfo,
    cq: ClusterQueueInfo,
    frs: set[FlavorResource],
    usage: Mapping[FlavorResource, int],
    *,
    check_placement: bool,
    assignment: FlavorAssignment | None = None,
) -> list[tuple[WorkloadInfo, str]]:
    """Kueue's preemption (fair sharing's when enabled, else classical): targets, empty when none work."""
    if not cq.preempts:
        return []
    if engine.fair is not None:
        return fair_targets(engine, wl, cq, frs, usage, check_placement=check_placement, assignment=assignment)
    policy = cq.spec.preemption
    same_queue: list[tuple[WorkloadInfo, QuotaNode | None, int]] = []
    if policy.within_cluster_queue != "Never":
        for cand in cq.admitted.values():
            variant = classify(engine, cq, wl, cand, frs, False)
            if variant != V_NEVER:
                same_queue.append((cand, None, variant))
    hierarchy: list[tuple[WorkloadInfo, QuotaNode, int]] = []
    priority: list[tuple[WorkloadInfo, QuotaNode, int]] = []
    node = cq.node
    if node.parent is not None and policy.reclaim_within_cohort != "Never":
        advantage, remaining = _fits_in_quota(node, usage)
        previous: QuotaNode | None = None
        for subroot in node.path_to_root():
            target = hierarchy if advantage else priority
            _collect_subtree(engine, cq, wl, frs, subroot, subroot, previous, advantage, target)
            fits, remaining = _fits_in_quota(subroot, remaining)
            advantage = advantage or fits
            previous = subroot
    if not same_queue and not hierarchy and not priority:
        return []

    def order(items: list) -> tuple[list, list]:
        items.sort(key=lambda c: candidate_order(cq, c[0]))
        evicted = [c for c in items if c[0].state == EVICTING]
        rest = [c for c in items if c[0].state != EVICTING]
        return evicted, rest

    ev_h, ne_h = order(hierarchy)
    ev_p, ne_p = order(priority)
    ev_s, ne_s = order(same_queue)
    candidates = ev_h + ev_p + ev_s + ne_h + ne_p + ne_s

    forbidden = policy.borrow_within_cohort.policy == "Never"
    under_nominal = all(node.usage.get(fr, 0) < (cq.quotas[fr].nominal if fr in cq.quotas else 0) for fr in frs)
    if (not hierarchy and not priority) or (forbidden and not under_nominal):
        attempts = [True]
    elif forbidden and not hierarchy:
        attempts = [False, True]
    else:
        attempts = [True, False]
    for allow_borrowing in attempts:
        targets = _minimal(engine, wl, cq, frs, usage, candidates, allow_borrowing, check_placement, assignment)
        if targets:
            return targets
    return []


def _candidate_valid(
    engine: Engine,
    cq: ClusterQueueInfo,
    cand: WorkloadInfo,
    lca: QuotaNode | None,
    variant: int,
    borrow: bool,
    frs: set,
) -> bool:
    if cand.cq == cq.name:
        return True
    if borrow and variant == V_RECLAIM_NO_BORROW:
        return False
    cand_node = engine.cqs[cand.cq].node  # type: ignore[index]
    if cand_node.within_nominal(frs):
        return False
    for anc in cand_node.path_to_root():
        if anc is lca:
            break
        if anc.within_nominal(frs):
            return False
    return True


def _minimal(
    engine,
    wl: WorkloadInfo,
    cq: ClusterQueueInfo,
    frs: set[FlavorResource],
    usage: Mapping[FlavorResource, int],
    candidates: list,
    allow_borrowing: bool,
    check_placement: bool,
    assignment: FlavorAssignment | None,
) -> list[tuple[WorkloadInfo, str]]:
    def fits() -> bool:
        if not quota_fits(cq, usage, allow_borrowing):
            return False
        if check_placement and assignment is not None:
            return placement_ok(engine, wl, cq, assignment) is not None
        return True

    removed: list[tuple[WorkloadInfo, str]] = []
    ok = False
    for cand, lca, variant in candidates:
        if not _candidate_valid(engine, cq, cand, lca, variant, allow_borrowing, frs):
            continue
        remove_many(engine, [cand])
        removed.append((cand, VARIANT_REASON[variant]))
        if fits():
            ok = True
            break
    if not ok:
        restore_many(engine, [w for w, _ in removed])
        return []
    return minimal_victims(engine, list(removed), fits)


def preemption_targets(
    engine: Engine, wl: WorkloadInfo, cq: ClusterQueueInfo, assignment: FlavorAssignment
) -> list[tuple[WorkloadInfo, str]]:
    """Targets for a workload whose assignment needs preemption (empty when none is possible)."""
    frs: set[FlavorResource] = set()
    for psa in assignment.pod_sets:
        for res, mode in psa.modes.items():
            if mode == PS_PREEMPT:
                frs.add((psa.flavors[res], res))
    if not frs:
        return []
    return find_targets(
        engine,
        wl,
        cq,
        frs,
        assignment.usage,
        check_placement=engine.pool.enabled,
        assignment=assignment,
    )
