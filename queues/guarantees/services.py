"""Writes of effective quota: shortfalls recorded as they open, change and close; the change pushed and told.

``effective_quota_refresh`` runs for each cluster at every guarantees sweep (``clusters.guarantees_sweep``, every
``GUARANTEES_SWEEP_SECONDS``), so a device's health change is seen within one sweep. Idempotent: a second run with
nothing changed writes nothing. When the quota in force changes (a policy other than warn-only), the cluster is pushed
through the audited push path (``PolicyPush``: Kueue gets the effective quotas; a simulated cluster reschedules under
them); admins, and the leads of teams whose guarantee is reduced, are told through the shortfall listener
(notifications).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from pools.models import Cluster
from queues.guarantees.compute import WARN, GroupShortfall
from queues.guarantees.selectors import ClusterGuarantees, cluster_guarantees
from queues.models import Cohort, QuotaShortfall
from queues.policy.pushes import policy_push_request
from queues.ports import shortfall_listener
from queues.selectors import unit_noun

#: A QuotaShortfall's fields that a refresh compares (a change of any is recorded).
COMPARED = ("policy", "guaranteed", "backed", "healthy", "reductions")


@dataclass
class RefreshReport:
    """What one refresh recorded, and the push it asked for (None: the quota in force did not change)."""

    opened: list[int] = field(default_factory=list)
    changed: list[int] = field(default_factory=list)
    closed: list[int] = field(default_factory=list)
    push_id: int | None = None


def _group_key(row: QuotaShortfall) -> str:
    return f"cohort:{row.cohort.name}" if row.cohort_id else f"queue:{row.team_quota.cluster_queue_name}"


def _reductions(g: ClusterGuarantees, s: GroupShortfall) -> list[dict]:
    return [
        {"team": team, "line": g.lines[key].pk, "units": units, "applied": g.result.claims[key].nominal}
        for key, (team, units) in sorted(s.reductions.items())
    ]


def shortfall_sentence(row: QuotaShortfall, *, flavor_label: str) -> str:
    """One shortfall in words: who is short of what, how much is healthy, and what the policy did."""
    group = f"cohort {row.cohort.name}" if row.cohort_id else f"queue {row.team_quota.cluster_queue_name}"
    what = unit_noun(row.resource_name, row.shortfall)
    head = (
        f"The teams of {group} are guaranteed {unit_noun(row.resource_name, row.guaranteed)} of {flavor_label} "
        f"on {row.cluster.name}, but healthy devices back only {row.backed} now ({what} short)."
    )
    teams = ", ".join(f"{r['team'] or 'the cohort'} −{r['units']}" for r in row.reductions)
    if row.policy == Cohort.ShortfallPolicy.WARN:
        return f"{head} Policy: warn only — the quotas stay; {teams} are not backed."
    if row.policy == Cohort.ShortfallPolicy.SPARE_FIRST:
        return f"{head} Policy: the spare team gives first — guaranteed quotas reduced: {teams}."
    return f"{head} Policy: every team's guaranteed quota scaled in proportion — reduced: {teams}."


@transaction.atomic
def effective_quota_refresh(*, cluster: Cluster, now: datetime | None = None) -> RefreshReport:
    """Record the cluster's shortfalls of healthy capacity as they are now (open, update, close), push the cluster
    when the quota in force changed, tell people. Serialised per cluster (a lock on its row)."""
    now = now or timezone.now()
    Cluster.objects.select_for_update().filter(pk=cluster.pk).first()
    g = cluster_guarantees(cluster)
    current = {(s.group, s.flavor, s.resource): s for s in g.result.shortfalls}
    rows = {
        (_group_key(row), row.flavor.name, row.resource_name): row
        for row in QuotaShortfall.objects.filter(cluster=cluster, ended_at__isnull=True).select_related(
            "cohort", "team_quota", "flavor", "cluster"
        )
    }
    report = RefreshReport()
    applied_changed = False
    listener = shortfall_listener()
    for key, s in sorted(current.items()):
        values = {
            "policy": s.policy,
            "guaranteed": s.base,
            "backed": s.backed,
            "healthy": g.result.totals[(s.flavor, s.resource)][0],
            "reductions": _reductions(g, s),
        }
        row = rows.get(key)
        if row is None:
            cohort = g.group_cohorts.get(s.group)
            row = QuotaShortfall.objects.create(
                cluster=cluster,
                cohort=cohort,
                team_quota=g.group_queues.get(s.group) if cohort is None else None,
                flavor=g.flavors[s.flavor],
                resource_name=s.resource,
                started_at=now,
                changed_at=now,
                **values,
            )
            report.opened.append(row.pk)
            applied_changed |= s.policy != WARN
            change = "opened"
        elif any(getattr(row, name) != value for name, value in values.items()):
            applied_changed |= s.policy != WARN or row.policy != WARN
            for name, value in values.items():
                setattr(row, name, value)
            row.changed_at = now
            row.save(update_fields=[*COMPARED, "changed_at"])
            report.changed.append(row.pk)
            change = "changed"
        else:
            continue
        if listener is not None:
            listener.shortfall_changed(shortfall=row, change=change)
    for key, row in sorted(rows.items()):
        if key in current:
            continue
        row.ended_at = row.changed_at = now
        row.save(update_fields=["ended_at", "changed_at"])
        report.closed.append(row.pk)
        applied_changed |= row.policy != WARN
        if listener is not None:
            listener.shortfall_changed(shortfall=row, change="closed")
    if applied_changed:
        report.push_id = policy_push_request(clusters=[cluster], reason=_push_reason(report, g), now=now)[0].pk
    return report


def _push_reason(report: RefreshReport, g: ClusterGuarantees) -> str:
    """The push's reason: what happened to the quota in force, in a line."""
    if not g.result.shortfalls:
        return "Effective quota: healthy devices back every guarantee again; quotas restored"
    parts = [
        f"{g.group_of(s.group)} {s.backed}/{s.base} {s.resource} on {s.flavor}"
        for s in g.result.shortfalls
        if s.policy != WARN
    ]
    return ("Effective quota: guarantees reduced to the healthy devices: " + "; ".join(parts))[:300]
