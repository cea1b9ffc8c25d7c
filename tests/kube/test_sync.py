"""Reading the cluster back: the job state machine at the cluster's times, list/watch, bookmarks, faults."""

from __future__ import annotations

import time

import pytest

from clusters.models import KubeJobState
from pools.models import Allocation, Cluster, Device, HealthPolicy, Node
from queues.models import Job, JobEvent
from tests.kube.cluster import at, condition, gpu_node, ts, workload_name

pytestmark = pytest.mark.django_db
NS = "team-vision"
QUOTA = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, 8 more needed"


def _events(job: Job) -> list[str]:
    return list(JobEvent.objects.filter(job=job).order_by("at", "id").values_list("kind", flat=True))


def _cq_reserved(emulator, total: int) -> None:
    cq = emulator.get_obj("ClusterQueue", "vision")
    cq["status"] = {
        "flavorsReservation": [
            {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "total": str(total), "borrowed": "0"}]}
        ]
    }
    emulator.put(cq)


def test_inventory_is_synced_from_nodes(world, cluster):
    assert set(Node.objects.filter(cluster=cluster).values_list("name", flat=True)) == {"gpu-a1", "gpu-a2"}
    assert Device.objects.filter(node__cluster=cluster, resource_name="nvidia.com/gpu").count() == 16
    assert set(cluster.__class__.objects.get(pk=cluster.pk).sync_bookmarks) >= {
        "nodes",
        "jobs",
        "pods",
        "workloads",
        "events",
    }


def test_lifecycle_at_the_cluster_times(world, kube, emulator):
    job = world.submit(pods=2, gpus=4)
    _cq_reserved(emulator, 16)
    kube.create_workload(job.k8s_name, NS)
    kube.pending(job.k8s_name, NS, QUOTA, when=at(1))
    world.sync()
    job = world.job(job)
    assert (job.state, job.wait_reason) == ("pending", "quota_exhausted")
    assert "16 GPUs on H100" in job.wait_message
    assert job.kueue_message == QUOTA
    assert job.workload_name == workload_name(job.k8s_name, job.k8s_uid)
    kube.admit(
        job.k8s_name, NS, cluster_queue="vision", flavor="h100", nodes=["gpu-a1", "gpu-a2"], gpus_per_pod=4, when=at(5)
    )
    world.sync()
    job = world.job(job)
    assert job.state == "admitted"
    assert job.admitted_at == at(5)
    assert Allocation.objects.filter(job=job, ended_at__isnull=True).count() == 8
    assert set(Allocation.objects.filter(job=job).values_list("device__node__name", flat=True)) == {"gpu-a1", "gpu-a2"}
    kube.run_pods(job.k8s_name, NS, ["gpu-a1", "gpu-a2"], when=at(6))
    world.sync()
    assert world.job(job).started_at == at(6)
    kube.complete(job.k8s_name, NS, ["gpu-a1", "gpu-a2"], started=at(6), when=at(60))
    world.sync()
    job = world.job(job)
    assert (job.state, job.finished_at) == ("succeeded", at(60))
    assert set(Allocation.objects.filter(job=job).values_list("started_at", "ended_at")) == {(at(5), at(60))}
    kinds = _events(job)
    assert [k for i, k in enumerate(kinds) if k != "wait_reason" or kinds[i - 1] != "wait_reason"] == [
        "submitted",
        "wait_reason",
        "admitted",
        "started",
        "succeeded",
    ]


def test_missed_transitions_are_rebuilt_from_cluster_times(world, kube):
    job = world.submit()
    kube.create_workload(job.k8s_name, NS)
    kube.admit(job.k8s_name, NS, cluster_queue="vision", flavor="h100", nodes=["gpu-a1"], gpus_per_pod=8, when=at(3))
    kube.run_pods(job.k8s_name, NS, ["gpu-a1"], when=at(4))
    kube.complete(job.k8s_name, NS, ["gpu-a1"], started=at(4), when=at(30))
    world.sync()  # the portal saw none of it happen
    job = world.job(job)
    assert (job.state, job.admitted_at, job.started_at, job.finished_at) == ("succeeded", at(3), at(4), at(30))
    assert set(Allocation.objects.filter(job=job).values_list("started_at", "ended_at")) == {(at(3), at(30))}


