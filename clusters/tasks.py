"""Celery tasks of the pool: thin, idempotent, named; they call one service."""

from __future__ import annotations

from celery import shared_task

from pools.models import Cluster


@shared_task(name="clusters.simulated_cluster_tick", ignore_result=True)
def simulated_cluster_tick(cluster_id: int) -> None:
    """Advance one simulated cluster by a tick."""
    from clusters.backends.simulated import simulated_cluster_tick_run

    simulated_cluster_tick_run(cluster_id=cluster_id)


@shared_task(name="clusters.simulated_clusters_tick", ignore_result=True)
def simulated_clusters_tick() -> None:
    """Beat entry: tick every simulated cluster."""
    for cluster_id in Cluster.objects.filter(backend=Cluster.Backend.SIMULATED).values_list("pk", flat=True):
        simulated_cluster_tick.delay(cluster_id)


# --- Health (pools/health/) ------------------------------------------------------------------------------------


@shared_task(name="clusters.health_scrape_endpoints", ignore_result=True)
def health_scrape_endpoints() -> None:
    """Beat entry: scrape every configured dcgm-exporter endpoint (settings.HEALTH_DCGM_ENDPOINTS)."""
    from django.conf import settings

    for url in getattr(settings, "HEALTH_DCGM_ENDPOINTS", []) or []:
        health_scrape_endpoint.delay(url)


@shared_task(
    name="clusters.health_scrape_endpoint",
    ignore_result=True,
    bind=True,
    max_retries=3,
    default_retry_delay=10,
)
def health_scrape_endpoint(self, url: str) -> None:
    """Scrape one endpoint and ingest it; network failures are retried with backoff, bad input is logged."""
    import logging

    from django.conf import settings

    from pools.health.ingest import health_ingest_scrape
    from pools.health.scrape import ScrapeRefused, ScrapeUnavailable, fetch
    from pools.health.services import HealthInputError

    log = logging.getLogger(__name__)
    try:
        text = fetch(url, timeout=float(getattr(settings, "HEALTH_SCRAPE_TIMEOUT_SECONDS", 10.0)))
    except ScrapeUnavailable as exc:
        raise self.retry(exc=exc, countdown=min(10 * 2**self.request.retries, 120)) from None
    except ScrapeRefused as exc:
        log.warning("health scrape refused: %s", exc)
        return
    try:
        health_ingest_scrape(text=text, origin=url, node_map=getattr(settings, "HEALTH_NODE_MAP", {}) or {})
    except HealthInputError as exc:
        log.warning("health scrape of %s not ingested: %s", url, exc)


@shared_task(name="clusters.health_reconcile_cluster", ignore_result=True, acks_late=True)
def health_reconcile_cluster(cluster_id: int) -> None:
    """Sweep one cluster's health (node conditions, DRA XID taints, inventory changes, repair tickets), then let its
    backend apply the taints and cordons the repair workflow wants."""
    from clusters.backends import backend_for
    from pools.health.ingest import health_reconcile

    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is not None:
        health_reconcile(cluster=cluster)
        backend_for(cluster).health_apply()  # after the commit: taints and cordons on managed kubernetes nodes


@shared_task(name="clusters.health_sweep", ignore_result=True)
def health_sweep() -> None:
    """Beat entry: reconcile the health of every cluster."""
    for cluster_id in Cluster.objects.values_list("pk", flat=True):
        health_reconcile_cluster.delay(cluster_id)


# --- Kubernetes backend (clusters/kube_sync/) ------------------------------------------------------------------------


def _kube_api(cluster: Cluster):
    """The cluster connection of a kubernetes cluster."""
    from clusters.backends.kubernetes import KubernetesBackend

    return KubernetesBackend(cluster).api


def _kube_cluster(cluster_id: int) -> Cluster | None:
    return Cluster.objects.filter(pk=cluster_id, backend=Cluster.Backend.KUBERNETES).first()


