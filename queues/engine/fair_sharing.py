"""Kueue's fair sharing (KEP-1714) in the scheduling cycle: the admission tournament and fair preemption.

Used by ``cycle`` and ``preemption`` when ``ClusterState.fair_sharing`` is set (Kueue's Configuration
``fairSharing``). Shares come from ``fair_share``; quota changes made here to simulate an admission or an
eviction are always undone before returning.

* **Admission order** (``tournament``): within a cohort tree, every ClusterQueue's head competes with the
  share its subtree *would have if the head were admitted*; at each Cohort the child that would not borrow
  (on the flavors the head asks for) wins, then the lowest share, then the higher priority, then the older
  queue time. The winner is processed, the shares are recomputed, and the tournament runs again.
* **Preemption** (``fair_targets``): candidates are the preemptor queue's own workloads
  (``withinClusterQueue``) and those of borrowing queues in its cohort tree (``reclaimWithinCohort``);
  ``borrowWithinCohort`` plays no part. Queues are visited highest share first, walking down the tree, and a
  candidate of another queue is taken only if the strategy holds between the shares of the two subtrees
  just below their lowest common Cohort: ``LessThanOrEqualToFinalShare`` (preemptor's share with the
  incoming workload ≤ target's share without the candidate), then ``LessThanInitialShare`` (< the target's
  share now). A preemptor that stays within its nominal quota reclaims without the share test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from .fair_share import NEGATIVE, Share, compare, order_key, share
from .model import FlavorResource
from .pod_placement import placement_ok
from .quota import QuotaNode, QuotaTree
from .records import ClusterQueueInfo, CycleEntry, FlavorAssignment, WorkloadInfo
from .victims import fair_candidate_key, fair_candidate_ok, minimal_victims, quota_fits, remove_many, restore_many

if TYPE_CHECKING:
    from .scheduler import Engine

LTE_FINAL = "LessThanOrEqualToFinalShare"
LT_INITIAL = "LessThanInitialShare"


def _children(node: QuotaNode) -> tuple[tuple[QuotaNode, ...], tuple[QuotaNode, ...]]:
    """(child Cohorts, child ClusterQueues) by name: Kueue iterates them in map order, the engine by name."""
    return node.children_by_name


# ---------------------------------------------------------------------------------------------- admission


def tournament(
    entries: list[CycleEntry], classic_key: Callable[[CycleEntry], tuple], fifo_key: Callable[[CycleEntry], tuple]
) -> Iterator[CycleEntry]:
    """Yield the cycle's entries in Kueue's fair-sharing order, recomputing shares after each one is processed.

    Each cohort tree runs its own tournament; trees share no quota, so only the tree whose entry was just
    processed is recomputed. Kueue takes the trees in map order; the engine picks, among the trees'
    winners, the first in the classic order (``classic_key``), and so keeps a deterministic order.
    ``fifo_key`` breaks ties of share and priority (queue time, then key).
    """
    if len(entries) < 2:
        yield from entries
        return
    trees: dict[int, _Tree] = {}
    for e in entries:
        root = e.cq.node.root()
        tree = trees.get(id(root))
        if tree is None:
            tree = trees[id(root)] = _Tree(root, fifo_key)
        tree.remaining[e.cq.name] = e
    winners: dict[int, CycleEntry] = {}
    while trees:
        for tid, tree in trees.items():
            if tid not in winners:
                winners[tid] = tree.winner()
        if len(winners) == 1:
            tid = next(iter(winners))
        else:
            tid = min(winners, key=lambda t: classic_key(winners[t]))
        best = winners.pop(tid)
        remaining = trees[tid].remaining
        del remaining[best.cq.name]
        if not remaining:
            del trees[tid]
        yield best


class _Tree:
    """One cohort tree's entries in a tournament, with their order keys while no usage in the tree changes."""

    __slots__ = ("fifo_key", "flat", "keys", "remaining", "root", "version")

    def __init__(self, root: QuotaNode, fifo_key: Callable[[CycleEntry], tuple]) -> None:
        self.root = root
        self.fifo_key = fifo_key
        self.remaining: dict[str, CycleEntry] = {}
        #: The root's ``usage_version`` the keys were worked out at (None: not yet).
        self.version: int | None = None
        self.keys: dict[str, dict[str, tuple[bool, bool, float]]] = {}
        #: For a tree of one Cohort and its ClusterQueues: each entry's whole order key there.
        self.flat: dict[str, tuple] = {}

    def winner(self) -> CycleEntry:
        """The tournament winner among the remaining entries (a queue without a cohort is its own tree).

        At each Cohort the candidates are ordered by the key of ``_entry_keys`` there, then priority, then
        ``fifo_key``: a total order (the workload key ends ``fifo_key``), so the winner is the minimum by it. The
        keys read only usage in the tree: they hold while the root's ``usage_version`` does.
        """
        remaining = self.remaining
        if len(remaining) == 1:
            return next(iter(remaining.values()))
        root = self.root
        flat = not root.child_cohorts
        if self.version != root.usage_version:
            self.version = root.usage_version
            if flat:
                top, fifo_key = root.name, self.fifo_key
                self.flat = {name: (_entry_keys(e)[top], -e.wl.priority, fifo_key(e)) for name, e in remaining.items()}
            else:
                self.keys = {name: _entry_keys(e) for name, e in remaining.items()}
        if flat:
            return remaining[min(remaining, key=self.flat.__getitem__)]
        winner = self._run(root)
        assert winner is not None
        return winner

    def _run(self, cohort: QuotaNode) -> CycleEntry | None:
        """The winner below ``cohort`` (None: no entry there)."""
        child_cohorts, child_cqs = _children(cohort)
        remaining = self.remaining
        candidates = [w for c in child_cohorts if (w := self._run(c)) is not None]
        candidates.extend(remaining[c.name] for c in child_cqs if c.name in remaining)
        if len(candidates) < 2:
            return candidates[0] if candidates else None
        name, keys, fifo_key = cohort.name, self.keys, self.fifo_key
        return min(candidates, key=lambda e: (keys[e.cq.name][name], -e.wl.priority, fifo_key(e)))


