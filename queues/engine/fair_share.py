"""Kueue's dominant resource share (DRS): the value fair sharing compares ClusterQueues and Cohorts by.

For a node (ClusterQueue or Cohort) that has a parent: per resource, the usage above the node's own subtree
quota summed over flavors, ×1000, divided by what the parent's tree could lend of that resource (the
parent's potential available quota summed over the flavors of the whole tree); the largest of those ratios
(the *dominant* resource) divided by the node's fair-sharing weight. Weight 0 while borrowing = infinite.
A node without a parent, or not borrowing, has share 0. ``status.fairSharing.weightedShare`` is that value
rounded up to an integer (``MAX_SHARE`` for infinite).

Comparisons use the precise (float) value, as Kueue does; nothing here changes the quota tree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from .model import FlavorResource
from .quota import QuotaNode, QuotaTree

#: ``weightedShare`` of a node with weight 0 that borrows (Go's MaxInt64).
MAX_SHARE = 2**63 - 1


class Share:
    """The dominant resource share of one node: weight, unweighted ratio, dominant resource, what it borrows."""

    __slots__ = ("borrowed", "borrowing", "ratio", "resource", "weight")

    def __init__(
        self,
        weight: float,
        ratio: float = 0.0,
        resource: str = "",
        borrowed: tuple[FlavorResource, ...] = (),
    ) -> None:
        self.weight = weight
        self.ratio = ratio
        self.resource = resource
        self.borrowed = borrowed
        self.borrowing = bool(borrowed)

    @property
    def infinite(self) -> bool:
        """Weight 0 and borrowing: an infinite share (always last for admission, first for preemption)."""
        return self.weight == 0 and self.borrowing

    @property
    def is_zero(self) -> bool:
        """The unweighted ratio is 0 (not borrowing, or borrowing only what the cohort lends none of)."""
        return self.ratio == 0

    @property
    def precise(self) -> float:
        """The weighted share as a float (``inf`` for weight 0 while borrowing)."""
        if self.infinite:
            return math.inf
        if self.ratio == 0:
            return 0.0
        return self.ratio / self.weight

    @property
    def weighted_share(self) -> int:
        """Kueue's ``status.fairSharing.weightedShare``: the precise share rounded up, MAX_SHARE when infinite."""
        if self.infinite:
            return MAX_SHARE
        return math.ceil(self.precise)

    def borrowing_on(self, requested: Mapping[FlavorResource, int]) -> bool:
        """True when the node borrows a flavor/resource that ``requested`` asks for."""
        return any(requested.get(fr, 0) > 0 for fr in self.borrowed)

    def __repr__(self) -> str:
        return f"Share({self.precise:g}, resource={self.resource!r}, borrowing={self.borrowing})"


#: Below every real share: the starting point of "highest share" searches.
NEGATIVE = Share(1.0, -1.0)


def compare(a: Share, b: Share) -> int:
    """-1, 0 or 1 as ``a``'s share is lower, equal or higher than ``b``'s (lower = preferred for admission)."""
    if a.infinite and b.infinite:
        x, y = a.ratio, b.ratio
    elif a.infinite:
        return 1
    elif b.infinite:
        return -1
    else:
        x, y = a.precise, b.precise
    return (x > y) - (x < y)


def order_key(value: Share) -> tuple[bool, float]:
    """``compare``'s order as a sort key: finite shares by their precise value, then infinite ones by ratio."""
    if value.infinite:
        return True, value.ratio
    return False, value.precise


def lendable(node: QuotaNode) -> dict[str, int]:
    """Per resource, what ``node``'s tree could lend at most: its potential available quota over every flavor."""
    cached = node.lendable
    if cached is None:
        cached = {}
        for fr in node.root().subtree:
            cached[fr[1]] = cached.get(fr[1], 0) + QuotaTree.potential_available(node, fr)
        node.lendable = cached
    return cached


def share(node: QuotaNode, extra: Mapping[FlavorResource, int] | None = None) -> Share:
    """The node's dominant resource share now (plus ``extra`` usage on the node itself, if given).

    Under fairness that remembers (``usage_decay``), a node that borrows now also counts its remembered
    borrowing (recent usage above its quota) per resource.
    """
    if node.parent is None:
        return Share(node.fair_weight)
    borrowing: dict[str, int] = {}
    borrowed: list[FlavorResource] = []
    usage = node.usage
    for fr, quota in node.subtree.items():
        amount = usage.get(fr, 0) - quota
        if extra:
            amount += extra.get(fr, 0)
        if amount > 0:
            borrowing[fr[1]] = borrowing.get(fr[1], 0) + amount
            borrowed.append(fr)
    if not borrowing:
        return Share(node.fair_weight)
    lend = lendable(node.parent)
    ratio, dominant = 0.0, ""
    remembered = node.remembered
    if remembered:
        for resource in sorted(set(borrowing) | set(remembered)):
            available = lend.get(resource, 0)
            if available > 0:
                value = (borrowing.get(resource, 0) + remembered.get(resource, 0.0)) * 1000.0 / available
                if value > ratio:
                    ratio, dominant = value, resource
        return Share(node.fair_weight, ratio, dominant, tuple(borrowed))
    for resource in sorted(borrowing):
        available = lend.get(resource, 0)
        if available > 0:
            value = borrowing[resource] * 1000.0 / available
            if value > ratio:
                ratio, dominant = value, resource
    return Share(node.fair_weight, ratio, dominant, tuple(borrowed))


def remembered_share(node: QuotaNode) -> float:
    """The node's remembered borrowing as a share (per mille of what its parent could lend, dominant resource,
    divided by its weight; ``inf`` for weight 0): how fairness that remembers orders borrowers without fair
    sharing, and reclaim's candidates. 0 without the policy or without a parent."""
    remembered = node.remembered
    if not remembered or node.parent is None:
        return 0.0
    lend = lendable(node.parent)
    ratio = 0.0
    for resource, amount in remembered.items():
        available = lend.get(resource, 0)
        if available > 0:
            ratio = max(ratio, amount * 1000.0 / available)
    if ratio == 0:
        return 0.0
    return math.inf if node.fair_weight == 0 else ratio / node.fair_weight
