"""Submitting a job: a suspended batch/v1 Job with Kueue's labels, valid against the real schemas; cancelling it."""

from __future__ import annotations

import json

import pytest

from clusters.kube_sync.config import kube_config_push
from clusters.kube_sync.jobs import kube_job_create
from clusters.models import KubeJobState
from pools.models import Topology
from queues.models import Job
from queues.services import JobSpec, job_cancel, job_submit
from tests.factories import ResourceFlavorFactory
from tests.kube.cluster import at
from tests.kube.schemas import validate_core

pytestmark = pytest.mark.django_db


@pytest.fixture
def submit(portal, cluster, api, django_capture_on_commit_callbacks):
    """Submit through the portal's own service; the backend's task runs after commit (eager Celery)."""
    kube_config_push(cluster=cluster, api=api)

    def run(name: str = "train", **kwargs) -> Job:
        spec = JobSpec(
            name=name,
            image="registry.example.com/vision/train:1.0",
            resource_class=kwargs.pop("resource_class", portal.rc),
            devices_per_pod=kwargs.pop("devices_per_pod", 8),
            **kwargs,
        )
        with django_capture_on_commit_callbacks(execute=True):
            job = job_submit(owner=portal.user, team=portal.team, spec=spec, now=at(0))
        job.refresh_from_db()
        return job

    return run


