"""The reconciler over HTTP: missed transitions, orphaned allocations, usage left open, dead nodes; its report;
and the ``kube_watch`` process end to end."""

from __future__ import annotations

import threading
import time
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.urls import reverse

from billing.models import UsageRecord
from billing.services.metering import metering_sync
from clusters.kube_sync.reconcile import kube_reconcile
from clusters.models import ReconcileReport
from pools.models import Allocation, Cluster
from queues.models import Job
from tests.factories import UserFactory
from tests.kube.cluster import at, gpu_node

NS = "team-vision"


def _running(world, kube, name="train", node="gpu-a1"):
    job = world.submit(name)
    kube.create_workload(job.k8s_name, NS)
    kube.admit(job.k8s_name, NS, cluster_queue="vision", flavor="h100", nodes=[node], gpus_per_pod=8, when=at(1))
    kube.run_pods(job.k8s_name, NS, [node], when=at(2))
    world.sync()
    job = world.job(job)
    assert job.state == "running"
    return job


def _blind(cluster, emulator):
    """The portal's bookmarks jump to now: whatever happened before is never seen by a watch."""
    Cluster.objects.filter(pk=cluster.pk).update(
        sync_bookmarks={k: str(emulator.rv) for k in Cluster.objects.get(pk=cluster.pk).sync_bookmarks}
    )


@pytest.mark.django_db
def test_reconcile_applies_a_missed_completion_at_the_cluster_time(world, kube, cluster, api, emulator):
    job = _running(world, kube)
    kube.complete(job.k8s_name, NS, ["gpu-a1"], started=at(2), when=at(30))
    _blind(cluster, emulator)
    world.sync()
    assert world.job(job).state == "running"  # the watches saw nothing
    report = kube_reconcile(cluster=cluster, api=api, now=at(90))
    job = world.job(job)
    assert (job.state, job.finished_at) == ("succeeded", at(30))
    assert set(Allocation.objects.filter(job=job).values_list("ended_at", flat=True)) == {at(30)}
    assert report.counts.get("missed_transition") == 1
    assert report.repaired >= 1
    assert emulator.rejected == []


@pytest.mark.django_db
def test_reconcile_closes_an_orphaned_allocation_at_the_job_end(world, kube, cluster, api):
    job = _running(world, kube)
    Job.objects.filter(pk=job.pk).update(state=Job.State.FAILED, finished_at=at(20))  # ended, devices not released
    report = kube_reconcile(cluster=cluster, api=api, now=at(90))
    assert set(Allocation.objects.filter(job=job).values_list("ended_at", flat=True)) == {at(20)}
    assert [f["action"] for f in report.findings if f["kind"] == "orphaned_allocation"] == ["repaired"]
    again = kube_reconcile(cluster=cluster, api=api, now=at(91))
    assert "orphaned_allocation" not in again.counts  # repaired once, nothing left


@pytest.mark.django_db
def test_usage_of_a_pod_that_vanished_is_reported_then_closed_at_the_pod_end(world, kube, cluster, api, emulator):
    job = _running(world, kube)
    metering_sync(now=at(10))
    assert UsageRecord.objects.filter(job=job, open=True).exists()
    kube.delete_job(job.k8s_name, NS, when=at(20))  # the pods' deletionTimestamp is the end
    world.sync()
    report = kube_reconcile(cluster=cluster, api=api, now=at(90))
    job = world.job(job)
    assert (job.state, job.finished_at) == ("cancelled", at(20))
    assert report.counts.get("usage_open_after_end") == 1
    metering_sync(now=at(90))
    rows = UsageRecord.objects.filter(job=job)
    assert not rows.filter(open=True).exists()
    assert sum(rows.values_list("duration_us", flat=True)) == 8 * 19 * 60 * 1_000_000  # at(1)..at(20), no more
    assert "usage_open_after_end" not in kube_reconcile(cluster=cluster, api=api, now=at(91)).counts


@pytest.mark.django_db
def test_reconcile_reports_a_dead_node_still_counted(world, emulator, cluster, api, settings):
    settings.KUBE_DEAD_NODE_SECONDS = 60
    emulator.put(gpu_node("gpu-a2", ready=False))
    report = kube_reconcile(cluster=cluster, api=api)
    assert [f["node"] for f in report.findings if f["kind"] == "dead_node_counted"] == ["gpu-a2"]