def test_gang_waits_until_every_pod_has_a_node(world, kube, emulator):
    # About the gang, not repair: without repair tickets the taint's removal gives gpu-a2's GPUs back at once
    # (with them, the portal keeps the GPUs in repair until a validation job passes: test_node_health.py).
    HealthPolicy.objects.update_or_create(name="default", defaults={"active": True, "auto_open_ticket": False})
    emulator.put(
        gpu_node("gpu-a2", taints=[{"key": "nvidia.com/gpu-xid-error", "value": "79", "effect": "NoSchedule"}])
    )
    world.sync()
    job = world.submit(pods=2, gpus=8)
    kube.create_workload(job.k8s_name, NS)
    kube.admit(job.k8s_name, NS, cluster_queue="vision", flavor="h100", nodes=["gpu-a1"], gpus_per_pod=8, when=at(2))
    kube.pod(
        job.k8s_name,
        NS,
        1,
        phase="Pending",
        when=at(2),
        unschedulable="0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint "
        "{nvidia.com/gpu-xid-error: 79}. preemption: 0/2 nodes are available.",
    )
    world.sync()
    job = world.job(job)
    assert (job.state, job.wait_reason) == ("pending", "health_blocked")
    assert Allocation.objects.filter(job=job).count() == 0
    emulator.put(gpu_node("gpu-a2"))  # repaired
    kube.pod(job.k8s_name, NS, 1, node="gpu-a2", phase="Pending", when=at(7))
    world.sync()
    job = world.job(job)
    assert job.state == "admitted"
    assert job.admitted_at == at(2)
    assert Allocation.objects.filter(job=job).count() == 16


def _running(world, kube, name: str = "train", *, node: str = "gpu-a1", minute: float = 0) -> Job:
    job = world.submit(name, minute=minute)
    kube.create_workload(job.k8s_name, NS)
    kube.admit(
        job.k8s_name, NS, cluster_queue="vision", flavor="h100", nodes=[node], gpus_per_pod=8, when=at(minute + 1)
    )
    kube.run_pods(job.k8s_name, NS, [node], when=at(minute + 2))
    world.sync()
    job = world.job(job)
    assert job.state == "running"
    return job


def test_preemption_names_the_preemptor_and_releases_at_pod_end(world, kube):
    victim = _running(world, kube, "victim")
    preemptor = world.submit("boss", minute=5)
    kube.create_workload(preemptor.k8s_name, NS)
    message = (
        f"Preempted to accommodate a workload (UID: wl-uid, JobUID: {preemptor.k8s_uid}) due to prioritization in the "
        "ClusterQueue; preemptor path: /vision; preemptee path: /vision"
    )
    kube.evict(victim.k8s_name, NS, reason="Preempted", preempted_reason="InClusterQueue", message=message, when=at(10))
    world.sync()
    victim = world.job(victim)
    assert victim.state == "pending"
    assert victim.preemption_count == 1
    assert set(Allocation.objects.filter(job=victim).values_list("ended_at", flat=True)) == {at(10)}
    kinds = _events(victim)
    assert kinds.index("started") < kinds.index("preempted") < kinds.index("requeued")
    preempted = victim.events.get(kind="preempted")
    assert "boss" in preempted.message
    assert preempted.details["reason"] == "InClusterQueue"
    assert preemptor.events.filter(kind="preempting").exists()


