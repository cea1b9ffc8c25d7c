"""Reservations as quota: what the holds in force do to the ClusterQueues and Cohorts of a cohort tree.

A hold (``model.QuotaHold``) reserves ``count`` units of one flavor and resource for one ClusterQueue over a window.
While it is in force:

* the holder's **guaranteed** quota rises by the count: its nominal quota rises by it and its lending limit stays
  where it was (no lending limit becomes one equal to the old nominal), so the reserved units are never lent;
* the **rest of its cohort tree** (every other ClusterQueue of the tree with that flavor and resource, and the
  Cohorts' own quota of it) gives up as much nominal quota, in proportion to what each may give (its nominal less
  what earlier holds reserved for it), the largest remainders rounding up, ties by kind and name; a donor's lending
  limit above its new nominal comes down to it. The tree's total stays the same: no capacity is invented;
* the holder's ``reclaimWithinCohort`` becomes ``Any``, so borrowers of the reserved units are reclaimed (preempted,
  with the checkpoint a victim's class asks for) whatever their priority.

Holds apply in order of start, then name. A hold that cannot be fully honoured (the holder has no cohort or no quota
line of that flavor and resource, or the tree holds less than is asked) moves what it can and says why
(``HoldOutcome.problem``); the portal refuses such a reservation before it is approved.

Pure: plain dataclasses in and out, like the rest of the engine. ``scheduler.Engine`` applies the holds in force at
its time; ``simulation.Replay`` rebuilds it at every edge of a window (docs/engine.md, "Reservations").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kernel.quantity import format_quantity

from .model import ClusterQueue, Cohort, FlavorQuotas, PreemptionPolicy, QuotaHold, ResourceGroup

#: Owner kinds of quota, as the outcomes and the quota views name them.
CLUSTER_QUEUE = "ClusterQueue"
COHORT = "Cohort"


@dataclass(frozen=True, slots=True)
class QuotaShift:
    """Nominal quota one ClusterQueue or Cohort gained (positive: the holder) or gave up (negative) for a hold."""

    kind: str
    name: str
    delta: int


@dataclass(frozen=True, slots=True)
class HoldOutcome:
    """What one hold in force moved: the units it got, each shift, and why it got less than it asked ("": all)."""

    hold: QuotaHold
    moved: int
    shifts: tuple[QuotaShift, ...] = ()
    problem: str = ""


@dataclass(frozen=True, slots=True)
class HeldQuota:
    """The ClusterQueues and Cohorts with the holds applied, and what each hold moved (in the order applied)."""

    cluster_queues: tuple[ClusterQueue, ...]
    cohorts: tuple[Cohort, ...]
    outcomes: tuple[HoldOutcome, ...]


def in_force(holds: Iterable[QuotaHold], at: float) -> tuple[QuotaHold, ...]:
    """The holds in force at ``at`` (``start <= at < end``), in the order they apply (start, then name)."""
    return tuple(sorted((h for h in holds if h.start <= at < h.end), key=lambda h: (h.start, h.name)))


def edges_after(holds: Iterable[QuotaHold], after: float) -> list[tuple[float, str]]:
    """Every instant after ``after`` at which the holds in force change, with its label, in time order."""
    out: dict[float, list[str]] = {}
    for hold in holds:
        if hold.end <= hold.start:
            continue
        if hold.start > after:
            out.setdefault(hold.start, []).append(f"reservation {hold.name} opens")
        if hold.end > after:
            out.setdefault(hold.end, []).append(f"reservation {hold.name} closes")
    return [(when, "; ".join(sorted(labels))) for when, labels in sorted(out.items())]


def cohort_roots(cohorts: Sequence[Cohort]) -> dict[str, str]:
    """Cohort name → the root of its tree (a cohort named nowhere as declared is a root of its own)."""
    parents = {c.name: c.parent for c in cohorts}
    out: dict[str, str] = {}
    for name in parents:
        seen = {name}
        top = name
        while parents.get(top) and parents[top] not in seen:
            top = parents[top] or top
            seen.add(top)
        out[name] = top
    return out


class _Lines:
    """Mutable quota lines per owner: (kind, name) → (flavor, resource) → [nominal, borrowing limit, lending limit]."""

    def __init__(self, cluster_queues: Sequence[ClusterQueue], cohorts: Sequence[Cohort]) -> None:
        self.values: dict[tuple[str, str], dict[tuple[str, str], list[Any]]] = {}
        for kind, owners in ((CLUSTER_QUEUE, cluster_queues), (COHORT, cohorts)):
            for owner in owners:
                lines = self.values.setdefault((kind, owner.name), {})
                for group in owner.resource_groups:
                    for fq in group.flavors:
                        for rq in fq.resources:
                            lines[(fq.name, rq.name)] = [rq.nominal, rq.borrowing_limit, rq.lending_limit]

    def line(self, kind: str, name: str, flavor: str, resource: str) -> list[Any] | None:
        return self.values.get((kind, name), {}).get((flavor, resource))

    def groups(self, kind: str, name: str, groups: tuple[ResourceGroup, ...]) -> tuple[ResourceGroup, ...]:
        """``groups`` with this owner's current values (the same structure, the same objects where unchanged)."""
        lines = self.values.get((kind, name), {})
        out = []
        for group in groups:
            flavors = []
            for fq in group.flavors:
                resources = []
                for rq in fq.resources:
                    nominal, borrowing, lending = lines[(fq.name, rq.name)]
                    changed = (nominal, borrowing, lending) != (rq.nominal, rq.borrowing_limit, rq.lending_limit)
                    resources.append(replace(rq, nominal=nominal, lending_limit=lending) if changed else rq)
                flavors.append(FlavorQuotas(name=fq.name, resources=tuple(resources)))
            out.append(ResourceGroup(covered_resources=group.covered_resources, flavors=tuple(flavors)))
        return tuple(out)


