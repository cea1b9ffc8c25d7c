"""The ``kube_watch`` process: one watch loop per kind and one loop that evaluates what the watchers stored."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.db import DatabaseError, close_old_connections, connection

from clusters.kube_sync.api import KubeApi, KubeError, KubeUnavailable
from clusters.kube_sync.conf import kube_setting
from clusters.kube_sync.sync import TOP_SYNC_KINDS, ClusterSync
from pools.models import Cluster

log = logging.getLogger(__name__)

#: Kinds the ``kube_watch`` process watches, one loop each (the workload kinds' objects where the cluster serves them).
WATCHED_KINDS = ("nodes", "resourceslices", "clusterqueues", "jobs", *TOP_SYNC_KINDS, "pods", "workloads", "events")


def kube_watch_loop(
    *,
    cluster: Cluster,
    api: KubeApi,
    kind: str,
    stop: Callable[[], bool],
    timeout_seconds: int | None = None,
) -> None:
    """Watch one kind of a cluster until ``stop()`` (the ``kube_watch`` process runs one loop per kind).

    Every batch is committed with its bookmark, so the loop can be killed at any point and resumes where the
    last commit left it. An unreachable cluster is marked stale and retried with backoff (up to a minute); a
    database error (a deadlock, a lost connection) drops the batch, which the next watch replays.
    """
    seconds = int(timeout_seconds or kube_setting("KUBE_WATCH_TIMEOUT_SECONDS"))
    backoff = 1.0
    while not stop():
        _drop_stale_connections()
        sync = ClusterSync(cluster, api)
        try:
            sync = ClusterSync(Cluster.objects.get(pk=cluster.pk), api)
            if kind == "resourceslices" and not sync.slices_served():
                _sleep_unless(stop, seconds)  # served later after a DRA driver is installed: look again
                continue
            if kind in TOP_SYNC_KINDS and kind not in sync.workload_kinds_served():
                _sleep_unless(stop, seconds)  # served later after the kind's operator is installed: look again
                continue
            if kind in ("jobs", *TOP_SYNC_KINDS, "pods", "workloads") and not sync.bookmark(kind):
                sync.relist_jobs([kind])
            sync.watch_kind(kind, seconds, stop=stop)
            if sync.cluster.last_sync_error:
                sync.mark_reachable(reevaluate=True)
            backoff = 1.0
        except KubeUnavailable as exc:
            sync.mark_unreachable(exc)
            _sleep_unless(stop, backoff)
            backoff = min(backoff * 2, 60.0)
        except (KubeError, DatabaseError) as exc:
            log.warning("cluster %s: watch of %s failed (%s); retrying in %.0fs", cluster.name, kind, exc, backoff)
            _sleep_unless(stop, backoff)
            backoff = min(backoff * 2, 60.0)


def kube_evaluate_loop(*, cluster: Cluster, api: KubeApi, stop: Callable[[], bool], interval: float = 0.2) -> None:
    """Apply what the watchers stored: evaluate dirty jobs every ``interval`` seconds until ``stop()``."""
    while not stop():
        _drop_stale_connections()
        try:
            sync = ClusterSync(Cluster.objects.get(pk=cluster.pk), api)
            evaluated = sync.evaluate_dirty()
        except DatabaseError as exc:
            log.warning("cluster %s: evaluation failed (%s); retrying", cluster.name, exc)
            evaluated = 0
        if not evaluated:
            _sleep_unless(stop, interval)


def _drop_stale_connections() -> None:
    """Close connections that died or outlived CONN_MAX_AGE, as a request boundary does; never one inside a caller's
    transaction (closing it there would break the caller, not refresh anything)."""
    if not connection.in_atomic_block:
        close_old_connections()


def _sleep_unless(stop: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not stop():
        time.sleep(min(0.05, seconds))
