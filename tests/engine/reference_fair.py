"""The fair-sharing admission order as it was first written, to check the engine's faster one against.

``reference_tournament`` recomputes every head's shares from scratch before each pick (no memo, no kept keys) and
compares heads pairwise with ``fair_share.compare``; ``reference_all_inadmissible`` gives every head its quota
assignment and leaves them to the tournament, as the cycle did before it parked them at once;
``reference_candidates`` is fair preemption's candidate iterator with every share worked out afresh.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from queues.engine.fair_share import NEGATIVE, Share, compare, share
from queues.engine.fair_sharing import LTE_FINAL, _almost_lcas, _lifted
from queues.engine.flavor_assignment import assign
from queues.engine.model import FlavorResource
from queues.engine.quota import QuotaNode, QuotaTree
from queues.engine.records import ClusterQueueInfo, CycleEntry, WorkloadInfo
from queues.engine.victims import fair_candidate_key, fair_candidate_ok, remove_many


def reference_tournament(
    entries: list[CycleEntry], classic_key: Callable[[CycleEntry], tuple], fifo_key: Callable[[CycleEntry], tuple]
) -> Iterator[CycleEntry]:
    """``fair_sharing.tournament``'s order, every tree's winner worked out from scratch at each step."""
    by_tree: dict[int, dict[str, CycleEntry]] = {}
    roots: dict[int, QuotaNode] = {}
    for e in entries:
        root = e.cq.node.root()
        by_tree.setdefault(id(root), {})[e.cq.name] = e
        roots[id(root)] = root
    while by_tree:
        winners = {tree: _winner(roots[tree], remaining, fifo_key) for tree, remaining in by_tree.items()}
        tree = min(winners, key=lambda t: classic_key(winners[t]))
        best = winners[tree]
        remaining = by_tree[tree]
        del remaining[best.cq.name]
        if not remaining:
            del by_tree[tree]
        yield best


def reference_all_inadmissible(engine, heads, outcome) -> list[CycleEntry]:
    """The heads as quota-only tournament entries, each found inadmissible in its turn."""
    return [
        CycleEntry(wl, cq, assign(engine, wl, cq, place=False, explain=False), [], False, quick=True)
        for cq, wl in heads
    ]


def _shares(e: CycleEntry) -> dict[str, tuple[bool, Share]]:
    node = e.cq.node
    usage = e.assignment.usage
    out: dict[str, tuple[bool, Share]] = {}
    extra = _lifted(node, usage)
    value = share(node, extra.get(id(node)))
    for ancestor in node.path_to_root():
        out[ancestor.name] = (value.borrowing_on(usage), value)
        if ancestor.parent is not None:
            value = share(ancestor, extra.get(id(ancestor)))
    return out


def _winner(
    root: QuotaNode, remaining: Mapping[str, CycleEntry], fifo_key: Callable[[CycleEntry], tuple]
) -> CycleEntry:
    if root.is_cq:
        return remaining[root.name]
    shares = {name: _shares(e) for name, e in remaining.items()}

    def less(a: CycleEntry, b: CycleEntry, cohort: str) -> bool:
        borrow_a, sa = shares[a.cq.name][cohort]
        borrow_b, sb = shares[b.cq.name][cohort]
        if borrow_a != borrow_b:
            return not borrow_a
        order = compare(sa, sb)
        if order:
            return order < 0
        if a.wl.priority != b.wl.priority:
            return a.wl.priority > b.wl.priority
        return fifo_key(a) < fifo_key(b)

    def run(cohort: QuotaNode) -> CycleEntry | None:
        child_cohorts, child_cqs = cohort.children_by_name
        candidates = [w for c in child_cohorts if (w := run(c)) is not None]
        candidates.extend(remaining[c.name] for c in child_cqs if c.name in remaining)
        if not candidates:
            return None
        best = candidates[0]
        for current in candidates[1:]:
            if less(current, best, cohort.name):
                best = current
        return best

    winner = run(root)
    assert winner is not None
    return winner


# ---------------------------------------------------------------------------------------------- preemption


class _ReferenceOrdering:
    """Kueue's TargetClusterQueueOrdering: queues with candidates, highest share first down the cohort tree."""

    def __init__(self, preemptor: QuotaNode, candidates: list[WorkloadInfo], cq: ClusterQueueInfo) -> None:
        self.preemptor = preemptor
        self.ancestors = {id(n) for n in preemptor.path_to_root()}
        self.by_cq: dict[str, list[WorkloadInfo]] = {}
        for cand in candidates:
            self.by_cq.setdefault(cand.cq or "", []).append(cand)
        self.pruned_cqs: set[str] = set()
        self.pruned_cohorts: set[int] = set()
        self.cq = cq

    def has(self, name: str) -> bool:
        """The queue still has candidates."""
        return bool(self.by_cq.get(name))

    def pop(self, name: str) -> WorkloadInfo:
        """The queue's next candidate."""
        return self.by_cq[name].pop(0)

    def drop(self, name: str) -> None:
        """Consider no more candidates of this queue."""
        self.pruned_cqs.add(name)

    def __iter__(self) -> Iterator[QuotaNode]:
        if self.preemptor.parent is None:
            while self.has(self.preemptor.name):
                yield self.preemptor
            return
        root = self.preemptor.root()
        while id(root) not in self.pruned_cohorts:
            target = self._next(root)
            if target is not None:
                yield target

    def _next(self, cohort: QuotaNode) -> QuotaNode | None:
        child_cohorts, child_cqs = cohort.children_by_name
        best_cq: QuotaNode | None = None
        best_cq_share = NEGATIVE
        for node in child_cqs:
            if node.name in self.pruned_cqs:
                continue
            value = share(node)
            if (value.is_zero and node is not self.preemptor) or not self.has(node.name):
                self.pruned_cqs.add(node.name)
                continue
            order = compare(value, best_cq_share)
            if order == 0 and best_cq is not None:
                first_new, first_best = self.by_cq[node.name][0], self.by_cq[best_cq.name][0]
                if fair_candidate_key(self.cq, first_new) < fair_candidate_key(self.cq, first_best):
                    best_cq = node
            elif order > 0:
                best_cq, best_cq_share = node, value
        best_cohort: QuotaNode | None = None
        best_cohort_share = NEGATIVE
        for node in child_cohorts:
            if id(node) in self.pruned_cohorts:
                continue
            value = share(node)
            if value.is_zero and id(node) not in self.ancestors:
                self.pruned_cohorts.add(id(node))
            elif compare(value, best_cohort_share) >= 0:
                best_cohort, best_cohort_share = node, value
        if best_cohort is None and best_cq is None:
            self.pruned_cohorts.add(id(cohort))
            return None
        if best_cohort is not None and compare(best_cohort_share, best_cq_share) >= 0:
            return self._next(best_cohort)
        return best_cq


