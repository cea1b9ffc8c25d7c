"""Effective quota: the guaranteed (nominal) quotas a cluster's healthy capacity can back, per the cohort's policy.

Pure (no Django): claims and capacity in, effective quotas out; ``queues.guarantees.selectors`` feeds it from the
database. Per (flavor, resource) of one cluster:

* the *claims* are the nominal quotas of every quota line on it (the teams' ClusterQueues and the cohorts' own);
  a claim's *base* is its configured nominal plus any adjustment the caller brings (a reservation's, for one:
  ``adjustments``), never below 0;
* the *shortfall* is how much the bases exceed the healthy capacity (devices that are healthy or degraded, on
  ready nodes); none: every claim is backed in full and nothing changes;
* the shortfall is shared between the *groups* claiming the flavor (each root cohort, each queue outside any
  cohort) in proportion to their bases, and within a group by its root cohort's policy:

  - ``warn``: the quotas stay as they are (Kueue is told nothing); only the backing is reduced, pro rata, for
    the pages, the wait reasons and the cost report;
  - ``spare_first``: the designated spare team's quota gives up to all of it first, the rest pro rata;
  - ``proportional``: every claim gives its share, pro rata;

  under the last two the reduced quota is what Kueue (and the simulated cluster's engine) is given.

Shares are whole units: a pro-rata split rounds down and hands the units left to the largest remainders (ties: the
claim's key order), so the parts always add up to the whole. A lending limit above the reduced nominal comes down
with it (Kueue refuses a lendingLimit above nominalQuota).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

WARN = "warn"
SPARE_FIRST = "spare_first"
PROPORTIONAL = "proportional"
POLICIES = (WARN, SPARE_FIRST, PROPORTIONAL)


@dataclass(frozen=True)
class Claim:
    """One quota line's nominal claim on a (flavor, resource): ``key`` identifies the line (it orders ties),
    ``group`` is its root cohort (or its own queue outside any cohort), ``team`` the team whose queue it is (None:
    a cohort's own quota)."""

    key: str
    flavor: str
    resource: str
    group: str
    nominal: int
    lending_limit: int | None = None
    team: str | None = None


@dataclass(frozen=True)
class GroupPolicy:
    """A group's policy (a root cohort's, ``WARN`` for a queue outside any cohort) and its spare team."""

    policy: str = WARN
    spare_team: str | None = None


@dataclass(frozen=True)
class Effective:
    """One claim after the shortfall: its base, the quota Kueue is given (``nominal``), how much of the base the
    healthy capacity backs (``backed``) and the lending limit that goes with the quota given."""

    key: str
    base: int
    nominal: int
    backed: int
    lending_limit: int | None

    @property
    def reduced(self) -> int:
        """Units of the base that healthy capacity does not back."""
        return self.base - self.backed


@dataclass(frozen=True)
class GroupShortfall:
    """A group's part of a (flavor, resource)'s shortfall: its bases, how much of them is backed, its policy."""

    group: str
    flavor: str
    resource: str
    base: int
    backed: int
    policy: str
    spare_team: str | None
    #: The claims reduced, by key: (team or None, units not backed).
    reductions: dict[str, tuple[str | None, int]] = field(default_factory=dict)

    @property
    def shortfall(self) -> int:
        """Units of the group's quota not backed."""
        return self.base - self.backed


@dataclass(frozen=True)
class EffectiveQuotas:
    """Every claim's effective quota, and the groups short of capacity."""

    claims: dict[str, Effective]
    shortfalls: list[GroupShortfall]
    #: Per (flavor, resource): (healthy capacity, sum of the bases).
    totals: dict[tuple[str, str], tuple[int, int]]


def split(total: int, weights: Mapping[str, int]) -> dict[str, int]:
    """``total`` shared in proportion to ``weights`` in whole units (largest remainder; ties by key order), each
    part at most its weight. Parts add up to ``min(total, sum of weights)``."""
    whole = sum(weights.values())
    total = min(total, whole)
    if total <= 0 or whole <= 0:
        return dict.fromkeys(weights, 0)
    parts = {k: total * w // whole for k, w in weights.items()}
    left = total - sum(parts.values())
    order = sorted(weights, key=lambda k: (-((total * weights[k]) % whole), k))
    for k in order:
        if left <= 0:
            break
        if parts[k] < weights[k]:
            parts[k] += 1
            left -= 1
    return parts


def effective_quotas(
    *,
    claims: Iterable[Claim],
    capacity: Mapping[tuple[str, str], int],
    policies: Mapping[str, GroupPolicy],
    adjustments: Mapping[str, int] | None = None,
) -> EffectiveQuotas:
    """The effective quota of every claim, given the healthy ``capacity`` per (flavor, resource) (a (flavor,
    resource) absent from it is not reported by any node: its claims are left as they are), each group's policy and
    the adjustments of claims' bases (by key; e.g. reservations)."""
    adjustments = adjustments or {}
    by_fr: dict[tuple[str, str], list[Claim]] = defaultdict(list)
    for claim in claims:
        by_fr[(claim.flavor, claim.resource)].append(claim)
    out: dict[str, Effective] = {}
    shortfalls: list[GroupShortfall] = []
    totals: dict[tuple[str, str], tuple[int, int]] = {}
    for fr in sorted(by_fr):
        items = sorted(by_fr[fr], key=lambda c: c.key)
        base = {c.key: max(c.nominal + adjustments.get(c.key, 0), 0) for c in items}
        total = sum(base.values())
        healthy = capacity.get(fr)
        totals[fr] = (healthy if healthy is not None else total, total)
        cut: dict[str, int] = dict.fromkeys(base, 0)
        given: dict[str, int] = dict(base)
        if healthy is not None and total > healthy:
            groups: dict[str, list[Claim]] = defaultdict(list)
            for c in items:
                groups[c.group].append(c)
            group_cut = split(total - healthy, {g: sum(base[c.key] for c in cs) for g, cs in groups.items()})
            for name in sorted(groups):
                members = groups[name]
                policy = policies.get(name, GroupPolicy())
                share = _group_cut(members, base, group_cut[name], policy)
                cut.update(share)
                if policy.policy != WARN:
                    for key, units in share.items():
                        given[key] = base[key] - units
                group_base = sum(base[c.key] for c in members)
                if group_cut[name]:
                    shortfalls.append(
                        GroupShortfall(
                            group=name,
                            flavor=fr[0],
                            resource=fr[1],
                            base=group_base,
                            backed=group_base - group_cut[name],
                            policy=policy.policy,
                            spare_team=policy.spare_team,
                            reductions={c.key: (c.team, share[c.key]) for c in members if share[c.key]},
                        )
                    )
        for c in items:
            limit = c.lending_limit
            if limit is not None:
                limit = min(limit, given[c.key])
            out[c.key] = Effective(
                key=c.key, base=base[c.key], nominal=given[c.key], backed=base[c.key] - cut[c.key], lending_limit=limit
            )
    return EffectiveQuotas(claims=out, shortfalls=shortfalls, totals=totals)


def _group_cut(members: list[Claim], base: Mapping[str, int], units: int, policy: GroupPolicy) -> dict[str, int]:
    """How many units each member gives of the group's ``units``, by its policy."""
    weights = {c.key: base[c.key] for c in members}
    if policy.policy != SPARE_FIRST or policy.spare_team is None:
        return split(units, weights)
    spare = [c.key for c in members if c.team == policy.spare_team]
    first = split(units, {k: weights[k] for k in spare})
    left = units - sum(first.values())
    rest = split(left, {k: w for k, w in weights.items() if k not in spare})
    return {k: first.get(k, 0) + rest.get(k, 0) for k in weights}
