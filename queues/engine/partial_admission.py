"""Kueue's partial admission: a workload with a pod set that declares ``minCount`` may be admitted with fewer pods.

When the full workload neither fits nor can preempt, Kueue searches the largest pod counts that do
(``pkg/scheduler/flavorassigner/podset_reducer.go``, ``PodSetReducer.Search``): every variable pod set walks
down from its count to its ``minCount`` together, in ``total + 1`` steps where ``total`` is the sum of what each
may drop, and a binary search (Go's ``sort.Search``) finds the first step whose assignment fits or has preemption
targets. Kueue's counts start from the spec's ``count`` (its reclaimable pods are not taken off during the
search), and the same is done here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .flavor_assignment import assign
from .model import PodSet
from .records import PS_FIT, PS_PREEMPT, ClusterQueueInfo, FlavorAssignment, PodSetInfo, WorkloadInfo

if TYPE_CHECKING:
    from .scheduler import Engine

#: A found reduction: its assignment, its preemption targets (empty: it fits) and the pod sets it admits.
Found = tuple[FlavorAssignment, list, list[PodSetInfo]]


def can_reduce(wl: WorkloadInfo) -> bool:
    """True when a pod set of ``wl`` declares a ``minCount`` below its count (Kueue's CanBePartiallyAdmitted)."""
    return wl.reducible


def _counts(full: list[int], deltas: list[int], up: int, down: int) -> list[int]:
    """Kueue's fillPodSetSizesForSearchIndex: each pod set's count at step ``up`` of ``down``."""
    return [count - delta * up // down for count, delta in zip(full, deltas, strict=True)]


def largest_counts(specs: list[PodSet], fits: Callable[[list[int]], bool]) -> list[int] | None:
    """Kueue's PodSetReducer.Search: the pod counts of the first step (from the full counts down to every
    ``minCount``) for which ``fits`` holds, by binary search; None when none does (or nothing can be reduced)."""
    full = [s.count for s in specs]
    deltas = [s.count - (s.min_count if s.min_count is not None else s.count) for s in specs]
    total = sum(deltas)
    if total <= 0:
        return None
    good: list[int] | None = None
    good_step = 0
    # Go's sort.Search over [0, total]: the first step that fits; found only if the last success is that step.
    lo, hi = 0, total + 1
    while lo < hi:
        mid = (lo + hi) // 2
        counts = _counts(full, deltas, mid, total)
        if fits(counts):
            good, good_step = counts, mid
            hi = mid
        else:
            lo = mid + 1
    if good is None or lo != good_step:
        return None
    return good


def search(
    engine: Engine,
    wl: WorkloadInfo,
    cq: ClusterQueueInfo,
    targets_of: Callable[[FlavorAssignment], list],
    *,
    explain: bool = False,
) -> Found | None:
    """The largest counts that fit (or can preempt: ``targets_of`` finds the targets of a Preempt assignment).

    ``wl.pod_sets`` is restored before returning; the caller installs the found pod sets while it admits them.
    """
    specs = [ps.spec for ps in wl.full_pod_sets]
    made: dict[tuple[int, int], PodSetInfo] = {}
    found: dict[tuple[int, ...], Found] = {}
    saved = wl.pod_sets

    def fits(counts: list[int]) -> bool:
        pod_sets = []
        for i, count in enumerate(counts):
            info = made.get((i, count))
            if info is None:
                info = made[(i, count)] = PodSetInfo(specs[i], count)
            pod_sets.append(info)
        wl.pod_sets = pod_sets
        assignment = assign(engine, wl, cq, defer_nodes=not explain, explain=explain)
        mode = assignment.mode
        targets: list = []
        if mode == PS_PREEMPT:
            targets = targets_of(assignment)
        if mode == PS_FIT or targets:
            found[tuple(counts)] = (assignment, targets, pod_sets)
            return True
        return False

    try:
        counts = largest_counts(specs, fits)
    finally:
        wl.pod_sets = saved
    return None if counts is None else found[tuple(counts)]


__all__ = ["Found", "can_reduce", "largest_counts", "search"]