def reference_candidates(
    engine,
    wl: WorkloadInfo,
    cq: ClusterQueueInfo,
    frs: set[FlavorResource],
    usage: Mapping[FlavorResource, int],
) -> Iterator[tuple[WorkloadInfo, str]]:
    """``fair_sharing._candidates`` as first written: every share worked out afresh."""
    policy = cq.spec.preemption
    found: list[WorkloadInfo] = []
    if policy.within_cluster_queue != "Never":
        found.extend(c for c in cq.admitted.values() if fair_candidate_ok(engine, cq, wl, c, frs))
    node = cq.node
    if node.parent is not None and policy.reclaim_within_cohort != "Never":
        for other in cq.cohort_cqs:
            if other is cq or not any(other.node.borrowing_with(fr, 0) for fr in frs):
                continue
            found.extend(c for c in other.admitted.values() if fair_candidate_ok(engine, cq, wl, c, frs))
    if not found:
        return
    found.sort(key=lambda c: fair_candidate_key(cq, c))
    strategies = engine.fair.preemption_strategies if engine.fair is not None else ()
    first = strategies[0] if strategies else LTE_FINAL
    within_nominal = not any(node.borrowing_with(fr, 0) for fr in frs)
    ordering = _ReferenceOrdering(node, found, cq)
    retry: list[WorkloadInfo] = []
    for target in ordering:
        if target is node:
            cand = ordering.pop(target.name)
            remove_many(engine, [cand])
            yield cand, "InClusterQueue"
            continue
        if within_nominal:
            cand = ordering.pop(target.name)
            remove_many(engine, [cand])
            yield cand, "InCohortReclamation"
            continue
        mine, theirs = _almost_lcas(node, target, ordering.ancestors)
        preemptor_new, target_old = share(mine), share(theirs)
        if preemptor_new.infinite and not target_old.infinite:
            while ordering.has(target.name):
                retry.append(ordering.pop(target.name))
            continue
        while ordering.has(target.name):
            cand = ordering.pop(target.name)
            if first == LTE_FINAL:
                cand_node = engine.cqs[cand.cq or ""].node
                QuotaTree.remove_usage(cand_node, cand.usage)
                target_new = share(theirs)
                QuotaTree.add_usage(cand_node, cand.usage)
                passed = compare(preemptor_new, target_new) <= 0
            else:
                passed = compare(preemptor_new, target_old) < 0
            if passed:
                remove_many(engine, [cand])
                yield cand, "InCohortFairSharing"
                break
            retry.append(cand)
    if len(strategies) < 2 or not retry:
        return
    ordering = _ReferenceOrdering(node, retry, cq)
    for target in ordering:
        mine, theirs = _almost_lcas(node, target, ordering.ancestors)
        passed = compare(share(mine), share(theirs)) < 0
        cand = ordering.pop(target.name)
        if passed:
            remove_many(engine, [cand])
            yield cand, "InCohortFairSharing"
        ordering.drop(target.name)