@shared_task(name="clusters.kube_job_submit", bind=True, ignore_result=True, max_retries=8)
def kube_job_submit(self, job_id: int) -> None:
    """Create a job's suspended batch Job; retried with backoff while the cluster is unreachable."""
    from clusters.kube_sync.api import KubeUnavailable
    from clusters.kube_sync.jobs import kube_job_create
    from queues.models import Job

    job = Job.objects.select_related("cluster").filter(pk=job_id).first()
    if job is None or job.cluster.backend != Cluster.Backend.KUBERNETES:
        return
    try:
        kube_job_create(job_id=job_id, api=_kube_api(job.cluster))
    except KubeUnavailable as exc:
        if self.request.is_eager or self.request.retries >= self.max_retries:
            return  # the reconciler submits it again once the cluster answers
        raise self.retry(exc=exc, countdown=min(5 * 2**self.request.retries, 300)) from None


@shared_task(name="clusters.kube_job_cancel", bind=True, ignore_result=True, max_retries=8)
def kube_job_cancel(self, job_id: int) -> None:
    """Delete a cancelled job's batch Job; retried while the cluster is unreachable."""
    from clusters.kube_sync.api import KubeUnavailable
    from clusters.kube_sync.jobs import kube_job_delete
    from queues.models import Job

    job = Job.objects.select_related("cluster").filter(pk=job_id).first()
    if job is None or job.cluster.backend != Cluster.Backend.KUBERNETES:
        return
    try:
        kube_job_delete(job_id=job_id, api=_kube_api(job.cluster))
    except KubeUnavailable as exc:
        if self.request.is_eager or self.request.retries >= self.max_retries:
            return  # the reconciler deletes it again
        raise self.retry(exc=exc, countdown=min(5 * 2**self.request.retries, 300)) from None


@shared_task(name="clusters.kube_sync_cluster", ignore_result=True, acks_late=True)
def kube_sync_cluster(cluster_id: int, full: bool = False) -> None:
    """One sync pass of a kubernetes cluster (watch deltas since the bookmarks; relist where needed)."""
    from clusters.kube_sync.sync import kube_sync_run

    cluster = _kube_cluster(cluster_id)
    if cluster is not None:
        kube_sync_run(cluster=cluster, api=_kube_api(cluster), full=full)


@shared_task(name="clusters.kube_sync_clusters", ignore_result=True)
def kube_sync_clusters() -> None:
    """Beat entry: sync every kubernetes cluster."""
    for cluster_id in Cluster.objects.filter(backend=Cluster.Backend.KUBERNETES).values_list("pk", flat=True):
        kube_sync_cluster.delay(cluster_id)


@shared_task(name="clusters.kube_push_config", ignore_result=True, acks_late=True)
def kube_push_config(cluster_id: int) -> None:
    """Apply the portal's quota configuration to a kubernetes cluster and record drift."""
    from clusters.kube_sync.api import KubeUnavailable
    from clusters.kube_sync.config import kube_config_push

    cluster = _kube_cluster(cluster_id)
    if cluster is None:
        return
    try:
        kube_config_push(cluster=cluster, api=_kube_api(cluster))
    except KubeUnavailable:
        return  # the next beat run pushes; the sync marks the cluster unreachable


@shared_task(name="clusters.kube_push_configs", ignore_result=True)
def kube_push_configs() -> None:
    """Beat entry: push the configuration of every kubernetes cluster."""
    for cluster_id in Cluster.objects.filter(backend=Cluster.Backend.KUBERNETES).values_list("pk", flat=True):
        kube_push_config.delay(cluster_id)


@shared_task(name="clusters.kube_reconcile_cluster", ignore_result=True, acks_late=True)
def kube_reconcile_cluster(cluster_id: int, dry_run: bool = False) -> None:
    """Reconcile one kubernetes cluster: workloads, pods, allocations and metering; store the report."""
    from clusters.kube_sync.reconcile import kube_reconcile

    cluster = _kube_cluster(cluster_id)
    if cluster is not None:
        kube_reconcile(cluster=cluster, api=_kube_api(cluster), dry_run=dry_run)


@shared_task(name="clusters.kube_reconcile_clusters", ignore_result=True)
def kube_reconcile_clusters() -> None:
    """Beat entry: reconcile every kubernetes cluster."""
    for cluster_id in Cluster.objects.filter(backend=Cluster.Backend.KUBERNETES).values_list("pk", flat=True):
        kube_reconcile_cluster.delay(cluster_id)
