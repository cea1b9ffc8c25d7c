"""Hierarchical quota accounting (ClusterQueues and Cohorts), with Kueue's lending and borrowing rules.

Each node (ClusterQueue or Cohort) keeps, per (flavor, resource):

* ``subtree`` — its own nominal quota plus what its children put at its disposal
  (a child contributes ``child.subtree - child.guaranteed``);
* ``guaranteed`` — the part kept private by a lendingLimit (``max(0, subtree - lendingLimit)``, else 0);
* ``usage`` — for a ClusterQueue what its admitted workloads use; for a Cohort the sum of what its
  children use beyond their guaranteed part.

Usage is updated incrementally (O(depth)) on every admission and release.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .model import ClusterQueue, Cohort, FlavorResource, ResourceGroup


class QuotaNode:
    """A ClusterQueue or Cohort in the quota tree."""

    __slots__ = (
        "available_cache",
        "borrowing_limit",
        "chain",
        "changes",
        "child_cohorts",
        "child_cqs",
        "children_by_name",
        "fair_weight",
        "guaranteed",
        "height",
        "is_cq",
        "lendable",
        "lending_limit",
        "name",
        "nominal",
        "parent",
        "potential",
        "released",
        "remembered",
        "remembered_keys",
        "subtree",
        "usage",
        "usage_version",
    )

    def __init__(self, name: str, is_cq: bool) -> None:
        self.name = name
        self.is_cq = is_cq
        self.parent: QuotaNode | None = None
        self.child_cqs: list[QuotaNode] = []
        self.child_cohorts: list[QuotaNode] = []
        #: (child Cohorts, child ClusterQueues) sorted by name, once the tree is built (it does not change).
        self.children_by_name: tuple[tuple[QuotaNode, ...], tuple[QuotaNode, ...]] = ((), ())
        self.nominal: dict[FlavorResource, int] = {}
        self.borrowing_limit: dict[FlavorResource, int] = {}
        self.lending_limit: dict[FlavorResource, int] = {}
        self.subtree: dict[FlavorResource, int] = {}
        self.guaranteed: dict[FlavorResource, int] = {}
        self.usage: dict[FlavorResource, int] = {}
        #: Bumped by every change of this node's own ``usage`` (a ClusterQueue's, or a Cohort's share of it).
        self.changes = 0
        self.height = 0
        self.chain: tuple[QuotaNode, ...] = ()
        self.potential: dict[FlavorResource, int] = {}
        self.fair_weight = 1.0
        self.lendable: dict[str, int] | None = None
        # On a root: bumped by every usage change in its tree. On a ClusterQueue: ``available`` per
        # (flavor, resource) with the root's version it was computed at.
        self.usage_version = 0
        self.available_cache: dict[FlavorResource, tuple[int, int]] = {}
        # On a root: all usage ever released in its tree, per (flavor, resource). No ClusterQueue's available
        # quota can grow by more than what is released (see ``queueing.may_fit``).
        self.released: dict[FlavorResource, int] = {}
        #: Fairness that remembers (``usage_decay``): recent usage above the node's quota per resource; None = none.
        self.remembered: dict[str, float] | None = None
        #: On a root whose tree has the policy: each ClusterQueue's remembered share (reclaim's candidate order).
        self.remembered_keys: dict[str, float] | None = None

    def path_to_root(self) -> list[QuotaNode]:
        """Ancestors from the parent up to the root."""
        out = []
        node = self.parent
        while node is not None:
            out.append(node)
            node = node.parent
        return out

    def root(self) -> QuotaNode:
        """The root of this node's tree (itself without a parent): where usage versions and released totals live."""
        if self.chain:
            return self.chain[0]
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def borrowing_with(self, fr: FlavorResource, val: int) -> bool:
        """True when ``usage + val`` exceeds the node's subtree quota."""
        return self.usage.get(fr, 0) + val > self.subtree.get(fr, 0)

    def local_available(self, fr: FlavorResource) -> int:
        """Unused guaranteed (not lent) quota of the node, invisible to its parent."""
        return max(0, self.guaranteed.get(fr, 0) - self.usage.get(fr, 0))

    def within_nominal(self, frs: Iterable[FlavorResource]) -> bool:
        """True when usage does not exceed the subtree quota in any of ``frs``."""
        return all(self.usage.get(fr, 0) <= self.subtree.get(fr, 0) for fr in frs)


