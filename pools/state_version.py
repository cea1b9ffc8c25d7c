"""The engine state version of a cluster: a counter bumped by every change of what the admission engine reads.

Why a counter and not a hash of the engine input: the job page and the catalogue ask "did anything change?" on
every poll, and building the engine input to hash it costs as much as the diagnosis it would save (1.4 s at
10,000 pending jobs). A counter costs one indexed read per poll and one ``UPDATE`` per change.

Every save and delete of a model the engine input reads bumps it (Django signals, connected in the apps'
``ready``): jobs (except saves of only bookkeeping fields such as the stored wait reason), team quotas and
their lines, cohorts, teams and their priority classes, priority classes, flavors, topologies, classes and
their flavor links, nodes and devices, and the cluster's fair-sharing switch. Device deletes have no receiver (a
cascade from a deleted node would signal every device one by one): the node's delete counts a cascade, and the
device admin's deletes call :func:`bump_for_deleted_devices`. Bulk writes send no signal:
the few that touch those tables call :func:`bump` themselves (inventory sync, class flavors, team priority
override, Kueue configuration import). The bump is written when the caller's transaction commits (at once
outside one), in its own short statement: a rolled-back change counts nothing, and no transaction holds the
counter's row locked while it runs (every job write of every worker would otherwise queue behind the longest
open transaction). A reader that reads the version *before* reading the state never stores a result under a
version newer than its data: the data is visible before its bump.

Each step is journalled (``EngineStateChange``) in the same transaction: when the step changed job rows only, with
their ids (the job receiver passes them), else as "anything may have changed". The diagnosis keeps its engine input
between refreshes and, from the journal, re-reads only the jobs that changed (``changed_jobs``). The bumps of one
transaction are written as one step per scope at its commit (a sync batch saving 500 jobs makes one step, not 500).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction
from django.db.models import Q
from django.db.models.signals import post_delete, post_save
from django.utils import timezone

from pools.models import (
    Cluster,
    Device,
    EngineStateChange,
    EngineStateVersion,
    Node,
    ResourceClass,
    ResourceClassFlavor,
    ResourceFlavor,
    Topology,
)

#: Cluster fields the engine input reads (a save of only other fields, e.g. ``last_synced_at``, changes nothing).
CLUSTER_ENGINE_FIELDS = frozenset({"fair_sharing", "fair_sharing_strategies", "backend"})


def _scope(cluster_id: int) -> str:
    return f"cluster:{cluster_id}"


#: scope → the job ids a step changed, or None: anything may have changed.
Changes = dict[str, "set[int] | None"]


def bump(*, cluster_ids: Iterable[int | None] | None = None, jobs: Iterable[int] | None = None) -> None:
    """Count one change: of the given clusters' state, or (``cluster_ids`` None) of the shared configuration.

    ``jobs``: the change is exactly these job rows (of the given clusters): the journal names them, so that a
    diagnosis kept between refreshes re-reads only them. The count is written once the current transaction commits
    (see the module's docstring), one step per scope for all the bumps of the transaction.
    """
    if cluster_ids is None:
        scopes = [EngineStateVersion.GLOBAL]
    else:
        scopes = sorted({_scope(pk) for pk in cluster_ids if pk is not None})
    if not scopes:
        return
    job_set = None if jobs is None or cluster_ids is None else set(jobs)
    changes: Changes = {scope: (set(job_set) if job_set is not None else None) for scope in scopes}
    if _in_transaction():
        _pending_bump().merge(changes)
    else:
        _increment(changes)


class _PendingBump:
    """The bumps of one transaction, written as one step per scope when it commits (its on_commit hook)."""

    def __init__(self, transaction_id: object) -> None:
        self.transaction_id = transaction_id
        self.changes: Changes = {}

    def merge(self, changes: Changes) -> None:
        for scope, jobs in changes.items():
            if scope not in self.changes:
                self.changes[scope] = jobs
                continue
            kept = self.changes[scope]
            if kept is None or jobs is None:
                self.changes[scope] = None
            else:
                kept |= jobs

    def __call__(self) -> None:
        if getattr(connection, "_engine_pending_bump", None) is self:
            connection._engine_pending_bump = None
        _increment(self.changes)


def _pending_bump() -> _PendingBump:
    """The current transaction's pending bump, registered as an on_commit hook the first time.

    A hook registered inside a savepoint that was rolled back is dropped by Django with the savepoint: then a new one
    is registered (its bumps were rolled back too). Django keeps the hooks in ``connection.run_on_commit``, and clears
    them at commit; a test case's transaction never commits, so there the transaction is told by the savepoint of
    its outermost block of the code's own (Django's ``savepoint_ids`` follow ``atomic_blocks`` from the second on).
    """
    outermost = next(i for i, b in enumerate(connection.atomic_blocks) if not getattr(b, "_from_testcase", False))
    transaction_id = connection.savepoint_ids[outermost - 1] if outermost else None
    pending = getattr(connection, "_engine_pending_bump", None)
    if (
        pending is None
        or pending.transaction_id != transaction_id
        or not any(hook is pending for _, hook, _ in connection.run_on_commit)
    ):
        pending = _PendingBump(transaction_id)
        connection._engine_pending_bump = pending
        transaction.on_commit(pending)
    return pending


def _in_transaction() -> bool:
    """True inside an atomic block the code opened (a test case's own wrapping blocks stand for autocommit)."""
    return any(not getattr(block, "_from_testcase", False) for block in connection.atomic_blocks)


def _increment(changes: Changes) -> None:
    """One step per scope, each with its journal entry, in one short transaction (scopes in order: one lock order)."""
    now = timezone.now()
    table = connection.ops.quote_name(EngineStateVersion._meta.db_table)
    with transaction.atomic():
        for scope in sorted(changes):
            with connection.cursor() as cursor:
                cursor.execute(f"UPDATE {table} SET version = version + 1 WHERE scope = %s RETURNING version", [scope])
                row = cursor.fetchone()
            if row is None:
                created, made = EngineStateVersion.objects.get_or_create(scope=scope, defaults={"version": 1})
                if not made:  # created meanwhile by another change: count this one too
                    with connection.cursor() as cursor:
                        cursor.execute(
                            f"UPDATE {table} SET version = version + 1 WHERE scope = %s RETURNING version", [scope]
                        )
                        row = cursor.fetchone()
                version = row[0] if row is not None else created.version
            else:
                version = row[0]
            jobs = changes[scope]
            EngineStateChange.objects.create(
                scope=scope, version=version, job_ids=sorted(jobs) if jobs is not None else None, at=now
            )


@dataclass(frozen=True)
class StateVersions:
    """A cluster's two counters: its own and the shared configuration's (the state version is their sum)."""

    global_version: int
    cluster_version: int

    @property
    def total(self) -> int:
        """The cluster's state version."""
        return self.global_version + self.cluster_version


def state_versions(cluster: Cluster | int) -> StateVersions:
    """Both counters of a cluster (one query)."""
    pk = cluster if isinstance(cluster, int) else cluster.pk
    rows = dict(
        EngineStateVersion.objects.filter(Q(scope=EngineStateVersion.GLOBAL) | Q(scope=_scope(pk))).values_list(
            "scope", "version"
        )
    )
    return StateVersions(int(rows.get(EngineStateVersion.GLOBAL, 0)), int(rows.get(_scope(pk), 0)))


def state_version(cluster: Cluster | int) -> int:
    """The cluster's current engine state version (one query)."""
    return state_versions(cluster).total


#: What identifies the journal's steps at a pair of versions (their times): a kept input checks it is still the
#: journal it read (a database restored, or a test's rolled back, can reach the same numbers with other changes).
Anchor = tuple[tuple[str, int, str], ...]


def _anchor(rows: Iterable[tuple[str, int, datetime]], versions: StateVersions, cluster_scope: str) -> Anchor:
    wanted = {EngineStateVersion.GLOBAL: versions.global_version, cluster_scope: versions.cluster_version}
    found = [(scope, version, at.isoformat()) for scope, version, at in rows if wanted.get(scope) == version]
    return tuple(sorted(found))


def journal_anchor(cluster: Cluster | int, versions: StateVersions) -> Anchor:
    """The journal's steps at ``versions`` (one query)."""
    pk = cluster if isinstance(cluster, int) else cluster.pk
    rows = EngineStateChange.objects.filter(
        Q(scope=EngineStateVersion.GLOBAL, version=versions.global_version)
        | Q(scope=_scope(pk), version=versions.cluster_version)
    ).values_list("scope", "version", "at")
    return _anchor(rows, versions, _scope(pk))


def changed_jobs(
    cluster: Cluster | int, *, since: StateVersions, until: StateVersions, anchor: Anchor
) -> tuple[set[int] | None, Anchor]:
    """The jobs whose rows the steps after ``since`` up to ``until`` changed, and the anchor of ``until``.

    None instead of the jobs when anything else may have changed (a step of the shared configuration or one naming
    no jobs), when a step is no longer journalled, or when the steps at ``since`` are not those of ``anchor`` (one
    query).
    """
    pk = cluster if isinstance(cluster, int) else cluster.pk
    scope = _scope(pk)
    if until.global_version < since.global_version or until.cluster_version < since.cluster_version:
        return None, ()
    rows = list(
        EngineStateChange.objects.filter(
            Q(scope=EngineStateVersion.GLOBAL, version__gte=since.global_version, version__lte=until.global_version)
            | Q(scope=scope, version__gte=since.cluster_version, version__lte=until.cluster_version)
        ).values_list("scope", "version", "at", "job_ids")
    )
    steps = [(s, v, at) for s, v, at, _ in rows]
    until_anchor = _anchor(steps, until, scope)
    if _anchor(steps, since, scope) != anchor:
        return None, until_anchor
    later = [(s, ids) for s, v, _, ids in rows if v > (since.global_version if s != scope else since.cluster_version)]
    expected = until.global_version - since.global_version + until.cluster_version - since.cluster_version
    if len(later) != expected:
        return None, until_anchor
    jobs: set[int] = set()
    for step_scope, ids in later:
        if step_scope == EngineStateVersion.GLOBAL or ids is None:
            return None, until_anchor
        jobs.update(ids)
    return jobs, until_anchor


def state_changes_prune(*, before: datetime) -> int:
    """Forget the journal's steps made before ``before`` (a reader that still needs one reads everything again)."""
    deleted, _ = EngineStateChange.objects.filter(at__lt=before).delete()
    return deleted


def bump_for_nodes(node_ids: Iterable[int]) -> None:
    """Count a change of these nodes (or their devices) in their clusters."""
    ids = list(set(node_ids))
    if ids:
        bump(cluster_ids=Node.objects.filter(pk__in=ids).values_list("cluster_id", flat=True).distinct())


def _global(sender, **kwargs) -> None:  # type: ignore[no-untyped-def]
    bump()


def _node(sender, instance: Node, **kwargs) -> None:  # type: ignore[no-untyped-def]
    bump(cluster_ids=[instance.cluster_id])


def _device(sender, instance: Device, **kwargs) -> None:  # type: ignore[no-untyped-def]
    bump_for_nodes([instance.node_id])


def bump_for_deleted_devices(devices: Iterable[Device]) -> None:
    """Count the deletion of these devices (call it where devices are deleted, before the delete).

    Devices have no delete receiver on purpose: one would make Django collect and signal every device of a
    deleted node or cluster one by one; the node's own delete receiver counts a cascade.
    """
    bump_for_nodes(d.node_id for d in devices)


def _cluster(sender, instance: Cluster, created: bool = False, update_fields=None, **kwargs) -> None:  # type: ignore[no-untyped-def]
    if created or update_fields is None or CLUSTER_ENGINE_FIELDS & set(update_fields):
        bump(cluster_ids=[instance.pk])


def connect() -> None:
    """Connect the pools models' receivers (``PoolsConfig.ready``)."""
    for model in (Topology, ResourceFlavor, ResourceClass, ResourceClassFlavor):
        post_save.connect(_global, sender=model, dispatch_uid=f"state_version_{model.__name__}_save")
        post_delete.connect(_global, sender=model, dispatch_uid=f"state_version_{model.__name__}_delete")
    post_save.connect(_node, sender=Node, dispatch_uid="state_version_node_save")
    post_delete.connect(_node, sender=Node, dispatch_uid="state_version_node_delete")
    post_save.connect(_device, sender=Device, dispatch_uid="state_version_device_save")
    post_save.connect(_cluster, sender=Cluster, dispatch_uid="state_version_cluster_save")
