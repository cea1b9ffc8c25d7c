"""The fair-sharing admission order as it was first written, to check the engine's faster one against.

``reference_tournament`` recomputes every head's shares from scratch before each pick (no memo, no kept keys) and
compares heads pairwise with ``fair_share.compare``; ``reference_all_inadmissible`` gives every head its quota
assignment and leaves them to the tournament, as the cycle did before it parked them at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from queues.engine.fair_share import Share, compare, share
from queues.engine.fair_sharing import _lifted
from queues.engine.flavor_assignment import assign
from queues.engine.quota import QuotaNode
from queues.engine.records import CycleEntry


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
