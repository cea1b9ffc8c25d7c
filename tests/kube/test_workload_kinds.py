"""Each workload kind through the emulator: the manifest (valid against its CRD or core schema), Kueue's Workload
for it, admission, running, the end read from the kind's own status, and cancel with propagation."""

from __future__ import annotations

import json

import pytest

from clusters.kube_sync.job_run import kube_job_logs
from clusters.kube_sync.jobs import job_manifest_now
from clusters.kube_sync.sync import ClusterSync
from clusters.models import KubeJobState
from pools.models import Cluster
from pools.workload_kinds import WorkloadKind, kind_spec
from queues.models import Job
from queues.pod_sets import SESSION_PORT, job_pod_sets
from queues.services import job_cancel
from tests.kube.cluster import at
from tests.kube.kinds_cluster import KindCluster, pod_sets_of, submit_kind_job
from tests.kube.schemas import validate

pytestmark = pytest.mark.django_db

#: kind → (top-level object's kind, pods of the primary pod set, devices per pod)
SHAPES = {
    WorkloadKind.JOBSET: ("JobSet", 2, 4),
    WorkloadKind.PYTORCHJOB: ("PyTorchJob", 1, 4),
    WorkloadKind.RAYJOB: ("RayJob", 2, 2),
    WorkloadKind.SESSION: ("Pod", 1, 1),
    WorkloadKind.INFERENCE: ("Deployment", 2, 2),
    WorkloadKind.INFERENCE_LWS: ("LeaderWorkerSet", 1, 4),
}
ENDING = [WorkloadKind.JOBSET, WorkloadKind.PYTORCHJOB, WorkloadKind.RAYJOB]


@pytest.fixture
def submit_kind(world, portal, django_capture_on_commit_callbacks):
    """Submit a job of a kind through the portal's service; the backend creates its object after commit."""

    def run(kind: str, name: str = "train", **kwargs) -> Job:
        _, pods, gpus = SHAPES[kind]
        return submit_kind_job(
            portal, django_capture_on_commit_callbacks, kind, pods=pods, gpus=gpus, name=name, **kwargs
        )

    return run


@pytest.mark.parametrize("kind", list(SHAPES))
def test_each_kind_creates_its_object_valid_against_its_schema(kind, submit_kind, emulator):
    job = submit_kind(kind, max_runtime_seconds=3600)
    top_kind = SHAPES[kind][0]
    obj = emulator.get_obj(top_kind, job.k8s_name, "team-vision")
    assert obj is not None, emulator.rejected
    assert validate(obj) == []
    labels = obj["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "main"
    assert labels["kueue.x-k8s.io/priority-class"] == "normal"
    assert labels["gpu-pool-portal.io/job-id"] == str(job.pk)
    assert job.k8s_uid == obj["metadata"]["uid"]
    # the pod sets Kueue's integration reads are the job's, in its order, with its requests per pod
    shapes = job_pod_sets(job)
    seen = pod_sets_of(obj)
    assert [c for _, c, _ in seen] == [ps.count for ps in shapes]
    for (_, _, template), ps in zip(seen, shapes, strict=True):
        requests = template["spec"]["containers"][0]["resources"]["requests"]
        assert requests.get("nvidia.com/gpu", "0") == str(ps.devices_per_pod)
        assert (requests["cpu"], requests["memory"]) == (ps.cpu, ps.memory)
        assert template["metadata"]["labels"]["gpu-pool-portal.io/pod-set"] == ps.name
        # the class's placement, exactly as on a batch Job
        terms = template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"] == [
            {
                "matchExpressions": [
                    {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]}
                ]
            }
        ]