def test_hold_and_drain_eviction_is_shown_then_waits_for_the_restart(world, kube):
    job = _running(world, kube)
    wl = kube.workload(job.k8s_name, NS)
    stopped = condition("Evicted", "True", "ClusterQueueStopped", "The ClusterQueue is stopped", at(10))
    kube.set_status(job.k8s_name, NS, conditions=[*wl["status"]["conditions"], stopped])
    world.sync()  # Kueue evicted the workload; its pods are still ending
    job = world.job(job)
    assert (job.state, job.eviction_reason) == ("preempting", "ClusterQueueStopped")
    evicted = job.events.get(kind="evicted")
    assert evicted.at == at(10)
    assert evicted.details == {"reason": "ClusterQueueStopped", "kueueMessage": "The ClusterQueue is stopped"}
    assert "an admin stopped the team's quota (ClusterQueue vision" in evicted.message
    kube.evict(job.k8s_name, NS, reason="ClusterQueueStopped", message="The ClusterQueue is stopped", when=at(11))
    world.sync()
    job = world.job(job)
    assert job.state == "pending"
    assert job.preemption_count == 0
    requeued = job.events.get(kind="requeued")
    assert requeued.details["reason"] == "queue_stopped"
    assert requeued.message.startswith("The ClusterQueue was stopped by an admin; the job waits until it restarts.")
    assert set(Allocation.objects.filter(job=job).values_list("ended_at", flat=True)) == {at(11)}
    assert job.wait_reason == "misconfigured"
    # The workload controller then marks it inadmissible while the ClusterQueue stays stopped.
    kube.pending(job.k8s_name, NS, "ClusterQueue vision is inactive", reason="Inadmissible", when=at(12))
    world.sync()
    job = world.job(job)
    assert job.wait_reason == "misconfigured"
    assert job.kueue_message == "ClusterQueue vision is inactive"
    # Restarted (stopPolicy None): Requeued=True ClusterQueueRestarted, then admitted again.
    kube.admit(job.k8s_name, NS, cluster_queue="vision", flavor="h100", nodes=["gpu-a1"], gpus_per_pod=8, when=at(20))
    kube.run_pods(job.k8s_name, NS, ["gpu-a1"], when=at(21))
    world.sync()
    assert world.job(job).state == "running"


def test_pods_ready_timeout_requeues_and_waits_for_the_backoff(world, kube):
    job = _running(world, kube)
    kube.evict(
        job.k8s_name, NS, reason="PodsReadyTimeout", message=f"Exceeded the PodsReady timeout {NS}/wl", when=at(40)
    )
    kube.set_status(job.k8s_name, NS, requeueState={"count": 1, "requeueAt": ts(at(41))})
    world.sync()
    job = world.job(job)
    assert job.state == "pending"
    assert job.events.get(kind="requeued").details["reason"] == "pods_ready_timeout"
    assert job.wait_details.get("requeueAt") == ts(at(41))


def test_deleted_in_the_cluster_is_cancelled_at_pod_end(world, kube):
    job = _running(world, kube)
    kube.delete_job(job.k8s_name, NS, when=at(20))
    world.sync()
    job = world.job(job)
    assert (job.state, job.finished_at) == ("cancelled", at(20))
    assert set(Allocation.objects.filter(job=job).values_list("ended_at", flat=True)) == {at(20)}


def test_deleted_while_the_portal_was_away_is_found_by_a_relist(world, kube, cluster, emulator):
    job = _running(world, kube)
    kube.delete_job(job.k8s_name, NS, when=at(20))
    emulator.compact()  # the events are gone: only a relist can tell
    world.sync()
    job = world.job(job)
    assert job.state == "cancelled"
    assert Allocation.objects.filter(job=job, ended_at__isnull=True).count() == 0


def test_deadline_exceeded_is_timed_out(world, kube, emulator):
    job = _running(world, kube)
    obj = kube.job(job.k8s_name, NS)
    obj["status"] = {
        "failed": 1,
        "conditions": [
            {"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded", "lastTransitionTime": ts(at(62))},
            {
                "type": "Failed",
                "status": "True",
                "reason": "DeadlineExceeded",
                "message": "Job was active longer than specified deadline",
                "lastTransitionTime": ts(at(62)),
            },
        ],
    }
    emulator.put(obj)
    world.sync()
    job = world.job(job)
    assert (job.state, job.finished_at) == ("timed-out", at(62))


