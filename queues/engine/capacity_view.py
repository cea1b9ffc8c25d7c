"""Free capacity kept up to date per request shape: the topology domain tree of ``placement`` made incremental.

A ``CapacityView`` is the domain tree of one placement filter (``placement._Static``: the nodes a pod set may
use, with its topology levels) for one per-pod request. Each domain knows how many such pods fit in it, and
each domain's children — and all domains of one depth — are kept sorted by (pods that fit, key), so that a
placement is a few bisections instead of a scan of every node. The pool records which nodes changed; a view
catches up on its next use by recomputing only those leaves and the path above each (cost: changed nodes ×
depth × log fan-out), and rebuilds from scratch only when more nodes changed than it holds.

``FreeSummary`` is the same idea for ``NodePool.free_summary`` (total free and largest free per resource).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Iterator, Sequence

#: A sorted list of domain codes: ``cap << shift | rank``, ``rank`` being the domain's place in key order among the
#: domains of its depth. Ordering the codes orders by (pods that fit, key) with plain integer comparisons (plain
#: lists: fan-outs are small, and a move is one memmove).
SortedEntries = list

#: A leaf's capacity when none of the requested resources is reported by its node (no limit).
UNBOUNDED = 1 << 20

#: Placeholder for an optional resource no node reports (``free_summary``: no limit).
UNLIMITED_SUMMARY = 1 << 60


class Domain:
    """A topology domain (or a node, at the leaves) with how many pods of the view's shape fit in it."""

    __slots__ = ("cap", "children_deg", "children_pref", "degraded", "depth", "key", "leaf_index", "parent", "rank")

    def __init__(self, key: tuple[str, ...], parent: Domain | None, depth: int, leaf_index: int = -1) -> None:
        self.key = key
        self.parent = parent
        self.depth = depth
        self.leaf_index = leaf_index
        self.cap = 0
        self.degraded = False
        #: Place in key order among the domains of its depth (see ``SortedEntries``).
        self.rank = 0
        # Children codes: those without degraded devices, and those with.
        self.children_pref: SortedEntries = []
        self.children_deg: SortedEntries = []

    @property
    def is_leaf(self) -> bool:
        """True for a node."""
        return self.leaf_index >= 0


