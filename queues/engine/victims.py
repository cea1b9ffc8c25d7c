"""Preemption candidates and simulated evictions, shared by classical and fair preemption.

Removing a workload here takes its usage off the quota tree and its pods off the nodes; every caller restores
what it removed before returning.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from .model import FlavorResource
from .protection import protected_until
from .quota import QuotaTree
from .records import (
    EVICTING,
    V_HIER_RECLAIM,
    V_NEVER,
    V_RECLAIM_NO_BORROW,
    V_RECLAIM_WHILE_BORROW,
    V_WITHIN_CQ,
    ClusterQueueInfo,
    WorkloadInfo,
)

if TYPE_CHECKING:
    from .scheduler import Engine


def remove_many(engine: Engine, wls: Iterable[WorkloadInfo]) -> None:
    """Take workloads' usage off the quota tree and their pods off the nodes (simulated eviction)."""
    for w in wls:
        QuotaTree.remove_usage(engine.cqs[w.cq].node, w.usage)  # type: ignore[index]
        engine.pool.remove(w.pods)


def restore_many(engine: Engine, wls: Iterable[WorkloadInfo]) -> None:
    """Undo ``remove_many``."""
    for w in wls:
        QuotaTree.add_usage(engine.cqs[w.cq].node, w.usage)  # type: ignore[index]
        engine.pool.add(w.pods)


def _uses(wl: WorkloadInfo, frs: set[FlavorResource]) -> bool:
    return any(fr in frs for fr in wl.usage)


def _policy(cq: ClusterQueueInfo, cand: WorkloadInfo) -> str:
    """The preemptor queue's policy for ``cand``: ``withinClusterQueue`` in its own queue, else
    ``reclaimWithinCohort``."""
    return cq.spec.preemption.within_cluster_queue if cand.cq == cq.name else cq.spec.preemption.reclaim_within_cohort


def _priority_too_high(cq: ClusterQueueInfo, wl: WorkloadInfo, cand: WorkloadInfo) -> bool:
    policy = _policy(cq, cand)
    lower = wl.priority > cand.priority
    if policy == "LowerPriority":
        return not lower
    if policy == "LowerOrNewerEqualPriority":
        newer_equal = wl.priority == cand.priority and wl.ts < cand.ts
        return not (lower or newer_equal)
    return policy != "Any"


def classify(
    engine: Engine,
    cq: ClusterQueueInfo,
    wl: WorkloadInfo,
    cand: WorkloadInfo,
    frs: set[FlavorResource],
    advantage: bool,
) -> int:
    """Kueue's candidate variant of ``cand`` for ``wl`` (``V_NEVER`` when it may not be preempted, also while the
    portal's protection of ``cand`` holds, unless ``engine.ignore_protection``)."""
    if not _uses(cand, frs):
        return V_NEVER
    if cand.evicted_at == engine.now and cand.state != EVICTING:
        # Evicted and re-admitted at this instant: preempting it again here could repeat forever.
        return V_NEVER
    if _priority_too_high(cq, wl, cand):
        return V_NEVER
    protection = cand.spec.protection
    if protection is not None and cand.state != EVICTING and not engine.ignore_protection:
        # The portal's protected work: not a candidate while a protection rule holds (docs/engine.md); in Kubernetes
        # mode the rule is Kueue's raised priority, which a policy of Any disregards.
        held = protected_until(protection, cand.admitted_at, engine.now) is not None
        if held and not (protection.by_priority and _policy(cq, cand) == "Any"):
            return V_NEVER
    if cand.cq == cq.name:
        return V_WITHIN_CQ
    if advantage:
        return V_HIER_RECLAIM
    bwc = cq.spec.preemption.borrow_within_cohort
    if bwc.policy == "Never":
        return V_RECLAIM_NO_BORROW
    if cand.priority >= wl.priority or (
        bwc.max_priority_threshold is not None and cand.priority > bwc.max_priority_threshold
    ):
        return V_RECLAIM_NO_BORROW
    return V_RECLAIM_WHILE_BORROW


def candidate_order(cq: ClusterQueueInfo, cand: WorkloadInfo) -> tuple:
    """Classical candidate order: other queues first — under fairness that remembers, the queue that borrowed most
    recently first (``usage_decay``) — then lower priority, most recently admitted, key."""
    remembered = cq.root.remembered_keys
    return (
        cand.cq == cq.name,
        -remembered.get(cand.cq or "", 0.0) if remembered is not None else 0.0,
        cand.priority,
        -(cand.admitted_at or 0.0),
        cand.key,
    )


def fair_candidate_key(cq: ClusterQueueInfo, cand: WorkloadInfo) -> tuple:
    """Kueue's candidate order: being evicted, other queues, lower priority, most recently admitted."""
    return (cand.state != EVICTING, *candidate_order(cq, cand))


def fair_candidate_ok(
    engine: Engine, cq: ClusterQueueInfo, wl: WorkloadInfo, cand: WorkloadInfo, frs: set[FlavorResource]
) -> bool:
    """A fair-sharing candidate: uses the contested resources and its queue's policy allows preempting it."""
    return classify(engine, cq, wl, cand, frs, True) != V_NEVER


def quota_fits(cq: ClusterQueueInfo, usage: Mapping[FlavorResource, int], allow_borrowing: bool) -> bool:
    """The usage fits the ClusterQueue's available quota now (without borrowing unless allowed)."""
    node = cq.node
    for fr, v in usage.items():
        if not allow_borrowing and node.borrowing_with(fr, v):
            return False
        if v > QuotaTree.available(node, fr):
            return False
    return True


def minimal_victims(
    engine: Engine, targets: list[tuple[WorkloadInfo, str]], fits: Callable[[], bool]
) -> list[tuple[WorkloadInfo, str]]:
    """Of victims all removed (the last one made it fit), keep only those still needed; restore everything.

    Kueue's fill-back: from the second-to-last victim backwards, a victim whose return still fits is spared.
    """
    for i in range(len(targets) - 2, -1, -1):
        restore_many(engine, [targets[i][0]])
        if fits():
            targets.pop(i)
        else:
            remove_many(engine, [targets[i][0]])
    restore_many(engine, [w for w, _ in targets])
    return targets