def test_node_loss_requeues_the_job(world, kube, emulator):
    job = _running(world, kube)
    emulator.remove("Node", "gpu-a1")
    world.sync()
    job = world.job(job)
    assert job.state == "pending"
    assert job.events.filter(kind="requeued").last().details["reason"] == "node_lost"
    assert Allocation.objects.filter(job=job, ended_at__isnull=True).count() == 0
    assert Node.objects.get(name="gpu-a1").gone_at is not None


def test_unrecognised_kueue_text_is_stored_visibly(world, kube):
    job = world.submit()
    kube.create_workload(job.k8s_name, NS)
    kube.pending(job.k8s_name, NS, "Kueue v9 says: the moon is in the wrong phase", reason="WaitingForQuota")
    world.sync()
    job = world.job(job)
    assert job.wait_reason == ""
    assert job.wait_message == "Kueue v9 says: the moon is in the wrong phase"
    assert job.wait_details["unrecognised"] is True
    assert job.events.filter(kind="note", details__unrecognised=True).exists()
    kube.pending(job.k8s_name, NS, QUOTA)
    world.sync()
    assert world.job(job).wait_reason in ("quota_exhausted", "higher_priority_ahead")
    kube.pending(job.k8s_name, NS, "another mystery")
    world.sync()
    job = world.job(job)
    assert (job.wait_reason, job.wait_message) == ("", "another mystery")


def test_cluster_events_reach_the_timeline_once(world, kube, emulator):
    job = world.submit()
    kube.create_workload(job.k8s_name, NS)
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "e1", "namespace": NS, "uid": "ev-1"},
        "involvedObject": {"kind": "Workload", "name": workload_name(job.k8s_name, job.k8s_uid), "namespace": NS},
        "reason": "QuotaReserved",
        "message": "Quota reserved in ClusterQueue vision, wait time since queued was 3s",
        "type": "Normal",
        "count": 1,
        "lastTimestamp": ts(at(3)),
    }
    noise = {
        **event,
        "metadata": {"name": "e2", "namespace": NS, "uid": "ev-2"},
        "reason": "Pending",
        "type": "Warning",
    }
    emulator.put(event)
    emulator.put(noise)
    world.sync()  # sets workload_name, records the event
    world.sync()
    notes = JobEvent.objects.filter(job=job, kind="note", details__source="kubernetes")
    assert notes.count() == 1
    assert notes.get().at == at(3)
    emulator.put({**event, "count": 2, "lastTimestamp": ts(at(4))})
    world.sync()
    assert notes.count() == 2
    world.sync(full=True)  # a relist replays every event: no duplicates
    assert notes.count() == 2


def test_a_cluster_event_of_the_submission_second_is_not_before_the_submission(world, emulator):
    """core/v1 Event times are whole seconds, truncated: on the testbed the Job controller's "Suspended" Event of
    the submission's second came out before the submission on the timeline. It is shown at the submission."""
    job = world.submit(minute=0.7 / 60)  # submitted at T0 + 0.7 s
    emulator.put(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "s1", "namespace": NS, "uid": "ev-s1"},
            "involvedObject": {"kind": "Job", "name": job.k8s_name, "namespace": NS},
            "reason": "Suspended",
            "message": "Job suspended",
            "type": "Normal",
            "count": 1,
            "firstTimestamp": ts(at(0)),
            "lastTimestamp": ts(at(0)),
        }
    )
    world.sync()
    note = JobEvent.objects.get(job=job, kind="note", details__reason="Suspended")
    assert note.at == world.job(job).submitted_at
    assert _events(job)[:2] == ["submitted", "note"]


