"""The cluster's Kueue policy as it was over a window, read back from the audit log (django-simple-history).

``recorded_policy`` gives the policy at the window's start and every recorded change inside it that altered what
the engine reads (a queue's quota, cohort or preemption; a cohort's quota, parent or usage half-life; a flavor; the
fair-sharing switch; priority values), each at its time with the audit entries behind it. The what-if replay applies
them at those times (``queues.policy.whatif``): the current side is the history as it happened.

How an object's version at a time ``t`` is chosen:

* its last record at or before ``t`` (gone if that record is its deletion);
* an object whose first record comes after ``t`` was created later; it is taken as present from the window's
  start, in its first recorded version — jobs could not name a queue, cohort or flavor before it existed, and a
  pool seeded (or imported) after its jobs ran still has a policy to replay. The exception is a quota line added
  to a queue or cohort that already existed at the window's start: that is a quota change, replayed at its time;
* an object with no record at all (written without history, e.g. in bulk) is taken as it is now, throughout;
* changes recorded after the window's end are in place throughout it (see ``recorded_policy``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

from django.db import models

from pools.models import Cluster, ResourceFlavor, Topology
from queues.engine import model as m
from queues.engine_input import PolicyRows, live_policy_rows, policy_state
from queues.models import Cohort, PriorityClass, QuotaLine, Team, TeamQuota
from queues.policy.audit import AuditEntry, entry_of
from queues.policy.overlay import lay_over

#: Recorded changes this close together are one change (one save writes several rows).
GROUPING = timedelta(seconds=1)

#: The models the engine's policy is read from, by the key used below.
MODELS: dict[str, type[models.Model]] = {
    "cluster": Cluster,
    "quota": TeamQuota,
    "line": QuotaLine,
    "cohort": Cohort,
    "team": Team,
    "flavor": ResourceFlavor,
    "topology": Topology,
    "priority": PriorityClass,
}


@dataclass(frozen=True)
class PolicyStep:
    """A recorded change that altered the engine's policy: when, the policy from then on, the audit entries."""

    at: datetime
    policy: m.ClusterState
    entries: tuple[AuditEntry, ...]


@dataclass(frozen=True)
class RecordedPolicy:
    """The policy at the window's start, the changes replayed inside it, and the objects created during it that
    are taken as present from its start."""

    initial: m.ClusterState
    steps: tuple[PolicyStep, ...]
    present_from_start: tuple[AuditEntry, ...] = ()


class _Versions:
    """Every recorded version of the policy rows, by model and object id."""

    def __init__(self, *, cluster: Cluster) -> None:
        self.records: dict[str, dict[int, list]] = {}
        self.live: dict[str, dict[int, SimpleNamespace]] = {}
        for key, model in MODELS.items():
            by_id: dict[int, list] = defaultdict(list)
            # Every record, also those after the window: the state before a later change is the one it undoes.
            rows = model.history.order_by("history_date", "history_id")  # type: ignore[attr-defined]
            if key == "cluster":
                rows = rows.filter(id=cluster.pk)
            elif key == "quota":
                rows = rows.filter(cluster_id=cluster.pk)
            for record in rows.select_related("history_user"):
                by_id[record.id].append(record)
            self.records[key] = dict(by_id)
            # Rows that exist but were never recorded stand as they are now, throughout.
            live = model.objects.filter(cluster_id=cluster.pk) if key == "quota" else model.objects.all()
            if key == "cluster":
                live = model.objects.filter(pk=cluster.pk)
            self.live[key] = {row.pk: _row(model, row) for row in live if row.pk not in by_id}

    def at(self, key: str, t: datetime, *, start: datetime) -> dict[int, SimpleNamespace]:
        """The rows of ``key`` at ``t`` (see the module's rules), by id."""
        out = dict(self.live[key])
        for oid, records in self.records[key].items():
            chosen = None
            for record in records:
                if record.history_date > t:
                    break
                chosen = record
            if chosen is None:
                first = records[0]
                if self.timed_creation(key, first, start):
                    continue
                chosen = first
            elif chosen.history_type == "-":
                continue
            out[oid] = _row(MODELS[key], chosen)
        return out

    def timed_creation(self, key: str, first: Any, start: datetime) -> bool:
        """A quota line added, during the window, to a queue or cohort that existed at its start."""
        if key != "line" or first.history_type != "+" or first.history_date <= start:
            return False
        owner_key, owner_id = ("quota", first.team_quota_id) if first.team_quota_id else ("cohort", first.cohort_id)
        owner = self.records[owner_key].get(owner_id)
        if owner is None:
            return owner_id in self.live[owner_key]
        return owner[0].history_date <= start

    def changes_in(self, start: datetime, end: datetime) -> list[tuple[datetime, str, Any]]:
        """Records inside (start, end] that may change the policy at their time, in order."""
        out = []
        for key, by_id in self.records.items():
            for records in by_id.values():
                for i, record in enumerate(records):
                    if not start < record.history_date <= end:
                        continue
                    if record.history_type == "+" and not (i == 0 and self.timed_creation(key, record, start)):
                        continue
                    out.append((record.history_date, key, record))
        out.sort(key=lambda item: (item[0], item[2].history_id))
        return out

    def created_in(self, start: datetime, end: datetime) -> list[tuple[str, Any]]:
        """Objects first recorded (created) inside the window and taken as present from its start."""
        out = []
        for key, by_id in self.records.items():
            for records in by_id.values():
                first = records[0]
                if first.history_type == "+" and start < first.history_date <= end:
                    if not self.timed_creation(key, first, start):
                        out.append((key, first))
        out.sort(key=lambda item: (item[1].history_date, item[1].history_id))
        return out


