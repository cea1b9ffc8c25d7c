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
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connection, transaction
from django.db.models import F, Q, Sum
from django.db.models.signals import post_delete, post_save

from pools.models import (
    Cluster,
    Device,
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


def bump(*, cluster_ids: Iterable[int | None] | None = None) -> None:
    """Count one change: of the given clusters' state, or (``cluster_ids`` None) of the shared configuration.

    The count is written once the current transaction commits (see the module's docstring).
    """
    if cluster_ids is None:
        scopes = [EngineStateVersion.GLOBAL]
    else:
        scopes = sorted({_scope(pk) for pk in cluster_ids if pk is not None})
    if not scopes:
        return
    if _in_transaction():
        transaction.on_commit(lambda: _increment(scopes))
    else:
        _increment(scopes)


def _in_transaction() -> bool:
    """True inside an atomic block the code opened (a test case's own wrapping blocks stand for autocommit)."""
    return any(not getattr(block, "_from_testcase", False) for block in connection.atomic_blocks)


def _increment(scopes: list[str]) -> None:
    for scope in scopes:
        if EngineStateVersion.objects.filter(scope=scope).update(version=F("version") + 1):
            continue
        _, created = EngineStateVersion.objects.get_or_create(scope=scope, defaults={"version": 1})
        if not created:  # created meanwhile by another change: count this one too
            EngineStateVersion.objects.filter(scope=scope).update(version=F("version") + 1)


def state_version(cluster: Cluster | int) -> int:
    """The cluster's current engine state version (one query)."""
    pk = cluster if isinstance(cluster, int) else cluster.pk
    total = EngineStateVersion.objects.filter(Q(scope=EngineStateVersion.GLOBAL) | Q(scope=_scope(pk))).aggregate(
        v=Sum("version")
    )["v"]
    return int(total or 0)


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