class CapacityView:
    """Pods of one shape that fit per domain, over one static node filter, updated from node changes."""

    def __init__(self, static, wanted: Sequence[tuple[str, int]], columns: Sequence[list[int | None]], empty: bool):
        self.static = static
        self.wanted = tuple(wanted)
        self.columns = columns
        self.empty = empty
        self.nodes = static.nodes
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        self.reported = [any(c is not None for c in col) for col in columns]
        self.seen = -1
        self._build()

    # ------------------------------------------------------------------ building and updating

    def _leaf_figures(self, i: int) -> tuple[int, str, list[int]]:
        """(pods that fit, first resource with none free or "", free per wanted resource) for node ``i``."""
        used = self.nodes[i].used
        fit = UNBOUNDED
        blocking = ""
        frees = []
        columns = self.columns
        empty = self.empty
        for j, (res, need) in enumerate(self.wanted):
            total = columns[j][i]
            if total is None:
                frees.append(0)
                continue
            free = total if empty else total - used.get(res, 0)
            if free < 0:
                free = 0
            frees.append(free)
            pods = free // need
            if pods < fit:
                fit = pods
                if pods == 0 and not blocking:
                    blocking = res
        if fit <= 0:
            fit = 0
        return fit, blocking, frees

    def _build(self) -> None:
        """Compute every leaf and the sorted structures from scratch."""
        static = self.static
        self.sums = [0] * len(self.wanted)
        self.blocked: Counter[str] = Counter()
        self.leaf_block: list[str] = []
        self.leaf_free: list[list[int]] = []
        self.root = Domain((), None, 0)
        domains_by_key: dict[tuple[str, ...], Domain] = {(): self.root}
        self.leaves: list[Domain] = []
        for i, skel in enumerate(static.leaves):
            fit, blocking, frees = self._leaf_figures(i)
            self.leaf_block.append(blocking)
            self.leaf_free.append(frees)
            for j, f in enumerate(frees):
                self.sums[j] += f
            if blocking:
                self.blocked[blocking] += 1
            parent = self.root
            for depth in range(1, len(skel.key)):
                key = skel.key[:depth]
                dom = domains_by_key.get(key)
                if dom is None:
                    dom = Domain(key, parent, depth)
                    domains_by_key[key] = dom
                parent = dom
            leaf = Domain(skel.key, parent, len(skel.key), i)
            leaf.cap = fit
            leaf.degraded = skel.degraded
            self.leaves.append(leaf)
        self.leaf_depth = len(static.leaves[0].key) if static.leaves else 1
        # Internal caps bottom-up, then the ranks, the sorted children and the depth lists.
        internal = sorted((d for d in domains_by_key.values() if d is not self.root), key=lambda d: -d.depth)
        children: dict[int, list[Domain]] = {}
        for leaf in self.leaves:
            children.setdefault(id(leaf.parent), []).append(leaf)
        for dom in internal:
            kids = children.get(id(dom), [])
            dom.cap = sum(k.cap for k in kids)
            children.setdefault(id(dom.parent), []).append(dom)
        #: Per depth, its domains in key order (a domain's index is its rank).
        self.by_depth: dict[int, list[Domain]] = {}
        for dom in [*internal, *self.leaves]:
            self.by_depth.setdefault(dom.depth, []).append(dom)
        widest = 1
        for doms in self.by_depth.values():
            doms.sort(key=lambda d: d.key)
            for rank, dom in enumerate(doms):
                dom.rank = rank
            widest = max(widest, len(doms))
        self.shift = widest.bit_length()
        self.mask = (1 << self.shift) - 1
        shift = self.shift
        for dom in [self.root, *internal]:
            kids = children.get(id(dom), [])
            if dom is self.root:
                dom.cap = sum(k.cap for k in kids)
            dom.children_pref = sorted(k.cap << shift | k.rank for k in kids if not k.degraded)
            dom.children_deg = sorted(k.cap << shift | k.rank for k in kids if k.degraded)
        # All domains of a depth, sorted, built for the depths a topology rule asks about (see ``_level``).
        self.levels: dict[int, tuple[SortedEntries, SortedEntries]] = {}
        self._paths: dict[int, tuple] = {}

    def _level(self, depth: int) -> tuple[SortedEntries, SortedEntries]:
        """The codes of the domains at ``depth``: without degraded devices, with (kept up to date)."""
        lists = self.levels.get(depth)
        if lists is None:
            doms = self.by_depth.get(depth, [])
            shift = self.shift
            lists = (
                sorted(d.cap << shift | d.rank for d in doms if not d.degraded),
                sorted(d.cap << shift | d.rank for d in doms if d.degraded),
            )
            self.levels[depth] = lists
            self._paths = {}  # a path now passes through this depth's lists too
        return lists

    def catch_up(self, changed: Sequence[str] | None, version: int) -> None:
        """Apply the node changes since the last use (None: unknown, rebuild)."""
        if self.empty:
            self.seen = version
            return
        if changed is None or len(changed) > len(self.nodes):
            self._build()
        else:
            index = self.index
            for i in {index.get(n, -1) for n in changed}:
                if i >= 0:
                    self._update_leaf(i)
        self.seen = version

    def _update_leaf(self, i: int) -> None:
        wanted = self.wanted
        total = self.columns[0][i] if len(wanted) == 1 else None
        if total is not None:
            # One resource reported by the node (the common case), as ``_leaf_figures`` computes it.
            res, need = wanted[0]
            free = total if self.empty else total - self.nodes[i].used.get(res, 0)
            if free < 0:
                free = 0
            fit = free // need
            if fit >= UNBOUNDED:
                fit = UNBOUNDED
            blocking = res if fit == 0 else ""
            row = self.leaf_free[i]
            if row[0] != free:
                self.sums[0] += free - row[0]
                row[0] = free
        else:
            fit, blocking, frees = self._leaf_figures(i)
            old_frees = self.leaf_free[i]
            if frees != old_frees:
                sums = self.sums
                for j, f in enumerate(frees):
                    sums[j] += f - old_frees[j]
                self.leaf_free[i] = frees
        old_block = self.leaf_block[i]
        if old_block != blocking:
            if old_block:
                self.blocked[old_block] -= 1
                if not self.blocked[old_block]:
                    del self.blocked[old_block]
            if blocking:
                self.blocked[blocking] += 1
            self.leaf_block[i] = blocking
        leaf = self.leaves[i]
        delta = fit - leaf.cap
        if delta == 0:
            return
        shift = self.shift
        moved = delta << shift
        path = self._paths.get(i)
        if path is None:
            path = self._paths[i] = self._path(leaf)
        for dom, entries, level in path:
            old = dom.cap << shift | dom.rank
            dom.cap += delta
            new = old + moved
            del entries[bisect_left(entries, old)]
            insort(entries, new)
            if level is not None:
                del level[bisect_left(level, old)]
                insort(level, new)
        self.root.cap += delta

    def _path(self, leaf: Domain) -> tuple[tuple[Domain, SortedEntries, SortedEntries | None], ...]:
        """From ``leaf`` up to the root's children: each domain with the sorted lists that hold its code."""
        out = []
        dom = leaf
        parent = dom.parent
        while parent is not None:
            level = self.levels.get(dom.depth)
            out.append(
                (
                    dom,
                    parent.children_deg if dom.degraded else parent.children_pref,
                    None if level is None else level[1] if dom.degraded else level[0],
                )
            )
            dom = parent
            parent = dom.parent
        return tuple(out)

    # ------------------------------------------------------------------ queries

    def exclusions(self) -> dict[str, int]:
        """The static filter's exclusions plus the nodes with no room for one pod, by blocking resource."""
        out = dict(self.static.exclusions)
        for res in sorted(self.blocked):
            label = f'resource "{res}"'
            out[label] = out.get(label, 0) + self.blocked[res]
        return out

    def free_units(self) -> dict[str, int]:
        """Free units per requested resource over the filter's nodes (resources no node reports left out)."""
        return {res: self.sums[j] for j, (res, _) in enumerate(self.wanted) if self.reported[j]}

    def depth_of(self, level_idx: int) -> int:
        """The tree depth of topology level ``level_idx`` (nodes for the hostname level)."""
        return min(level_idx + 1, self.leaf_depth)

    def best_fit_at(self, depth: int, count: int) -> Domain | None:
        """The domain at ``depth`` with room for ``count`` pods and the least room (a non-degraded node first)."""
        low = count << self.shift
        for sl in self._level(depth):
            i = bisect_left(sl, low)
            if i < len(sl):
                return self.by_depth[depth][sl[i] & self.mask]
        return None

    def largest_at(self, depth: int) -> Domain | None:
        """The domain at ``depth`` with the most room (the smallest key among equals); None without domains."""
        shift = self.shift
        best: int | None = None
        for sl in self._level(depth):
            if not sl:
                continue
            top = sl[bisect_left(sl, sl[-1] >> shift << shift)]
            if best is None or top >> shift > best >> shift or (top >> shift == best >> shift and top < best):
                best = top
        return self.by_depth[depth][best & self.mask] if best is not None else None

    def fill(self, domain: Domain, count: int) -> list[str]:
        """Assign ``count`` pods inside ``domain`` (which has room for them), as ``placement._fill`` does.

        Nodes with degraded devices are used last; each group is filled on as few sub-domains as possible,
        best-fit on the last one.
        """
        if domain.leaf_index >= 0:
            return [self.nodes[domain.leaf_index].name] * count
        pref, deg = domain.children_pref, domain.children_deg
        kids = self.by_depth[domain.depth + 1]
        if not deg or deg[-1] >> self.shift <= 0:
            return self._fill_children(pref, kids, count)
        # Asking the preferred children for more than they hold fills each of them completely.
        first = self._fill_children(pref, kids, count)
        return first + self._fill_children(deg, kids, count - len(first))

    def _fill_children(self, children: SortedEntries, kids: list[Domain], count: int) -> list[str]:
        """``count`` pods over ``children`` (codes of ``kids``): fewest children, best-fit on the last."""
        shift, mask = self.shift, self.mask
        remaining = count
        out: list[str] = []
        taken: set[int] = set()
        order = _biggest_first(children, shift)
        while remaining > 0:
            i = bisect_left(children, remaining << shift)
            while i < len(children) and children[i] & mask in taken:
                i += 1
            if i < len(children):
                out.extend(self.fill(kids[children[i] & mask], remaining))
                return out
            entry = next(order, None)
            if entry is None or entry >> shift <= 0:
                break
            taken.add(entry & mask)
            cap = entry >> shift
            out.extend(self.fill(kids[entry & mask], cap))
            remaining -= cap
        return out