def _add_quota(node: QuotaNode, groups: tuple[ResourceGroup, ...]) -> None:
    for group in groups:
        for flavor in group.flavors:
            for res in flavor.resources:
                fr = (flavor.name, res.name)
                node.nominal[fr] = res.nominal
                if res.borrowing_limit is not None:
                    node.borrowing_limit[fr] = res.borrowing_limit
                if res.lending_limit is not None:
                    node.lending_limit[fr] = res.lending_limit


class QuotaTree:
    """The forest of Cohorts and ClusterQueues with incremental usage."""

    def __init__(self, cluster_queues: Iterable[ClusterQueue], cohorts: Iterable[Cohort]) -> None:
        self.cqs: dict[str, QuotaNode] = {}
        self.cohorts: dict[str, QuotaNode] = {}
        self.cyclic: set[str] = set()
        cohort_specs = {c.name: c for c in cohorts}
        for spec in cohort_specs.values():
            node = QuotaNode(spec.name, is_cq=False)
            _add_quota(node, spec.resource_groups)
            node.fair_weight = spec.fair_weight
            self.cohorts[spec.name] = node
        for cspec in cluster_queues:
            node = QuotaNode(cspec.name, is_cq=True)
            _add_quota(node, cspec.resource_groups)
            node.fair_weight = cspec.fair_weight
            self.cqs[cspec.name] = node
            if cspec.cohort:
                parent = self._cohort(cspec.cohort)
                node.parent = parent
                parent.child_cqs.append(node)
        for spec in cohort_specs.values():
            if spec.parent:
                node = self.cohorts[spec.name]
                parent = self._cohort(spec.parent)
                node.parent = parent
                parent.child_cohorts.append(node)
        self._break_cycles()
        for node in self.cohorts.values():
            if node.parent is None:
                self._compute(node)
        for node in self.cqs.values():
            if node.parent is None:
                self._compute(node)
        for node in (*self.cohorts.values(), *self.cqs.values()):
            node.chain = (*reversed(node.path_to_root()), node)
            node.children_by_name = (
                tuple(sorted(node.child_cohorts, key=lambda n: n.name)),
                tuple(sorted(node.child_cqs, key=lambda n: n.name)),
            )

    def _cohort(self, name: str) -> QuotaNode:
        node = self.cohorts.get(name)
        if node is None:
            node = QuotaNode(name, is_cq=False)
            self.cohorts[name] = node
        return node

    def _break_cycles(self) -> None:
        for node in self.cohorts.values():
            seen: set[str] = set()
            cur: QuotaNode | None = node
            while cur is not None:
                if cur.name in seen:
                    self.cyclic.add(node.name)
                    break
                seen.add(cur.name)
                cur = cur.parent
        for name in self.cyclic:
            node = self.cohorts[name]
            if node.parent is not None and node in node.parent.child_cohorts:
                node.parent.child_cohorts.remove(node)
            node.parent = None

    def _compute(self, node: QuotaNode) -> None:
        node.subtree = dict(node.nominal)
        height = 1 if node.child_cqs else 0
        for child in node.child_cohorts:
            self._compute(child)
            height = max(height, child.height + 1)
        for child in node.child_cqs:
            self._compute(child)
        node.height = height if not node.is_cq else 0
        for child in (*node.child_cqs, *node.child_cohorts):
            for fr, q in child.subtree.items():
                node.subtree[fr] = node.subtree.get(fr, 0) + q - child.guaranteed.get(fr, 0)
        node.guaranteed = {fr: max(0, node.subtree.get(fr, 0) - limit) for fr, limit in node.lending_limit.items()}

    def cohort_cqs(self, cq: str) -> list[str]:
        """Names of every ClusterQueue in the same cohort tree as ``cq`` (itself included)."""
        node = self.cqs[cq]
        root = node.root()
        if root is node:
            return [cq]
        out: list[str] = []
        stack = [root]
        while stack:
            cur = stack.pop()
            out.extend(c.name for c in cur.child_cqs)
            stack.extend(cur.child_cohorts)
        return out

    # ------------------------------------------------------------------ usage

    @staticmethod
    def add_usage(node: QuotaNode, usage: Mapping[FlavorResource, int]) -> None:
        """Account ``usage`` to a ClusterQueue and, beyond its guaranteed part, to its ancestors."""
        node.root().usage_version += 1
        for fr, val in usage.items():
            cur: QuotaNode | None = node
            while cur is not None and val > 0:
                used = cur.usage.get(fr, 0)
                local = max(0, cur.guaranteed.get(fr, 0) - used)
                cur.usage[fr] = used + val
                cur.changes += 1
                if val <= local:
                    break
                val -= local
                cur = cur.parent

    @staticmethod
    def remove_usage(node: QuotaNode, usage: Mapping[FlavorResource, int]) -> None:
        """Undo ``add_usage``."""
        root = node.root()
        root.usage_version += 1
        released = root.released
        for fr, val in usage.items():
            if val > 0:
                released[fr] = released.get(fr, 0) + val
            cur: QuotaNode | None = node
            while cur is not None and val > 0:
                used = cur.usage.get(fr, 0)
                stored_in_parent = used - cur.guaranteed.get(fr, 0)
                cur.usage[fr] = used - val
                cur.changes += 1
                if stored_in_parent <= 0:
                    break
                val = min(val, stored_in_parent)
                cur = cur.parent

    # ------------------------------------------------------------------ queries

    @staticmethod
    def available(node: QuotaNode, fr: FlavorResource) -> int:
        """Quota a ClusterQueue can use now for ``fr``: unused guaranteed + what its ancestors can lend.

        Cached per node until a usage change anywhere in its tree (the root's ``usage_version``).
        """
        chain = node.chain or (node,)
        root = chain[0]
        cached = node.available_cache.get(fr)
        if cached is not None and cached[0] == root.usage_version:
            return cached[1]
        value = root.subtree.get(fr, 0) - root.usage.get(fr, 0)
        for cur in chain[1:]:
            usage = cur.usage.get(fr, 0)
            guaranteed = cur.guaranteed.get(fr, 0)
            limit = cur.borrowing_limit.get(fr)
            if limit is not None:
                stored = cur.subtree.get(fr, 0) - guaranteed
                used_in_parent = usage - guaranteed if usage > guaranteed else 0
                capped = stored - used_in_parent + limit
                if capped < value:
                    value = capped
            if guaranteed > usage:
                value += guaranteed - usage
        node.available_cache[fr] = (root.usage_version, value)
        return value

    @staticmethod
    def available_ignoring_borrowing_limits(node: QuotaNode, fr: FlavorResource) -> int:
        """Like ``available`` with every borrowingLimit on the path lifted (to tell a borrow limit apart)."""
        if node.parent is None:
            return node.subtree.get(fr, 0) - node.usage.get(fr, 0)
        local = max(0, node.guaranteed.get(fr, 0) - node.usage.get(fr, 0))
        return local + QuotaTree.available_ignoring_borrowing_limits(node.parent, fr)

    @staticmethod
    def potential_available(node: QuotaNode, fr: FlavorResource) -> int:
        """The most a ClusterQueue could ever use of ``fr`` with nothing else running (maximum capacity)."""
        cached = node.potential.get(fr)
        if cached is not None:
            return cached
        value = QuotaTree._potential(node, fr)
        node.potential[fr] = value
        return value

    @staticmethod
    def _potential(node: QuotaNode, fr: FlavorResource) -> int:
        if node.parent is None:
            return node.subtree.get(fr, 0)
        value = node.guaranteed.get(fr, 0) + QuotaTree._potential(node.parent, fr)
        limit = node.borrowing_limit.get(fr)
        if limit is not None:
            value = min(node.subtree.get(fr, 0) + limit, value)
        return value

    @staticmethod
    def lowest_subtree_that_fits(node: QuotaNode, fr: FlavorResource, val: int) -> tuple[int, bool]:
        """(borrowing height, may reclaim in hierarchy): 0 when ``val`` fits in the queue's own quota."""
        parent = node.parent
        if parent is None:
            return 0, False
        used = node.usage.get(fr, 0)
        if used + val <= node.subtree.get(fr, 0):
            return 0, True
        # ``borrowing_with`` and ``local_available`` up the path, written out (this runs for every assignment).
        guaranteed = node.guaranteed.get(fr, 0)
        remaining = val - (guaranteed - used if guaranteed > used else 0)
        tracking = parent
        while tracking is not None:
            used = tracking.usage.get(fr, 0)
            if used + remaining <= tracking.subtree.get(fr, 0):
                return tracking.height, tracking.parent is not None
            guaranteed = tracking.guaranteed.get(fr, 0)
            if guaranteed > used:
                remaining -= guaranteed - used
            if tracking.parent is None:
                break
            tracking = tracking.parent
        return tracking.height, False

    @staticmethod
    def path(node: QuotaNode) -> str:
        """Kueue's preemption path: ``/root/.../name``."""
        names = [node.name] + [n.name for n in node.path_to_root()]
        return "/" + "/".join(reversed(names))