def test_a_catch_up_pass_ends_quietly_when_the_server_sends_no_early_bookmark(world, kube, emulator, settings, caplog):
    """The API server's first BOOKMARK comes 2 s before the watch's timeout (or after a minute), not when the
    backlog is sent: a sync pass ends each watch on the idle timeout, reads everything, and logs no break."""
    emulator.bookmark_interval = None  # the API server's schedule
    settings.KUBE_SYNC_WATCH_SECONDS = 10
    settings.KUBE_SYNC_IDLE_SECONDS = 0.3
    job = world.submit()
    kube.create_workload(job.k8s_name, NS)
    kube.pending(job.k8s_name, NS, QUOTA, when=at(1))
    caplog.set_level("INFO", logger="clusters.backends.k8s.client")
    started = time.monotonic()
    world.sync()
    assert time.monotonic() - started < 8  # no watch waited for its bookmark (8 s after it opened)
    assert world.job(job).kueue_message == QUOTA
    assert not [r for r in caplog.records if "broke" in r.getMessage()]


def test_missing_priority_class_event_makes_the_job_misconfigured(world, emulator):
    job = world.submit()
    emulator.put(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "w1", "namespace": NS, "uid": "ev-w1"},
            "involvedObject": {"kind": "Job", "name": job.k8s_name, "namespace": NS},
            "reason": "WorkloadPriorityClassNotFound",
            "message": 'WorkloadPriorityClass "normal" not found',
            "type": "Warning",
            "count": 1,
            "lastTimestamp": ts(at(1)),
        }
    )
    world.sync()
    assert world.job(job).wait_reason == "misconfigured"


@pytest.mark.emulator(bookmark_interval=0.2)  # the realistic pause between bookmarks (the others: none)
def test_bookmarks_let_a_restarted_portal_resume(world, kube, cluster, emulator):
    marks = Cluster.objects.get(pk=cluster.pk).sync_bookmarks
    job = world.submit()
    kube.create_workload(job.k8s_name, NS)
    kube.pending(job.k8s_name, NS, QUOTA)
    emulator.requests.clear()
    world.sync()  # a fresh ClusterSync: nothing in memory, only the bookmarks
    watches = [r for r in emulator.requests if r["query"].get("watch") == "true"]
    assert {r["query"]["resourceVersion"] for r in watches if "workloads" in r["path"]} == {marks["workloads"]}
    assert not [
        r for r in emulator.requests if r["method"] == "GET" and "workloads" in r["path"] and "watch" not in r["query"]
    ]
    assert world.job(job).wait_reason


def test_gone_bookmark_relists(world, kube, cluster, emulator):
    job = world.submit()
    kube.create_workload(job.k8s_name, NS)
    kube.pending(job.k8s_name, NS, QUOTA)
    emulator.compact()
    report = world.sync()
    assert "workloads" in report.relisted
    assert world.job(job).wait_reason
    assert int(Cluster.objects.get(pk=cluster.pk).sync_bookmarks["workloads"]) >= emulator.floor["workloads"]


def test_watch_dropped_mid_stream_loses_nothing(world, kube, emulator):
    jobs = [world.submit(f"j{i}") for i in range(3)]
    for job in jobs:
        kube.create_workload(job.k8s_name, NS)
        kube.pending(job.k8s_name, NS, QUOTA)
    emulator.fail("GET", r"/workloads\?.*watch=true", drop_after=1)
    world.sync()
    world.sync()
    assert all(world.job(j).wait_reason for j in jobs)
    assert all(JobEvent.objects.filter(job=j, kind="wait_reason").count() == 1 for j in jobs)


def test_unreachable_cluster_is_stale_and_loses_nothing(world, kube, cluster, emulator, settings):
    job = _running(world, kube)
    waiting = world.submit("waiting")
    settings.KUBE_API_RETRIES = 0
    settings.KUBE_STALE_AFTER_SECONDS = 0
    emulator.fail("*", ".*", status=503, times=1000)
    report = world.sync()
    row = Cluster.objects.get(pk=cluster.pk)
    assert report.unreachable
    assert row.last_sync_error
    assert row.last_sync_error_at
    assert world.job(job).state == "running"  # nothing lost
    assert Allocation.objects.filter(job=job, ended_at__isnull=True).count() == 8
    waiting = world.job(waiting)
    assert waiting.wait_reason == "cluster_unreachable"
    assert "as of" in waiting.wait_message
    emulator.faults.clear()
    kube.create_workload(waiting.k8s_name, NS)
    kube.pending(waiting.k8s_name, NS, QUOTA)
    world.sync()
    assert Cluster.objects.get(pk=cluster.pk).last_sync_error == ""
    assert world.job(waiting).wait_reason in ("quota_exhausted", "higher_priority_ahead")