def _biggest_first(sl: SortedEntries, shift: int) -> Iterator[int]:
    """Codes by cap descending, key ascending among equal caps (the order ``placement._fill_children`` pops)."""
    end = len(sl)
    while end > 0:
        cap = sl[end - 1] >> shift
        start = bisect_left(sl, cap << shift)
        for j in range(start, end):
            yield sl[j]
        end = start


class FreeSummary:
    """Per resource (total free, largest free on one node) over a fixed set of nodes, updated from changes."""

    def __init__(self, nodes: Sequence, resources: Sequence[str], optional: frozenset[str]) -> None:
        self.nodes = list(nodes)
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        self.resources = tuple(resources)
        self.optional = optional
        self.seen = -1
        self._build()

    def _free(self, i: int, res: str) -> int:
        node = self.nodes[i]
        return node.allocatable.get(res, 0) - node.used.get(res, 0)

    def _build(self) -> None:
        self._figures: dict[str, tuple[int, int]] | None = None
        self.unlimited = {
            res for res in self.resources if res in self.optional and any(res not in n.allocatable for n in self.nodes)
        }
        self.free = [[self._free(i, res) for res in self.resources] for i in range(len(self.nodes))]
        self.totals = [0] * len(self.resources)
        self.counts: list[Counter[int]] = [Counter() for _ in self.resources]
        for row in self.free:
            for j, f in enumerate(row):
                if f > 0:
                    self.totals[j] += f
                    self.counts[j][f] += 1

    def catch_up(self, changed: Sequence[str] | None, version: int) -> None:
        """Apply the node changes since the last use (None: unknown, rebuild)."""
        if changed is None or len(changed) > len(self.nodes):
            self._build()
        else:
            index = self.index
            nodes, free, totals, all_counts = self.nodes, self.free, self.totals, self.counts
            for i in {index.get(n, -1) for n in changed}:
                if i < 0:
                    continue
                node = nodes[i]
                allocatable, used = node.allocatable, node.used
                row = free[i]
                for j, res in enumerate(self.resources):
                    new = allocatable.get(res, 0) - used.get(res, 0)
                    old = row[j]
                    if new == old:
                        continue
                    self._figures = None
                    counts = all_counts[j]
                    if old > 0:
                        totals[j] -= old
                        left = counts[old] - 1
                        if left:
                            counts[old] = left
                        else:
                            del counts[old]
                    if new > 0:
                        totals[j] += new
                        counts[new] = counts.get(new, 0) + 1
                    row[j] = new
        self.seen = version

    def figures(self) -> dict[str, tuple[int, int]]:
        """Per resource (total free, largest free on one node); kept until a node changes (do not modify it)."""
        out = self._figures
        if out is None:
            out = {}
            for j, res in enumerate(self.resources):
                if res in self.unlimited:
                    out[res] = (UNLIMITED_SUMMARY, UNLIMITED_SUMMARY)
                else:
                    out[res] = (self.totals[j], max(self.counts[j], default=0))
            self._figures = out
        return out