def test_submit_creates_a_suspended_job_with_kueue_labels(submit, emulator):
    job = submit(command=["python", "train.py"], env={"EPOCHS": "3"}, max_runtime_seconds=7200)
    obj = emulator.get_obj("Job", job.k8s_name, "team-vision")
    assert emulator.rejected == []
    assert validate_core(obj) == []
    meta, spec = obj["metadata"], obj["spec"]
    assert meta["labels"]["kueue.x-k8s.io/queue-name"] == "main"
    assert meta["labels"]["kueue.x-k8s.io/priority-class"] == "normal"
    assert meta["labels"]["gpu-pool-portal.io/job-id"] == str(job.pk)
    assert spec["suspend"] is True
    assert spec["activeDeadlineSeconds"] == 7200
    assert spec["parallelism"] == spec["completions"] == 1
    assert "completionMode" not in spec
    container = spec["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"] == {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi"}
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert {"name": "EPOCHS", "value": "3"} in container["env"]
    assert container["command"] == ["python", "train.py"]
    terms = spec["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]}]}
    ]
    preferred = spec["template"]["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred == [  # away from nodes the health sweep labelled for degraded devices
        {
            "weight": 50,
            "preference": {
                "matchExpressions": [{"key": "gpu-pool-portal.io/degraded-devices", "operator": "DoesNotExist"}]
            },
        }
    ]
    assert "nodeSelector" not in spec["template"]["spec"]  # Kueue injects the flavor's labels at admission
    assert job.k8s_uid == obj["metadata"]["uid"]
    assert KubeJobState.objects.get(job=job).batch_job["metadata"]["uid"] == job.k8s_uid


def test_submit_multi_pod_is_an_indexed_job_with_topology_and_checkpoints(submit, portal, emulator):
    topo = Topology.objects.create(name="t", levels=["cloud.com/rack", "kubernetes.io/hostname"])
    portal.flavor.topology = topo
    portal.flavor.node_taints = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    portal.flavor.save()
    portal.rc.min_driver_version = "550.54"
    portal.rc.save()
    job = submit(
        pod_count=4,
        topology_mode="required",
        topology_level="cloud.com/rack",
        checkpoint_path="/ckpt",
        checkpoint_signal="SIGUSR1",
        checkpoint_command=["/bin/save", "--now"],
        checkpoint_interval_seconds=600,
    )
    obj = emulator.get_obj("Job", job.k8s_name, "team-vision")
    assert emulator.rejected == []
    spec = obj["spec"]
    assert (spec["completionMode"], spec["parallelism"], spec["completions"]) == ("Indexed", 4, 4)
    template = spec["template"]
    assert template["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"] == "cloud.com/rack"
    assert template["metadata"]["annotations"]["gpu-pool-portal.io/checkpoint-path"] == "/ckpt"
    assert json.loads(obj["metadata"]["annotations"]["gpu-pool-portal.io/checkpoint-command"]) == ["/bin/save", "--now"]
    pod = template["spec"]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert env["PORTAL_CHECKPOINT_SIGNAL"] == "SIGUSR1"
    assert env["PORTAL_CHECKPOINT_INTERVAL_SECONDS"] == "600"
    assert pod["containers"][0]["lifecycle"]["preStop"]["exec"]["command"] == ["/bin/save", "--now"]
    assert pod["terminationGracePeriodSeconds"] == 300
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    exprs = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert {"key": "nvidia.com/cuda.driver-version.major", "operator": "Gt", "values": ["549"]} in exprs[
        "matchExpressions"
    ]


def test_submit_class_with_two_flavors_gets_one_term_per_flavor(submit, portal, emulator):
    other = ResourceFlavorFactory(name="h100-b", node_labels={"nvidia.com/gpu.product": "H100-PCIe"})
    portal.rc.flavor_links.create(flavor=other, order=1)
    job = submit()
    terms = emulator.get_obj("Job", job.k8s_name, "team-vision")["spec"]["template"]["spec"]["affinity"]
    terms = terms["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert len(terms) == 2


def test_submit_retries_a_server_error(submit, emulator):
    fault = emulator.fail("POST", r"/jobs", status=500, times=1)
    job = submit()
    assert fault.hits == 1
    assert job.k8s_uid


def test_submit_after_a_lost_response_finds_its_own_job(submit, portal, api, emulator):
    job = submit()
    uid = job.k8s_uid
    Job.objects.filter(pk=job.pk).update(k8s_uid="")  # as if the POST's response never came back
    assert kube_job_create(job_id=job.pk, api=api) == "created"
    job.refresh_from_db()
    assert job.k8s_uid == uid
    assert len(emulator.all("Job")) == 1


def test_submit_name_taken_by_a_foreign_job_fails_the_job(
    portal, cluster, api, emulator, django_capture_on_commit_callbacks
):
    kube_config_push(cluster=cluster, api=api)
    spec = JobSpec(name="train", image="registry.example.com/a:1", resource_class=portal.rc, devices_per_pod=8)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        job = job_submit(owner=portal.user, team=portal.team, spec=spec, now=at(0))
    # someone else's Job takes the name between the portal's commit and its request to the cluster
    emulator.put(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": job.k8s_name, "namespace": "team-vision"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}},
        }
    )
    for callback in callbacks:
        callback()
    job.refresh_from_db()
    assert job.state == Job.State.FAILED
    assert "already exists" in job.events.order_by("at", "id").last().message
    assert emulator.get_obj("Job", job.k8s_name, "team-vision")["metadata"].get("labels") is None  # left alone


def test_submit_to_a_missing_namespace_waits_misconfigured(portal, cluster, api, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        job = job_submit(
            owner=portal.user,
            team=portal.team,
            spec=JobSpec(name="x", image="registry.example.com/a:1", resource_class=portal.rc, devices_per_pod=8),
            now=at(0),
        )
    job.refresh_from_db()
    assert job.state == Job.State.PENDING
    assert job.wait_reason == "misconfigured"
    assert not job.k8s_uid


def test_submit_while_the_cluster_is_down_stays_pending(submit, emulator, settings):
    settings.KUBE_API_RETRIES = 0
    emulator.fail("POST", r"/jobs", status=503, times=100)
    job = submit()
    assert job.state == Job.State.PENDING
    assert not job.k8s_uid  # the reconciler submits it once the cluster answers


def test_cancel_deletes_the_job_and_its_pods(submit, portal, kube, emulator, django_capture_on_commit_callbacks):
    job = submit()
    kube.pod(job.k8s_name, "team-vision", 0, node="gpu-a1")
    with django_capture_on_commit_callbacks(execute=True):
        job_cancel(job=job, user=portal.user)
    assert emulator.get_obj("Job", job.k8s_name, "team-vision") is None
    assert emulator.all("Pod") == []
    assert emulator.deletes[-1] == {
        "kind": "Job",
        "namespace": "team-vision",
        "name": job.k8s_name,
        "policy": "Background",
    }


def test_cancel_with_foreground_propagation(submit, portal, emulator, settings, django_capture_on_commit_callbacks):
    settings.KUBE_DELETE_PROPAGATION = "Foreground"
    job = submit()
    with django_capture_on_commit_callbacks(execute=True):
        job_cancel(job=job, user=portal.user)
    assert emulator.deletes[-1]["policy"] == "Foreground"