def test_restart_in_the_middle_of_a_relist_double_counts_nothing(world, kube, cluster, emulator, settings):
    settings.KUBE_LIST_PAGE_SIZE = 2
    settings.KUBE_API_RETRIES = 0
    jobs = [world.submit(f"r{i}", gpus=1) for i in range(5)]
    for job in jobs:
        kube.create_workload(job.k8s_name, NS)
    for i, job in enumerate(jobs):
        kube.admit(
            job.k8s_name,
            NS,
            cluster_queue="vision",
            flavor="h100",
            nodes=["gpu-a1" if i < 1 else "gpu-a2"],
            gpus_per_pod=1,
            when=at(3),
        )
    Cluster.objects.filter(pk=cluster.pk).update(sync_bookmarks={})  # the next pass relists everything
    emulator.fail("GET", r"/workloads\?.*continue=", status=500, times=1)  # dies after the first page
    world.sync()
    world.sync()
    world.sync()
    for job in jobs:
        assert world.job(job).state == "admitted"
        assert Allocation.objects.filter(job=job).count() == 1
        assert JobEvent.objects.filter(job=job, kind="admitted").count() == 1


def test_sync_twice_changes_nothing_and_costs_little(world, kube, emulator):
    job = _running(world, kube)
    before = (JobEvent.objects.count(), Allocation.objects.count(), KubeJobState.objects.get(job=job).observed_at)
    emulator.requests.clear()
    report = world.sync()
    assert report.evaluated == 0
    assert not report.relisted
    assert all(
        r["query"].get("watch") == "true"
        for r in emulator.requests
        if r["method"] == "GET" and "/api" in r["path"] and r["path"] not in ("/api", "/apis")
    )
    assert (
        JobEvent.objects.count(),
        Allocation.objects.count(),
        KubeJobState.objects.get(job=job).observed_at,
    ) == before


def test_full_relist_is_idempotent(world, kube):
    job = _running(world, kube)
    counts = (JobEvent.objects.filter(job=job).count(), Allocation.objects.filter(job=job).count())
    world.sync(full=True)
    world.sync(full=True)
    assert (JobEvent.objects.filter(job=job).count(), Allocation.objects.filter(job=job).count()) == counts


def test_node_heartbeats_do_not_touch_the_inventory(world, emulator, cluster):
    node = emulator.get_obj("Node", "gpu-a1")
    node["status"]["conditions"][0]["lastHeartbeatTime"] = ts(at(99))
    emulator.put(node)
    seen = Node.objects.get(name="gpu-a1").last_seen_at
    report = world.sync()
    assert report.inventory == []
    assert Node.objects.get(name="gpu-a1").last_seen_at == seen
    emulator.put(gpu_node("gpu-a1", labels={"rack": "r7"}))
    report = world.sync()
    assert report.inventory
    assert Node.objects.get(name="gpu-a1").labels["rack"] == "r7"


def test_deactivated_by_kueue_for_max_execution_time_is_timed_out(world, kube):
    job = _running(world, kube)
    kube.evict(
        job.k8s_name,
        NS,
        reason="DeactivatedDueToMaximumExecutionTimeExceeded",
        message="The workload is deactivated due to exceeding the maximum execution time",
        when=at(50),
    )
    wl = kube.workload(job.k8s_name, NS)
    wl["spec"]["active"] = False
    kube.emu.put(wl)
    world.sync()
    job = world.job(job)
    assert (job.state, job.finished_at) == ("timed-out", at(50))