def test_suspended_kinds_are_created_suspended(submit_kind, emulator):
    assert emulator.get_obj("JobSet", submit_kind(WorkloadKind.JOBSET, "a").k8s_name, "team-vision")["spec"]["suspend"]
    pt = emulator.get_obj("PyTorchJob", submit_kind(WorkloadKind.PYTORCHJOB, "b").k8s_name, "team-vision")
    assert pt["spec"]["runPolicy"]["suspend"] is True
    assert set(pt["spec"]["pytorchReplicaSpecs"]) == {"Master", "Worker"}
    assert pt["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["name"] == "pytorch"
    ray = emulator.get_obj("RayJob", submit_kind(WorkloadKind.RAYJOB, "c").k8s_name, "team-vision")["spec"]
    assert (ray["suspend"], ray["shutdownAfterJobFinishes"], ray["entrypoint"]) == (True, True, "python train.py")
    assert ray["submissionMode"] == "HTTPMode"  # no submitter pod: Kueue's pod sets are the head and the workers
    assert "command" not in ray["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]


def test_topology_rule_applies_to_every_pod_set(submit_kind, portal):
    job = submit_kind(WorkloadKind.JOBSET)
    Job.objects.filter(pk=job.pk).update(topology_mode="required", topology_level="cloud.com/rack")
    obj = job_manifest_now(Job.objects.get(pk=job.pk))
    assert validate(obj) == []
    annotations = [t["metadata"]["annotations"] for _, _, t in pod_sets_of(obj)]
    assert [a["kueue.x-k8s.io/podset-required-topology"] for a in annotations] == ["cloud.com/rack"] * 2


def test_session_says_how_to_reach_it(submit_kind, emulator, settings):
    job = submit_kind(WorkloadKind.SESSION, "nb", command=[])
    pod = emulator.get_obj("Pod", job.k8s_name, "team-vision")
    assert pod["spec"]["restartPolicy"] == "Always"
    assert pod["spec"]["containers"][0]["image"] == kind_spec(WorkloadKind.SESSION).default_image
    assert pod["spec"]["containers"][0]["ports"] == [{"name": "http", "containerPort": SESSION_PORT}]
    access = json.loads(pod["metadata"]["annotations"]["gpu-pool-portal.io/access"])
    assert access["port_forward"] == f"kubectl -n team-vision port-forward pod/{job.k8s_name} 8888:8888"
    settings.KUBE_SESSION_INGRESS_DOMAIN = "sessions.example.com"
    other = submit_kind(WorkloadKind.SESSION, "nb2", command=[])
    pod = emulator.get_obj("Pod", other.k8s_name, "team-vision")
    access = json.loads(pod["metadata"]["annotations"]["gpu-pool-portal.io/access"])
    assert access["url"] == f"https://{other.k8s_name}.sessions.example.com/"


def test_a_ray_job_without_a_command_fails_without_submitting(submit_kind, emulator):
    job = submit_kind(WorkloadKind.RAYJOB, command=[])
    assert job.state == Job.State.FAILED
    assert "entrypoint" in job.events.order_by("at", "id").last().message
    assert emulator.all("RayJob") == []


@pytest.mark.parametrize("kind", ENDING)
def test_kind_runs_to_its_end(kind, submit_kind, world, emulator, portal):
    job = submit_kind(kind)
    cluster = KindCluster(emulator, SHAPES[kind][0], job.k8s_name, "team-vision")
    cluster.create_workload(when=at(0.1))
    world.sync()
    job = world.job(job)
    assert job.state == Job.State.PENDING
    assert job.workload_name == cluster.workload_name
    cluster.admit(cluster_queue="vision", flavor="h100", when=at(1))
    pods = cluster.run(["gpu-a1", "gpu-a2"], when=at(2))
    world.sync()
    job = world.job(job)
    assert job.state == Job.State.RUNNING
    assert len(KubeJobState.objects.get(job=job).pods) == len(pods) == sum(p.count for p in job_pod_sets(job))
    # devices were taken per pod set: none for a device-less companion (launcher, Ray head)
    assert job.allocations.filter(ended_at__isnull=True).count() == sum(p.total_devices for p in job_pod_sets(job))
    cluster.finish(when=at(30))
    world.sync()
    job = world.job(job)
    assert job.state == Job.State.SUCCEEDED
    assert job.finished_at == at(30)


@pytest.mark.parametrize("kind", ENDING)
def test_kind_failure_read_from_its_own_status(kind, submit_kind, world, emulator):
    job = submit_kind(kind)
    cluster = KindCluster(emulator, SHAPES[kind][0], job.k8s_name, "team-vision")
    cluster.create_workload(when=at(0.1))
    cluster.admit(cluster_queue="vision", flavor="h100", when=at(1))
    cluster.run(["gpu-a1", "gpu-a2"], when=at(2))
    cluster.finish(when=at(5), failed=True, message="worker 1 exited with code 3")
    world.sync()
    job = world.job(job)
    assert job.state == Job.State.FAILED
    assert "worker 1 exited with code 3" in job.events.order_by("at", "id").last().message


@pytest.mark.parametrize("kind", list(SHAPES))
def test_cancel_deletes_the_object_its_pods_and_workload(
    kind, submit_kind, world, emulator, portal, settings, django_capture_on_commit_callbacks
):
    settings.KUBE_DELETE_PROPAGATION = "Foreground"
    job = submit_kind(kind)
    top_kind = SHAPES[kind][0]
    cluster = KindCluster(emulator, top_kind, job.k8s_name, "team-vision")
    cluster.create_workload(when=at(0.1))
    cluster.admit(cluster_queue="vision", flavor="h100", when=at(1))
    cluster.run(["gpu-a1", "gpu-a2"], when=at(2))
    world.sync()
    assert world.job(job).state == Job.State.RUNNING
    with django_capture_on_commit_callbacks(execute=True):
        job_cancel(job=world.job(job), user=portal.user)
    assert emulator.get_obj(top_kind, job.k8s_name, "team-vision") is None
    assert emulator.all("Pod") == []
    assert emulator.all("Workload") == []
    assert emulator.deletes[-1] == {
        "kind": top_kind,
        "namespace": "team-vision",
        "name": job.k8s_name,
        "policy": "Foreground",
    }
    world.sync()
    job = world.job(job)
    assert job.state == Job.State.CANCELLED
    assert job.allocations.filter(ended_at__isnull=True).count() == 0


def test_service_deleted_in_the_cluster_ends_the_job(submit_kind, world, emulator):
    job = submit_kind(WorkloadKind.INFERENCE)
    cluster = KindCluster(emulator, "Deployment", job.k8s_name, "team-vision")
    cluster.create_workload(when=at(0.1))
    cluster.admit(cluster_queue="vision", flavor="h100", when=at(1))
    cluster.run(["gpu-a1"], when=at(2))
    world.sync()
    assert world.job(job).state == Job.State.RUNNING
    assert KubeJobState.objects.get(job=job).batch_job["status"]["availableReplicas"] == 2
    emulator.remove("Deployment", job.k8s_name, "team-vision")
    world.sync()
    job = world.job(job)
    assert job.state == Job.State.CANCELLED
    assert "Deployment was deleted" in job.events.order_by("at", "id").last().message


def test_sync_reads_the_served_kinds_of_live_jobs_only(submit_kind, world, cluster, api, emulator):
    del emulator.resources[("jobset.x-k8s.io", "v1alpha2", "jobsets")]  # no JobSet CRD in this cluster
    submit_kind(WorkloadKind.PYTORCHJOB)
    emulator.requests.clear()
    report = ClusterSync(Cluster.objects.get(pk=cluster.pk), api).run(full=True)
    assert not report.unreachable
    assert "pytorchjobs" in report.relisted  # a live job of that kind
    assert not {"jobsets", "rayjobs", "deployments", "leaderworkersets"} & set(report.relisted)
    assert not any(r["path"].endswith(("/jobsets", "/rayjobs")) for r in emulator.requests)


def test_job_page_reads_the_logs_of_every_pod_set(submit_kind, world, emulator, api):
    job = submit_kind(WorkloadKind.JOBSET)
    cluster = KindCluster(emulator, "JobSet", job.k8s_name, "team-vision")
    cluster.create_workload(when=at(0.1))
    cluster.admit(cluster_queue="vision", flavor="h100", when=at(1))
    pods = cluster.run(["gpu-a1", "gpu-a2"], when=at(2))
    emulator.set_pod_log("team-vision", pods[0], [("2026-09-01T08:02:00Z", "launcher up")])
    logs = kube_job_logs(world.job(job), api=api, tail_lines=5)
    assert sorted(log.pod for log in logs) == sorted(pods)  # the launcher's and the workers'
    assert next(log for log in logs if log.pod == pods[0]).lines == ["2026-09-01T08:02:00Z launcher up"]
