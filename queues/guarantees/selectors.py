"""Reads of effective quota: a cluster's guaranteed quotas against its healthy capacity, per its cohorts' policies.

``cluster_guarantees`` is the one computation; ``applied_lines`` turns quota lines into the lines as applied (what
the engine of a simulated cluster is given and what the push sends to Kueue): the one answer to "which quota is in
force". Reservations (issue 37) come in as ``adjustments`` of the lines' bases, so that both compose: the effective
nominal is the configured one plus the adjustments, less the line's part of any shortfall.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from kernel.quantity import format_quantity, is_device_resource, parse_quantity
from pools.health.selectors import RepairBehind, healthy_capacity, repairs_behind
from pools.models import Cluster, ResourceFlavor
from queues.guarantees.compute import Claim, Effective, EffectiveQuotas, GroupPolicy, effective_quotas
from queues.models import Cohort, QuotaLine, QuotaShortfall, Team, TeamQuota


def line_key(line: QuotaLine) -> str:
    """A quota line's key in the computation."""
    return f"line:{line.pk}"


def _roots(cohorts: Iterable[Cohort]) -> dict[int, Cohort]:
    """Each cohort's root (itself at the top; a cycle stops where it closes)."""
    by_id = {c.pk: c for c in cohorts}
    out: dict[int, Cohort] = {}
    for c in by_id.values():
        seen, cur = {c.pk}, c
        while cur.parent_id is not None and cur.parent_id in by_id and cur.parent_id not in seen:
            seen.add(cur.parent_id)
            cur = by_id[cur.parent_id]
        out[c.pk] = cur
    return out


@dataclass
class ClusterGuarantees:
    """A cluster's effective quotas: the computation's result, and what its keys stand for."""

    cluster: Cluster
    result: EffectiveQuotas
    lines: dict[str, QuotaLine]
    #: Group name → its root cohort (None: a queue outside any cohort, in ``group_queues``).
    group_cohorts: dict[str, Cohort | None]
    group_queues: dict[str, TeamQuota]
    flavors: dict[str, ResourceFlavor]
    #: The cluster's team quotas by id.
    quotas: dict[int, TeamQuota] = field(default_factory=dict)
    #: Each line's group (by line key).
    line_groups: dict[str, str] = field(default_factory=dict)
    #: Per (flavor name, resource): units present, and out by health state.
    exists: dict[tuple[str, str], int] = field(default_factory=dict)
    out_by_state: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)

    def effective(self, line: QuotaLine) -> Effective | None:
        """The line's effective quota (None: a line the computation does not cover, e.g. cpu)."""
        return self.result.claims.get(line_key(line))

    def group_of(self, name: str) -> str:
        """A group in words: "cohort org" or "queue vision"."""
        cohort = self.group_cohorts.get(name)
        if cohort is not None:
            return f"cohort {cohort.name}"
        queue = self.group_queues.get(name)
        return f"queue {queue.cluster_queue_name}" if queue is not None else name