def test_quota_reserved_waiting_for_provisioning(world, kube):
    job = world.submit()
    kube.create_workload(job.k8s_name, NS)
    kube.set_status(
        job.k8s_name,
        NS,
        admission={
            "clusterQueue": "vision",
            "podSetAssignments": [{"name": "main", "count": 1, "flavors": {"nvidia.com/gpu": "h100"}}],
        },
        conditions=[
            condition("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue vision", at(2)),
            condition(
                "Admitted", "False", "UnsatisfiedAdmissionChecks", "The workload has not all checks ready", at(2)
            ),
        ],
        admissionChecks=[
            {"name": "dws-prov", "state": "Pending", "message": "waiting for capacity", "lastTransitionTime": ts(at(2))}
        ],
    )
    world.sync()
    job = world.job(job)
    assert (job.state, job.wait_reason) == ("pending", "awaiting_provisioning")


def _outcome_rows(jobs: list[Job]) -> tuple[list, list]:
    """Every job's state and wait fields, and every timeline event (no ids), in a comparable form."""
    ids = [j.pk for j in jobs]
    fields = [
        "pk",
        "state",
        "state_changed_at",
        "admitted_at",
        "started_at",
        "finished_at",
        "wait_reason",
        "wait_message",
        "kueue_message",
        "wait_details",
        "wait_since",
    ]
    states = list(Job.objects.filter(pk__in=ids).order_by("pk").values_list(*fields))
    events = list(
        JobEvent.objects.filter(job_id__in=ids)
        .order_by("job_id", "at", "id")
        .values_list("job_id", "at", "kind", "message", "details", "source_key")
    )
    return states, events


def test_batched_wait_reasons_write_what_the_per_job_path_writes(world, kube, emulator, cluster, api):
    from django.db import transaction

    from clusters.kube_sync.sync import ClusterSync

    class PerJob(ClusterSync):
        batch_wait_reasons = False

    running = _running(world, kube, "running")
    jobs = [running] + [world.submit(f"p{i}", minute=i) for i in range(5)]
    same_a, same_b, other, mystery, finished = jobs[1:]
    for job in jobs[1:]:
        kube.create_workload(job.k8s_name, NS)
    kube.pending(same_a.k8s_name, NS, QUOTA, when=at(1))
    kube.pending(same_b.k8s_name, NS, QUOTA, when=at(1))
    kube.pending(other.k8s_name, NS, QUOTA.replace("8 more", "16 more"), when=at(2))
    kube.pending(mystery.k8s_name, NS, "Kueue v9 says: the moon is in the wrong phase", reason="WaitingForQuota")
    kube.admit(
        finished.k8s_name, NS, cluster_queue="vision", flavor="h100", nodes=["gpu-a2"], gpus_per_pod=8, when=at(6)
    )
    kube.run_pods(finished.k8s_name, NS, ["gpu-a2"], when=at(7))
    kube.complete(finished.k8s_name, NS, ["gpu-a2"], started=at(7), when=at(9))

    def rounds(sync_class: type[ClusterSync]) -> list[tuple[list, list]]:
        """Two full syncs at fixed clocks, the second after the messages changed; what each left."""
        out = []
        with transaction.atomic():
            sync_class(Cluster.objects.get(pk=cluster.pk), api, clock=lambda: at(10)).run(full=True)
            out.append(_outcome_rows(jobs))
            kube.pending(same_a.k8s_name, NS, QUOTA.replace("8 more", "24 more"), when=at(11))  # message only
            kube.pending(same_b.k8s_name, NS, "Kueue v9 says: something else", reason="WaitingForQuota")
            kube.pending(mystery.k8s_name, NS, QUOTA, when=at(11))  # unrecognised → a code
            sync_class(Cluster.objects.get(pk=cluster.pk), api, clock=lambda: at(12)).run(full=True)
            out.append(_outcome_rows(jobs))
            transaction.set_rollback(True)
        # the cluster back as it was for the other path
        kube.pending(same_a.k8s_name, NS, QUOTA, when=at(1))
        kube.pending(same_b.k8s_name, NS, QUOTA, when=at(1))
        kube.pending(mystery.k8s_name, NS, "Kueue v9 says: the moon is in the wrong phase", reason="WaitingForQuota")
        return out

    per_job = rounds(PerJob)
    batched = rounds(ClusterSync)
    assert batched == per_job
    first, second = batched
    by_pk = {row[0]: row for row in first[0]}
    assert by_pk[same_a.pk][6:10] == by_pk[same_b.pk][6:10]  # one reason for both: written as one group
    assert by_pk[same_a.pk][6] in ("quota_exhausted", "higher_priority_ahead")
    assert by_pk[finished.pk][1] == "succeeded"
    assert by_pk[mystery.pk][6] == ""
    assert len(second[1]) > len(first[1])  # the second round wrote events too