def _row(model: type[models.Model], source: Any) -> SimpleNamespace:
    """A plain row of ``model``'s concrete fields read from a live row or a historical record."""
    values = {f.attname: getattr(source, f.attname, None) for f in model._meta.concrete_fields}
    values["pk"] = values.get("id")
    return SimpleNamespace(**values)


def _rows_at(versions: _Versions, cluster: Cluster, t: datetime, start: datetime) -> PolicyRows:
    """The policy rows at ``t``, related rows attached as the ORM's select_related would."""
    at = {key: versions.at(key, t, start=start) for key in MODELS}
    teams, cohorts, flavors, topologies = at["team"], at["cohort"], at["flavor"], at["topology"]
    for flavor in flavors.values():
        flavor.topology = topologies.get(flavor.topology_id) if flavor.topology_id else None
        if flavor.topology_id and flavor.topology is None:
            flavor.topology_id = None
    for cohort in cohorts.values():
        cohort.parent = cohorts.get(cohort.parent_id) if cohort.parent_id else None
        if cohort.parent_id and cohort.parent is None:
            cohort.parent_id = None
    quotas = []
    for quota in at["quota"].values():
        quota.team = teams.get(quota.team_id)
        if quota.team is None:
            continue
        quota.cohort = cohorts.get(quota.cohort_id) if quota.cohort_id else None
        if quota.cohort_id and quota.cohort is None:
            quota.cohort_id = None
        quotas.append(quota)
    quota_ids = {q.pk for q in quotas}
    lines = []
    for line in at["line"].values():
        line.flavor = flavors.get(line.flavor_id)
        owned = line.team_quota_id in quota_ids if line.team_quota_id else line.cohort_id in cohorts
        if line.flavor is not None and owned:
            lines.append(line)
    clusters = at["cluster"]
    return PolicyRows(
        cluster=clusters.get(cluster.pk, cluster),  # type: ignore[arg-type]
        quotas=sorted(quotas, key=lambda q: q.cluster_queue_name),
        lines=sorted(lines, key=lambda ln: (ln.flavor_order, ln.flavor.name, ln.resource_name)),
        cohorts=sorted(cohorts.values(), key=lambda c: c.name),
        teams=sorted(teams.values(), key=lambda t: t.name),
        flavors=sorted(flavors.values(), key=lambda f: f.name),
        topologies=sorted(topologies.values(), key=lambda t: t.name),
        priority_classes=sorted(at["priority"].values(), key=lambda p: -p.value),
    )


def policy_at(versions: _Versions, cluster: Cluster, t: datetime, start: datetime) -> m.ClusterState:
    """The engine's policy (no nodes) at ``t``."""
    return policy_state(_rows_at(versions, cluster, t, start), usage_policy=True)[0]


def _entries(records: Iterable[tuple[str, Any]]) -> tuple[AuditEntry, ...]:
    return tuple(entry_of(record, MODELS[key]._meta.label) for key, record in records)


def recorded_policy(
    *, cluster: Cluster, start: datetime, end: datetime, now: m.ClusterState | None = None
) -> RecordedPolicy:
    """The cluster's policy at ``start`` and every recorded change in (start, end] that altered it.

    A window that ends in the past (a preview's ends when it was asked for) may be followed by recorded changes:
    those are taken as in place throughout the window — the difference between the policy at the window's end and
    ``now`` (the policy as it is now; by default the database's) is laid over each version (``overlay.lay_over``).
    """
    versions = _Versions(cluster=cluster)
    at_end = policy_at(versions, cluster, end, start)
    if now is None:
        now = policy_state(live_policy_rows(cluster), usage_policy=True)[0]

    def policy(t: datetime) -> m.ClusterState:
        version = policy_at(versions, cluster, t, start)
        return version if now == at_end else lay_over(version, at_end, now)

    initial = policy(start)
    steps: list[PolicyStep] = []
    previous = initial
    # Records a second apart or less are one change (an admin's save writes the queue and its lines one by one).
    groups: list[list[tuple[datetime, str, Any]]] = []
    for item in versions.changes_in(start, end):
        if groups and item[0] - groups[-1][-1][0] <= GROUPING:
            groups[-1].append(item)
        else:
            groups.append([item])
    for group in groups:
        when = group[-1][0]
        version = policy(when)
        if version == previous:
            continue
        steps.append(PolicyStep(at=when, policy=version, entries=_entries((key, rec) for _, key, rec in group)))
        previous = version
    return RecordedPolicy(
        initial=initial, steps=tuple(steps), present_from_start=_entries(versions.created_in(start, end))
    )


__all__ = ["MODELS", "PolicyStep", "RecordedPolicy", "policy_at", "recorded_policy"]
