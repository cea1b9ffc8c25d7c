"""Celery tasks of the pool: thin, idempotent, named; they call one service."""

from __future__ import annotations

from celery import shared_task

from pools.models import Cluster


@shared_task(name="pools.simulated_cluster_tick", ignore_result=True)
def simulated_cluster_tick(cluster_id: int) -> None:
    """Advance one simulated cluster by a tick."""
    from pools.backends.simulated import simulated_cluster_tick_run

    simulated_cluster_tick_run(cluster_id=cluster_id)


@shared_task(name="pools.simulated_clusters_tick", ignore_result=True)
def simulated_clusters_tick() -> None:
    """Beat entry: tick every simulated cluster."""
    for cluster_id in Cluster.objects.filter(backend=Cluster.Backend.SIMULATED).values_list("pk", flat=True):
        simulated_cluster_tick.delay(cluster_id)
