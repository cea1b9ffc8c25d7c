"""Celery tasks of the cluster integration: thin, idempotent, named; each calls one backend method or service."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from clusters.backends import backend_for
from clusters.backends.simulated import simulated_cluster_tick_run
from clusters.drift_replies import reply_store
from clusters.errors import ClusterUnavailable
from clusters.kube_sync.drift import drift_action_run
from clusters.push import policy_push_run
from clusters.simulated_dcgm import simulated_dcgm_sample as dcgm_sample
from kernel.tasks import DB_RETRY
from pools.health.ingest import health_ingest_scrape, health_reconcile
from pools.health.scrape import ScrapeRefused, ScrapeUnavailable, fetch
from pools.health.services import HealthInputError
from pools.models import Cluster
from queues.guarantees.services import effective_quota_refresh
from queues.models import Job, PolicyPush
from queues.policy.pushes import backoff_seconds, policy_pushes_due

log = logging.getLogger(__name__)


def _kind(kind: str) -> list[int]:
    """Ids of the clusters of one backend kind (beat entries run at the pace each kind needs)."""
    return list(Cluster.objects.filter(backend=kind).values_list("pk", flat=True))


# --- jobs and policy, handed over by queues after its commits (clusters.port) ------------------------------------
# Submitting and cancelling acknowledge their message only once done and hand it back when the worker dies
# (``reject_on_worker_lost``): a killed worker loses no submission. Their bodies are idempotent: a re-run finds
# the batch Job it created (by name and the portal's job-id label), and deleting a Job that is gone is no error.


@shared_task(
    name="clusters.job_create", bind=True, ignore_result=True, acks_late=True, reject_on_worker_lost=True, **DB_RETRY
)
def cluster_job_create(self, job_id: int) -> None:
    """Hand a new job to its cluster; retried with backoff while the cluster is unreachable."""
    job = Job.objects.select_related("cluster").filter(pk=job_id).first()
    if job is None:
        return
    try:
        backend_for(job.cluster).job_create(job_id=job_id)
    except ClusterUnavailable as exc:
        if self.request.is_eager or self.request.retries >= self.max_retries:
            return  # the reconciler submits it again once the cluster answers
        raise self.retry(exc=exc, countdown=min(5 * 2**self.request.retries, 300)) from None


@shared_task(
    name="clusters.job_delete", bind=True, ignore_result=True, acks_late=True, reject_on_worker_lost=True, **DB_RETRY
)
def cluster_job_delete(self, job_id: int) -> None:
    """Stop a cancelled job in its cluster; retried while the cluster is unreachable."""
    job = Job.objects.select_related("cluster").filter(pk=job_id).first()
    if job is None:
        return
    try:
        backend_for(job.cluster).job_delete(job_id=job_id)
    except ClusterUnavailable as exc:
        if self.request.is_eager or self.request.retries >= self.max_retries:
            return  # the reconciler deletes it again
        raise self.retry(exc=exc, countdown=min(5 * 2**self.request.retries, 300)) from None


@shared_task(name="clusters.policy_push", bind=True, ignore_result=True, acks_late=True, **DB_RETRY)
def policy_push(self, push_id: int) -> None:
    """Push the policy to one cluster; an unreachable cluster is retried with exponential backoff."""
    push = policy_push_run(push_id=push_id)
    if push is not None and push.state == PolicyPush.State.RETRYING and not self.request.is_eager:
        raise self.retry(countdown=backoff_seconds(push.attempts))


@shared_task(name="clusters.policy_push_retry_due", ignore_result=True, **DB_RETRY)
def policy_push_retry_due() -> None:
    """Beat entry: retry failed pushes whose backoff has passed (also heals retries lost with a worker)."""
    for push_id in policy_pushes_due():
        policy_push.delay(push_id)


# --- simulated clusters ------------------------------------------------------------------------------------------


@shared_task(name="clusters.simulated_cluster_tick", ignore_result=True, **DB_RETRY)
def simulated_cluster_tick(cluster_id: int) -> None:
    """Advance one simulated cluster by a tick."""
    simulated_cluster_tick_run(cluster_id=cluster_id)


@shared_task(name="clusters.simulated_clusters_tick", ignore_result=True, **DB_RETRY)
def simulated_clusters_tick() -> None:
    """Beat entry: tick every simulated cluster."""
    for cluster_id in _kind(Cluster.Backend.SIMULATED):
        simulated_cluster_tick.delay(cluster_id)


@shared_task(name="clusters.simulated_dcgm_sample", ignore_result=True, **DB_RETRY)
def simulated_dcgm_sample() -> None:
    """Beat entry: the simulated clusters' DCGM activity of every held card (clusters.simulated_dcgm)."""
    dcgm_sample(now=timezone.now())


# --- health (pools/health/) ----------------------------------------------------------------------------------------


@shared_task(name="clusters.health_scrape_endpoints", ignore_result=True, **DB_RETRY)
def health_scrape_endpoints() -> None:
    """Beat entry: scrape every configured dcgm-exporter endpoint (settings.HEALTH_DCGM_ENDPOINTS)."""
    for url in settings.HEALTH_DCGM_ENDPOINTS or []:
        health_scrape_endpoint.delay(url)