def _split(take: int, available: list[tuple[tuple[str, str], int]]) -> dict[tuple[str, str], int]:
    """``take`` units split in proportion to each donor's ``available`` (largest remainders first, then by key)."""
    total = sum(amount for _, amount in available)
    if take <= 0 or total <= 0:
        return {}
    shares = {key: take * amount // total for key, amount in available}
    left = take - sum(shares.values())
    by_remainder = sorted(available, key=lambda item: (-(take * item[1] % total), item[0]))
    for key, _ in by_remainder[:left]:
        shares[key] += 1
    return {key: share for key, share in shares.items() if share}


def hold_quota(
    cluster_queues: Sequence[ClusterQueue], cohorts: Sequence[Cohort], holds: Iterable[QuotaHold]
) -> HeldQuota:
    """The ClusterQueues and Cohorts with ``holds`` applied (all of them: select those in force first), and what each
    moved. See the module's docstring for the rule."""
    ordered = sorted(holds, key=lambda h: (h.start, h.name))
    if not ordered:
        return HeldQuota(tuple(cluster_queues), tuple(cohorts), ())
    lines = _Lines(cluster_queues, cohorts)
    roots = cohort_roots(cohorts)
    queues = {cq.name: cq for cq in cluster_queues}
    #: Units earlier holds reserved for an owner's (flavor, resource): not given away by later ones.
    protected: dict[tuple[str, str, str, str], int] = {}
    reclaiming: set[str] = set()
    outcomes = []
    for hold in ordered:
        holder = queues.get(hold.cluster_queue)
        where = f"{hold.flavor}/{hold.resource}"
        if holder is None:
            outcomes.append(HoldOutcome(hold, 0, problem=f"ClusterQueue {hold.cluster_queue} does not exist"))
            continue
        if holder.cohort is None:
            outcomes.append(
                HoldOutcome(hold, 0, problem=f"ClusterQueue {holder.name} is in no cohort: no quota can move to it")
            )
            continue
        own = lines.line(CLUSTER_QUEUE, holder.name, hold.flavor, hold.resource)
        if own is None:
            outcomes.append(HoldOutcome(hold, 0, problem=f"ClusterQueue {holder.name} has no quota of {where}"))
            continue
        root = roots.get(holder.cohort, holder.cohort)
        donors: list[tuple[tuple[str, str], int]] = []
        for cq in sorted(cluster_queues, key=lambda c: c.name):
            if cq.name == holder.name or cq.cohort is None or roots.get(cq.cohort, cq.cohort) != root:
                continue
            line = lines.line(CLUSTER_QUEUE, cq.name, hold.flavor, hold.resource)
            if line is not None:
                spare = line[0] - protected.get((CLUSTER_QUEUE, cq.name, hold.flavor, hold.resource), 0)
                donors.append(((CLUSTER_QUEUE, cq.name), max(spare, 0)))
        for cohort in sorted(cohorts, key=lambda c: c.name):
            if roots.get(cohort.name) != root:
                continue
            line = lines.line(COHORT, cohort.name, hold.flavor, hold.resource)
            if line is not None:
                donors.append(((COHORT, cohort.name), max(line[0], 0)))
        spare_total = sum(amount for _, amount in donors)
        take = min(hold.count, spare_total)
        shares = _split(take, donors)
        shifts = []
        for (kind, name), share in sorted(shares.items()):
            line = lines.line(kind, name, hold.flavor, hold.resource)
            assert line is not None
            line[0] -= share
            if line[2] is not None and line[2] > line[0]:
                line[2] = line[0]
            shifts.append(QuotaShift(kind, name, -share))
        if take:
            if own[2] is None:
                own[2] = own[0]  # what it could lend before stays lendable; the reserved units are guaranteed
            own[0] += take
            key = (CLUSTER_QUEUE, holder.name, hold.flavor, hold.resource)
            protected[key] = protected.get(key, 0) + take
            reclaiming.add(holder.name)
            shifts.append(QuotaShift(CLUSTER_QUEUE, holder.name, take))
        problem = ""
        if take < hold.count:
            problem = (
                f"the rest of cohort {root} has {format_quantity(spare_total, hold.resource)} of {where} to give, "
                f"{format_quantity(hold.count, hold.resource)} reserved"
            )
        outcomes.append(HoldOutcome(hold, take, tuple(shifts), problem))
    new_queues = []
    for cq in cluster_queues:
        groups = lines.groups(CLUSTER_QUEUE, cq.name, cq.resource_groups)
        changed = groups != cq.resource_groups
        preemption = cq.preemption
        if cq.name in reclaiming and preemption.reclaim_within_cohort != "Any":
            preemption = replace(preemption, reclaim_within_cohort="Any")
        if changed or preemption is not cq.preemption:
            cq = replace(cq, resource_groups=groups, preemption=preemption)
        new_queues.append(cq)
    new_cohorts = []
    for cohort in cohorts:
        groups = lines.groups(COHORT, cohort.name, cohort.resource_groups)
        new_cohorts.append(replace(cohort, resource_groups=groups) if groups != cohort.resource_groups else cohort)
    return HeldQuota(tuple(new_queues), tuple(new_cohorts), tuple(outcomes))


def touched(holds: Iterable[QuotaHold]) -> set[tuple[str, str]]:
    """The (flavor, resource) pairs the holds reserve."""
    return {(h.flavor, h.resource) for h in holds}


def quota_view(
    cluster_queues: Sequence[ClusterQueue], cohorts: Sequence[Cohort], pairs: set[tuple[str, str]]
) -> dict[str, dict[str, dict[str, Any]]]:
    """``Kind/name`` → ``flavor/resource`` → its quota as Kueue prints it (nominal, borrowing and lending limits), for
    the given pairs only; ClusterQueues also say their ``reclaimWithinCohort``."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    owners: list[tuple[str, str, tuple[ResourceGroup, ...], PreemptionPolicy | None]] = [
        (CLUSTER_QUEUE, cq.name, cq.resource_groups, cq.preemption) for cq in cluster_queues
    ]
    owners += [(COHORT, c.name, c.resource_groups, None) for c in cohorts]
    for kind, name, groups, preemption in sorted(owners, key=lambda o: (o[0], o[1])):
        entries: dict[str, dict[str, Any]] = {}
        for group in groups:
            for fq in group.flavors:
                for rq in fq.resources:
                    if (fq.name, rq.name) not in pairs:
                        continue
                    entry: dict[str, Any] = {"nominal": format_quantity(rq.nominal, rq.name)}
                    if rq.borrowing_limit is not None:
                        entry["borrowingLimit"] = format_quantity(rq.borrowing_limit, rq.name)
                    if rq.lending_limit is not None:
                        entry["lendingLimit"] = format_quantity(rq.lending_limit, rq.name)
                    if preemption is not None:
                        entry["reclaimWithinCohort"] = preemption.reclaim_within_cohort
                    entries[f"{fq.name}/{rq.name}"] = entry
        if entries:
            out[f"{kind}/{name}"] = entries
    return out


__all__ = [
    "CLUSTER_QUEUE",
    "COHORT",
    "HeldQuota",
    "HoldOutcome",
    "QuotaShift",
    "cohort_roots",
    "edges_after",
    "hold_quota",
    "in_force",
    "quota_view",
    "touched",
]