def _entry_keys(e: CycleEntry) -> dict[str, tuple[bool, bool, float]]:
    """Per Cohort on the entry's path, the order key of its child on the path were the workload admitted (worked
    out without touching the usage): whether that child would borrow on the flavors the workload asks for, then
    its share (``fair_share.order_key``).

    These read the usage of the nodes on the path below the root only, so they are kept on the workload until
    one of those nodes' usage (``QuotaNode.changes``) or the assignment's usage changes.
    """
    node = e.cq.node
    usage = e.assignment.usage
    signature = tuple(n.changes for n in node.chain[1:])
    memo = e.wl.share_memo
    if memo is not None and memo[0] is node and memo[1] == signature and memo[2] == usage:
        return memo[3]
    out: dict[str, tuple[bool, bool, float]] = {}
    extra = _lifted(node, usage)
    value = share(node, extra.get(id(node)))
    for ancestor in node.path_to_root():
        out[ancestor.name] = (value.borrowing_on(usage), *order_key(value))
        if ancestor.parent is not None:
            value = share(ancestor, extra.get(id(ancestor)))
    e.wl.share_memo = (node, signature, dict(usage), out)
    return out


def _lifted(node: QuotaNode, usage: Mapping[FlavorResource, int]) -> dict[int, dict[FlavorResource, int]]:
    """What ``QuotaTree.add_usage(node, usage)`` would add to the usage of ``node`` and each ancestor (by id)."""
    out: dict[int, dict[FlavorResource, int]] = {}
    for fr, val in usage.items():
        cur: QuotaNode | None = node
        while cur is not None and val > 0:
            used = cur.usage.get(fr, 0)
            local = max(0, cur.guaranteed.get(fr, 0) - used)
            added = out.setdefault(id(cur), {})
            added[fr] = added.get(fr, 0) + val
            if val <= local:
                break
            val -= local
            cur = cur.parent
    return out


# ---------------------------------------------------------------------------------------------- preemption