@shared_task(
    name="clusters.health_scrape_endpoint",
    ignore_result=True,
    bind=True,
    default_retry_delay=10,
    **(DB_RETRY | {"max_retries": 3}),
)
def health_scrape_endpoint(self, url: str) -> None:
    """Scrape one endpoint and ingest it; network failures are retried with backoff, bad input is logged."""
    try:
        text = fetch(url, timeout=float(settings.HEALTH_SCRAPE_TIMEOUT_SECONDS))
    except ScrapeUnavailable as exc:
        raise self.retry(exc=exc, countdown=min(10 * 2**self.request.retries, 120)) from None
    except ScrapeRefused as exc:
        log.warning("health scrape refused: %s", exc)
        return
    try:
        health_ingest_scrape(text=text, origin=url, node_map=settings.HEALTH_NODE_MAP or {})
    except HealthInputError as exc:
        log.warning("health scrape of %s not ingested: %s", url, exc)


@shared_task(name="clusters.health_reconcile_cluster", ignore_result=True, acks_late=True, **DB_RETRY)
def health_reconcile_cluster(cluster_id: int) -> None:
    """Sweep one cluster's health (node conditions, DRA XID taints, inventory changes, repair tickets), then let its
    backend apply the taints and cordons the repair workflow wants."""
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is not None:
        health_reconcile(cluster=cluster)
        backend_for(cluster).health_apply()  # after the commit: taints and cordons on managed kubernetes nodes


@shared_task(name="clusters.health_sweep", ignore_result=True, **DB_RETRY)
def health_sweep() -> None:
    """Beat entry: reconcile the health of every cluster."""
    for cluster_id in Cluster.objects.values_list("pk", flat=True):
        health_reconcile_cluster.delay(cluster_id)


# --- guarantees: effective quota and protected work (docs/admin.md) ---------------------------------------------


@shared_task(name="clusters.guarantees_cluster", ignore_result=True, acks_late=True, **DB_RETRY)
def guarantees_cluster(cluster_id: int) -> None:
    """One cluster's guarantees now: its effective quotas against its healthy capacity (recorded, notified and
    pushed when they change), then its backend's handling of protected jobs."""
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None:
        return
    effective_quota_refresh(cluster=cluster)
    try:
        backend_for(cluster).protection_apply()
    except ClusterUnavailable:
        return  # the next sweep tries again; the sync marks the cluster unreachable


@shared_task(name="clusters.guarantees_sweep", ignore_result=True, **DB_RETRY)
def guarantees_sweep() -> None:
    """Beat entry: the guarantees of every cluster."""
    for cluster_id in Cluster.objects.values_list("pk", flat=True):
        guarantees_cluster.delay(cluster_id)


# --- kubernetes clusters (clusters/kube_sync/) ------------------------------------------------------------------


@shared_task(name="clusters.kube_sync_cluster", ignore_result=True, acks_late=True, **DB_RETRY)
def kube_sync_cluster(cluster_id: int, full: bool = False) -> None:
    """One sync pass of a cluster (watch deltas since the bookmarks; relist where needed)."""
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is not None:
        backend_for(cluster).sync(full=full)


@shared_task(name="clusters.kube_sync_clusters", ignore_result=True, **DB_RETRY)
def kube_sync_clusters() -> None:
    """Beat entry: sync every kubernetes cluster."""
    for cluster_id in _kind(Cluster.Backend.KUBERNETES):
        kube_sync_cluster.delay(cluster_id)


@shared_task(name="clusters.kube_push_config", ignore_result=True, acks_late=True, **DB_RETRY)
def kube_push_config(cluster_id: int) -> None:
    """Apply the portal's quota configuration to a cluster and record drift."""
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None:
        return
    try:
        backend_for(cluster).drift_check()
    except ClusterUnavailable:
        return  # the next beat run pushes; the sync marks the cluster unreachable


@shared_task(name="clusters.kube_drift_action", ignore_result=True, **DB_RETRY)
def kube_drift_action(action: str, ids: list[int], reply: str) -> None:
    """An admin's drift button (check clusters, re-apply or adopt objects), run here because the web process may not
    change a cluster; its messages go back to the waiting page (clusters.drift_replies)."""
    reply_store(reply, drift_action_run(action=action, ids=list(ids)))


@shared_task(name="clusters.kube_push_configs", ignore_result=True, **DB_RETRY)
def kube_push_configs() -> None:
    """Beat entry: push the configuration of every kubernetes cluster."""
    for cluster_id in _kind(Cluster.Backend.KUBERNETES):
        kube_push_config.delay(cluster_id)


@shared_task(name="clusters.kube_reconcile_cluster", ignore_result=True, acks_late=True, **DB_RETRY)
def kube_reconcile_cluster(cluster_id: int, dry_run: bool = False) -> None:
    """Reconcile one cluster: workloads, pods, allocations and metering; store the report."""
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is not None:
        backend_for(cluster).reconcile(dry_run=dry_run)


@shared_task(name="clusters.kube_reconcile_clusters", ignore_result=True, **DB_RETRY)
def kube_reconcile_clusters() -> None:
    """Beat entry: reconcile every kubernetes cluster."""
    for cluster_id in _kind(Cluster.Backend.KUBERNETES):
        kube_reconcile_cluster.delay(cluster_id)