def cluster_guarantees(
    cluster: Cluster,
    *,
    quotas: Sequence[TeamQuota] | None = None,
    lines: Sequence[QuotaLine] | None = None,
    cohorts: Iterable[Cohort] | None = None,
    adjustments: Mapping[str, int] | None = None,
) -> ClusterGuarantees:
    """The effective quota of every device quota line of the cluster (its queues' and their cohorts' own) against
    its healthy capacity. ``quotas`` / ``lines`` / ``cohorts``: the policy rows when the caller has them (the engine
    input's; lines with their flavor). Two to five queries."""
    if quotas is None:
        quotas = list(TeamQuota.objects.filter(cluster=cluster).select_related("team", "cohort"))
    if cohorts is None:
        cohorts = list(Cohort.objects.all())
    if lines is None:
        lines = [
            *QuotaLine.objects.filter(team_quota__cluster=cluster).select_related("flavor"),
            *QuotaLine.objects.filter(cohort__isnull=False).select_related("flavor"),
        ]
    roots = _roots(cohorts)
    by_quota = {q.pk: q for q in quotas}
    used_roots = {roots[q.cohort_id].pk for q in quotas if q.cohort_id and q.cohort_id in roots}
    group_cohorts: dict[str, Cohort | None] = {}
    group_queues: dict[str, TeamQuota] = {}
    teams = {q.team_id: q.team.slug for q in quotas}
    claims: list[Claim] = []
    by_key: dict[str, QuotaLine] = {}
    flavors: dict[str, ResourceFlavor] = {}
    for line in lines:
        if not is_device_resource(line.resource_name):
            continue
        team = None
        if line.team_quota_id:
            quota = by_quota.get(line.team_quota_id)
            if quota is None:
                continue  # another cluster's queue
            team = quota.team.slug
            if quota.cohort_id and quota.cohort_id in roots:
                root = roots[quota.cohort_id]
                group = f"cohort:{root.name}"
                group_cohorts[group] = root
            else:
                group = f"queue:{quota.cluster_queue_name}"
                group_queues[group] = quota
        else:
            root = roots.get(line.cohort_id)
            if root is None or root.pk not in used_roots:
                continue  # a cohort no queue of this cluster belongs to
            group = f"cohort:{root.name}"
            group_cohorts[group] = root
        try:
            nominal = parse_quantity(line.nominal, line.resource_name)
            lending = parse_quantity(line.lending_limit, line.resource_name) if line.lending_limit else None
        except ValueError:
            continue
        key = line_key(line)
        by_key[key] = line
        flavors[line.flavor.name] = line.flavor
        claims.append(Claim(key, line.flavor.name, line.resource_name, group, nominal, lending, team))
    policies = {
        group: GroupPolicy(
            policy=cohort.shortfall_policy, spare_team=teams.get(cohort.spare_team_id) if cohort.spare_team_id else None
        )
        for group, cohort in group_cohorts.items()
        if cohort is not None
    }
    backing = healthy_capacity(cluster=cluster)
    names = {f.pk: name for name, f in flavors.items()}
    capacity = {(names[fid], res): b.healthy for (fid, res), b in backing.items() if fid in names}
    result = effective_quotas(claims=claims, capacity=capacity, policies=policies, adjustments=adjustments)
    return ClusterGuarantees(
        cluster=cluster,
        result=result,
        lines=by_key,
        group_cohorts=group_cohorts,
        group_queues=group_queues,
        flavors=flavors,
        quotas=by_quota,
        line_groups={c.key: c.group for c in claims},
        exists={(names[fid], res): b.exists for (fid, res), b in backing.items() if fid in names},
        out_by_state={(names[fid], res): b.out_by_state for (fid, res), b in backing.items() if fid in names},
    )


def applied_lines(lines: Iterable[QuotaLine], guarantees: ClusterGuarantees) -> list[QuotaLine]:
    """The quota lines as applied: a line whose effective quota differs from what it says is replaced by an unsaved
    copy carrying the effective nominal (and lending limit); the others are the lines themselves."""
    out = []
    for line in lines:
        eff = guarantees.effective(line)
        if eff is None:
            out.append(line)
            continue
        configured = parse_quantity(line.nominal, line.resource_name)
        lending = parse_quantity(line.lending_limit, line.resource_name) if line.lending_limit else None
        if eff.nominal == configured and eff.lending_limit == lending:
            out.append(line)
            continue
        applied = copy.copy(line)
        applied.nominal = format_quantity(eff.nominal, line.resource_name)
        applied.lending_limit = (
            format_quantity(eff.lending_limit, line.resource_name) if eff.lending_limit is not None else ""
        )
        out.append(applied)
    return out


def applied_line_values(guarantees: ClusterGuarantees) -> dict[int, tuple[int, int, int]]:
    """Per quota line id: (configured nominal, nominal applied, backed) — what billing records for idle hours."""
    return {
        line.pk: (eff.base, eff.nominal, eff.backed)
        for key, line in guarantees.lines.items()
        if (eff := guarantees.result.claims.get(key)) is not None
    }


# --- a team's guarantee, as its pages say it ----------------------------------------------------------------


@dataclass
class TeamGuarantee:
    """A team's guaranteed quota on one (flavor, resource) of a cluster, what backs it now, and why not all of it."""

    flavor: ResourceFlavor
    resource_name: str
    guaranteed: int
    backed: int
    applied: int
    policy: str
    group: str
    healthy: int
    exists: int
    out_by_state: dict[str, int]
    repairs: list[RepairBehind]
    since: datetime | None = None

    @property
    def short(self) -> int:
        """Units of the guarantee not backed now."""
        return self.guaranteed - self.backed

    @property
    def reduced(self) -> bool:
        """Whether the quota in force (Kueue's, the engine's) is below the guarantee."""
        return self.applied < self.guaranteed

    @property
    def in_repair(self) -> int:
        """Units of the flavor out of the pool for health."""
        return sum(self.out_by_state.values())