def test_a_failing_job_is_rolled_back_alone_and_retried(world, kube, monkeypatch):
    """A chunk is evaluated in one savepoint; when one job fails, the chunk is redone job by job: the others are
    written, the failing job's own writes are rolled back and it stays dirty for the next pass."""
    import clusters.kube_sync.sync as sync_module

    waiting = [world.submit(f"w{i}", minute=i) for i in range(3)]
    odd = world.submit("odd", minute=4)
    for job in [*waiting, odd]:
        kube.create_workload(job.k8s_name, NS)
    for job in waiting:
        kube.pending(job.k8s_name, NS, QUOTA, when=at(5))
    kube.admit(odd.k8s_name, NS, cluster_queue="vision", flavor="h100", nodes=["gpu-a1"], gpus_per_pod=8, when=at(6))
    real = sync_module.evaluate_job
    calls = []

    def failing(job, st, ctx):
        calls.append(job.pk)
        outcome = real(job, st, ctx)  # its writes happen, then it fails
        if job.pk == odd.pk:
            raise RuntimeError("disk on fire")
        return outcome

    monkeypatch.setattr(sync_module, "evaluate_job", failing)
    report = world.sync()
    assert [e for e in report.errors if "disk on fire" in e] == [f"job {odd.pk}: disk on fire"]
    assert report.evaluated == 3
    assert report.actions == {"wait": 3}
    assert calls.count(waiting[0].pk) == 2  # the chunk, then job by job
    assert {world.job(j).wait_reason for j in waiting} <= {"quota_exhausted", "higher_priority_ahead"}
    assert all(JobEvent.objects.filter(job=j, kind="wait_reason").count() == 1 for j in waiting)
    assert world.job(odd).state == "pending"
    assert not Allocation.objects.filter(job=odd).exists()
    assert KubeJobState.objects.get(job=odd).dirty
    monkeypatch.setattr(sync_module, "evaluate_job", real)
    report = world.sync()
    assert report.errors == []
    assert report.evaluated == 1
    assert world.job(odd).state == "admitted"
    assert Allocation.objects.filter(job=odd, ended_at__isnull=True).count() == 8
    assert all(JobEvent.objects.filter(job=j, kind="wait_reason").count() == 1 for j in waiting)


def test_jobs_admitted_in_one_pass_on_one_node_get_distinct_devices(world, kube):
    """A chunk reads the free devices once; each admission takes its devices out of that list."""
    first, second, third = (world.submit(f"half{i}", gpus=4, minute=i) for i in range(3))
    for i, job in enumerate((first, second, third)):
        kube.create_workload(job.k8s_name, NS)
        kube.admit(
            job.k8s_name, NS, cluster_queue="vision", flavor="h100", nodes=["gpu-a1"], gpus_per_pod=4, when=at(5 + i)
        )
    report = world.sync()
    assert report.actions["admitted"] == 3
    held = list(Allocation.objects.filter(job__in=[first, second]).values_list("device_id", flat=True))
    assert len(held) == len(set(held)) == 8
    assert set(Device.objects.filter(pk__in=held).values_list("node__name", flat=True)) == {"gpu-a1"}
    assert not Allocation.objects.filter(job=third).exists()  # the node was full: admitted, no device to record