class _Ordering:
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
        #: Each visited node's share with its ``QuotaNode.changes`` then (by id: the tree outlives the ordering).
        self.shares: dict[int, tuple[int, Share]] = {}

    def share(self, node: QuotaNode) -> Share:
        """``share(node)``, kept while the node's usage is unchanged (one candidate removed changes few nodes)."""
        kept = self.shares.get(id(node))
        if kept is not None and kept[0] == node.changes:
            return kept[1]
        value = share(node)
        self.shares[id(node)] = (node.changes, value)
        return value

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
        child_cohorts, child_cqs = _children(cohort)
        best_cq: QuotaNode | None = None
        best_cq_share = NEGATIVE
        for node in child_cqs:
            if node.name in self.pruned_cqs:
                continue
            value = self.share(node)
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
            value = self.share(node)
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


def _almost_lcas(preemptor: QuotaNode, target: QuotaNode, ancestors: set[int]) -> tuple[QuotaNode, QuotaNode]:
    """The two nodes just below the lowest Cohort that holds both queues (a queue itself, or a Cohort)."""
    lca = next(a for a in target.path_to_root() if id(a) in ancestors)

    def below(node: QuotaNode) -> QuotaNode:
        cur = node
        while cur.parent is not lca:
            assert cur.parent is not None
            cur = cur.parent
        return cur

    return below(preemptor), below(target)


def _candidates(
    engine: Engine,
    wl: WorkloadInfo,
    cq: ClusterQueueInfo,
    frs: set[FlavorResource],
    usage: Mapping[FlavorResource, int],
) -> Iterator[tuple[WorkloadInfo, str]]:
    """Kueue's fair-sharing candidate iterator; each yielded candidate has been removed from the snapshot."""
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
    ordering = _Ordering(node, found, cq)
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
        # The candidates looked at here are all of the target queue, each one put back before the next: one with the
        # usage of an earlier one leaves the same share (the removal and restoring still happen, as they count as
        # usage changes and releases).
        final_test: dict[tuple, bool] = {}
        while ordering.has(target.name):
            cand = ordering.pop(target.name)
            if first == LTE_FINAL:
                cand_node = engine.cqs[cand.cq or ""].node
                QuotaTree.remove_usage(cand_node, cand.usage)
                seen = tuple(cand.usage.items())
                passed = final_test.get(seen)
                if passed is None:
                    passed = final_test[seen] = compare(preemptor_new, share(theirs)) <= 0
                QuotaTree.add_usage(cand_node, cand.usage)
            else:
                passed = compare(preemptor_new, target_old) < 0
            if passed:
                remove_many(engine, [cand])
                yield cand, "InCohortFairSharing"
                break
            retry.append(cand)
    if len(strategies) < 2 or not retry:
        return
    ordering = _Ordering(node, retry, cq)
    for target in ordering:
        mine, theirs = _almost_lcas(node, target, ordering.ancestors)
        passed = compare(share(mine), share(theirs)) < 0
        cand = ordering.pop(target.name)
        if passed:
            remove_many(engine, [cand])
            yield cand, "InCohortFairSharing"
        ordering.drop(target.name)


def fair_targets(
    engine: Engine,
    wl: WorkloadInfo,
    cq: ClusterQueueInfo,
    frs: set[FlavorResource],
    usage: Mapping[FlavorResource, int],
    *,
    check_placement: bool,
    assignment: FlavorAssignment | None,
) -> list[tuple[WorkloadInfo, str]]:
    """Kueue's fair preemption: candidates in fair-sharing order until the workload fits, then a minimal set.

    The shares seen while choosing include the incoming workload's usage; the fit checks do not. Fitting
    may borrow (``borrowWithinCohort`` is not consulted).
    """
    node = cq.node

    def fits() -> bool:
        if not quota_fits(cq, usage, True):
            return False
        if check_placement and assignment is not None:
            return placement_ok(engine, wl, cq, assignment) is not None
        return True

    QuotaTree.add_usage(node, usage)
    targets: list[tuple[WorkloadInfo, str]] = []
    ok = False
    for target in _candidates(engine, wl, cq, frs, usage):
        targets.append(target)
        QuotaTree.remove_usage(node, usage)
        ok = fits()
        QuotaTree.add_usage(node, usage)
        if ok:
            break
    QuotaTree.remove_usage(node, usage)
    if not ok:
        restore_many(engine, [w for w, _ in targets])
        return []
    return minimal_victims(engine, targets, fits)