def team_guarantees(*, team: Team, cluster: Cluster) -> dict[tuple[int, str], TeamGuarantee]:
    """The team's guarantees in the cluster per (flavor id, resource) that are not fully backed now (empty: every
    guarantee is backed)."""
    quota = TeamQuota.objects.filter(team=team, cluster=cluster).first()
    if quota is None:
        return {}
    g = cluster_guarantees(cluster)
    if not g.result.shortfalls:
        return {}
    repairs = repairs_behind(cluster=cluster)
    open_rows = {
        (s.flavor_id, s.resource_name): s.started_at
        for s in QuotaShortfall.objects.filter(cluster=cluster, ended_at__isnull=True)
    }
    out: dict[tuple[int, str], TeamGuarantee] = {}
    for key, line in g.lines.items():
        if line.team_quota_id != quota.pk:
            continue
        eff = g.result.claims[key]
        if eff.backed >= eff.base:
            continue
        fr = (line.flavor.name, line.resource_name)
        group = next((s for s in g.result.shortfalls if (s.flavor, s.resource) == fr and key in s.reductions), None)
        out[(line.flavor_id, line.resource_name)] = TeamGuarantee(
            flavor=line.flavor,
            resource_name=line.resource_name,
            guaranteed=eff.base,
            backed=eff.backed,
            applied=eff.nominal,
            policy=group.policy if group else "",
            group=g.group_of(group.group) if group else "",
            healthy=g.result.totals[fr][0],
            exists=g.exists.get(fr, 0),
            out_by_state=g.out_by_state.get(fr, {}),
            repairs=repairs.get((line.flavor_id, line.resource_name), []),
            since=open_rows.get((line.flavor_id, line.resource_name)),
        )
    return out


def reduced_quota_index(guarantees: ClusterGuarantees) -> dict[tuple[str, str, str], tuple[int, int]]:
    """(ClusterQueue, flavor name, resource) → (guaranteed, applied) of every queue line whose quota in force is
    below its guarantee: what the wait reasons read to say a wait is due to quota reduced by repairs."""
    out: dict[tuple[str, str, str], tuple[int, int]] = {}
    for key, line in guarantees.lines.items():
        eff = guarantees.result.claims[key]
        quota = guarantees.quotas.get(line.team_quota_id) if line.team_quota_id else None
        if quota is not None and eff.nominal < eff.base:
            out[(quota.cluster_queue_name, line.flavor.name, line.resource_name)] = (eff.base, eff.nominal)
    return out


# --- the admins' page: every cluster's guarantees against its healthy capacity -----------------------------


@dataclass
class GuaranteeRow:
    """One quota line of a (group, flavor, resource): its guarantee, the quota in force, what is backed."""

    owner: str
    guaranteed: int
    applied: int
    backed: int


@dataclass
class GroupRow:
    """One group's guarantees on one (flavor, resource) of a cluster, against the healthy devices."""

    cluster: Cluster
    group: str
    policy: str
    spare_team: str | None
    flavor: ResourceFlavor
    resource_name: str
    healthy: int
    exists: int
    guaranteed: int
    backed: int
    lines: list[GuaranteeRow]
    repairs: list[RepairBehind]

    @property
    def short(self) -> int:
        """Guaranteed units not backed."""
        return self.guaranteed - self.backed


def guarantees_overview(*, clusters: Iterable[Cluster]) -> list[GroupRow]:
    """Per cluster, group and (flavor, resource): the guarantees against the healthy capacity, short ones first."""
    out: list[GroupRow] = []
    for cluster in clusters:
        g = cluster_guarantees(cluster)
        repairs = repairs_behind(cluster=cluster) if g.result.shortfalls else {}
        short = {(s.group, s.flavor, s.resource): s for s in g.result.shortfalls}
        rows: dict[tuple[str, str, str], GroupRow] = {}
        for key, line in sorted(g.lines.items()):
            eff = g.result.claims[key]
            fr = (line.flavor.name, line.resource_name)
            group = g.line_groups[key]
            cohort = g.group_cohorts.get(group)
            row = rows.get((group, *fr))
            if row is None:
                s = short.get((group, *fr))
                row = rows[(group, *fr)] = GroupRow(
                    cluster=cluster,
                    group=g.group_of(group),
                    policy=cohort.shortfall_policy if cohort is not None else "warn",
                    spare_team=s.spare_team if s else None,
                    flavor=line.flavor,
                    resource_name=line.resource_name,
                    healthy=g.result.totals[fr][0],
                    exists=g.exists.get(fr, 0),
                    guaranteed=0,
                    backed=0,
                    lines=[],
                    repairs=repairs.get((line.flavor_id, line.resource_name), []),
                )
            row.guaranteed += eff.base
            row.backed += eff.backed
            quota = g.quotas.get(line.team_quota_id) if line.team_quota_id else None
            owner = f"team {quota.team.slug}" if quota is not None else "the cohort's own quota"
            row.lines.append(GuaranteeRow(owner, eff.base, eff.nominal, eff.backed))
        out.extend(rows.values())
    return sorted(out, key=lambda r: (-r.short, r.cluster.name, r.group, r.flavor.name, r.resource_name))