@pytest.mark.django_db
def test_reconcile_resubmits_a_job_the_cluster_never_got(world, cluster, api, emulator, settings):
    settings.KUBE_API_RETRIES = 0
    emulator.fail("POST", r"/jobs", status=503, times=1)
    job = world.submit()
    assert not world.job(job).k8s_uid
    report = kube_reconcile(cluster=cluster, api=api, now=at(10))
    assert world.job(job).k8s_uid
    assert emulator.get_obj("Job", job.k8s_name, NS) is not None
    assert [f["action"] for f in report.findings if f["kind"] == "never_submitted"] == ["repaired"]


@pytest.mark.django_db
def test_dry_run_repairs_nothing_and_the_report_is_shown_to_admins(world, kube, cluster, api, client):
    job = _running(world, kube)
    Job.objects.filter(pk=job.pk).update(state=Job.State.FAILED, finished_at=at(20))
    out = StringIO()
    call_command("kube_reconcile", "--dry-run", stdout=out)
    assert "[reported] orphaned_allocation" in out.getvalue()
    assert Allocation.objects.filter(job=job, ended_at__isnull=True).count() == 8
    report = ReconcileReport.objects.get()
    assert report.dry_run
    assert report.reported >= 1
    assert report.repaired == 0
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    listing = client.get(reverse("admin:clusters_reconcilereport_changelist"))
    assert listing.status_code == 200
    assert b"orphaned_allocation" in listing.content
    page = client.get(reverse("admin:clusters_reconcilereport_change", args=[report.pk]))
    assert page.status_code == 200
    assert f"job {job.pk} (failed) still holds 8 devices".encode() in page.content


@pytest.mark.django_db
def test_reconcile_of_an_unreachable_cluster_says_so_and_changes_nothing(world, kube, cluster, api, emulator, settings):
    job = _running(world, kube)
    settings.KUBE_API_RETRIES = 0
    emulator.fail("*", ".*", status=503, times=10_000)
    report = kube_reconcile(cluster=cluster, api=api)
    assert report.error
    assert world.job(job).state == "running"
    assert Allocation.objects.filter(job=job, ended_at__isnull=True).count() == 8


# PostgreSQL only: the in-memory SQLite test database gives threads one shared cache whose table locks do not
# wait (no busy timeout), so the process's threads fail each other's queries on a busy machine.
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_kube_watch_applies_a_change_within_seconds_and_resumes_after_a_kill(world, kube, cluster, emulator, client):
    job = world.submit()
    kube.create_workload(job.k8s_name, NS)
    out = StringIO()

    def run_the_process():
        try:
            call_command("kube_watch", "--seconds", "8", "--watch-timeout", "5", stdout=out)
        finally:
            connection.close()  # this thread's own connection

    watcher = threading.Thread(target=run_the_process)
    watcher.start()
    try:
        time.sleep(1)  # the watches are open
        kube.admit(
            job.k8s_name, NS, cluster_queue="vision", flavor="h100", nodes=["gpu-a1"], gpus_per_pod=8, when=at(1)
        )
        kube.run_pods(job.k8s_name, NS, ["gpu-a1"], when=at(2))
        t0 = time.monotonic()
        while world.job(job).state != "running" and time.monotonic() - t0 < 6:
            time.sleep(0.05)
        assert world.job(job).state == "running", "the watch process did not apply the change"
        client.force_login(job.owner)
        assert b'data-state="running"' in client.get(reverse("queues:job_detail", args=[job.pk])).content
    finally:
        watcher.join(20)
    assert "watching gpu-east" in out.getvalue()
    assert "left to the exit" not in out.getvalue()  # every thread stopped and closed its connection
    # the process is gone; the job finishes meanwhile; a fresh one resumes from the bookmarks
    kube.complete(job.k8s_name, NS, ["gpu-a1"], started=at(2), when=at(30))
    call_command("kube_watch", "--seconds", "5", "--watch-timeout", "2", stdout=StringIO())
    job = world.job(job)
    assert (job.state, job.finished_at) == ("succeeded", at(30))
    assert job.events.filter(kind="started").count() == 1
    assert emulator.rejected == []
