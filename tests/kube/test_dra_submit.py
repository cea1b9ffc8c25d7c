"""DRA submission: on a cluster whose GPUs are published as ResourceSlices, every pod set with devices claims them
through a ResourceClaimTemplate (resource.k8s.io/v1, validated against the Kubernetes 1.34 schema) whose CEL
selector comes from the class's constraints as the inventory saw the devices."""

from __future__ import annotations

import pytest

from clusters.kube_sync.dra_claims import class_dra_request
from clusters.kube_sync.kueue_config import kueue_config_check
from pools.models import Device
from pools.workload_kinds import WorkloadKind
from queues.models import Job
from queues.services import job_cancel
from tests.kube.cluster import at, gpu_node, kueue_config_map
from tests.kube.kinds_cluster import pod_sets_of, submit_kind_job
from tests.kube.schemas import validate

pytestmark = pytest.mark.django_db

PRODUCT = "NVIDIA H100 80GB HBM3"


def h100_slice(node: str, count: int = 8) -> dict:
    """A ResourceSlice of NVIDIA's DRA driver with ``count`` H100s, as the driver publishes it."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu.nvidia.com-abcde"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{i}",
                    "attributes": {
                        "type": {"string": "gpu"},
                        "uuid": {"string": f"GPU-{node}-{i}"},
                        "productName": {"string": PRODUCT},
                        "architecture": {"string": "Hopper"},
                        "driverVersion": {"version": "580.82.7"},
                        "cudaDriverVersion": {"version": "13.0.0"},
                    },
                    "capacity": {"memory": {"value": "80Gi"}},
                }
                for i in range(count)
            ],
        },
    }


@pytest.fixture
def dra(portal, emulator):
    """The portal's two nodes publish their GPUs only as ResourceSlices (no device plugin: no nvidia.com/gpu)."""
    for name in ("gpu-a1", "gpu-a2"):
        emulator.put(gpu_node(name, gpus=0))
        emulator.put(h100_slice(name))
    portal.rc.min_driver_version = "550.54"
    portal.rc.save()


@pytest.fixture
def submit(world, portal, django_capture_on_commit_callbacks):
    def run(kind: str = WorkloadKind.BATCH, *, pods: int = 1, gpus: int = 8) -> Job:
        return submit_kind_job(portal, django_capture_on_commit_callbacks, kind, pods=pods, gpus=gpus)

    return run


def test_dra_inventory_gives_the_class_a_claim_request(dra, world, portal, cluster):
    assert Device.objects.filter(source=Device.Source.DRA, resource_name="nvidia.com/gpu").count() == 16
    request = class_dra_request(portal.rc, cluster_id=cluster.pk)
    assert request is not None
    assert request.device_class == "gpu.nvidia.com"
    assert request.selector == (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu' && "
        "device.attributes['gpu.nvidia.com'].productName in ['NVIDIA H100 80GB HBM3'] && "
        "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) >= 0 && "
        "device.attributes['gpu.nvidia.com'].driverVersion.compareTo(semver('550.54.0')) >= 0"
    )


def test_device_plugin_cluster_gets_no_claims(world, portal, cluster, submit, emulator):
    assert class_dra_request(portal.rc, cluster_id=cluster.pk) is None
    job = submit()
    assert emulator.all("ResourceClaimTemplate") == []
    template = emulator.get_obj("Job", job.k8s_name, "team-vision")["spec"]["template"]
    assert template["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "8"


def test_dra_batch_job_claims_its_devices_through_a_template(dra, submit, emulator):
    job = submit()
    obj = emulator.get_obj("Job", job.k8s_name, "team-vision")
    claim = emulator.get_obj("ResourceClaimTemplate", f"{job.k8s_name}-main", "team-vision")
    assert claim is not None
    assert validate(claim) == []
    assert claim["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
    (request,) = claim["spec"]["spec"]["devices"]["requests"]
    assert request["name"] == "devices"
    assert request["exactly"]["deviceClassName"] == "gpu.nvidia.com"
    assert (request["exactly"]["allocationMode"], request["exactly"]["count"]) == ("ExactCount", 8)
    assert "productName in ['NVIDIA H100 80GB HBM3']" in request["exactly"]["selectors"][0]["cel"]["expression"]
    pod = obj["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [{"name": "devices", "resourceClaimTemplateName": f"{job.k8s_name}-main"}]
    container = pod["containers"][0]["resources"]
    assert container["claims"] == [{"name": "devices"}]
    assert "nvidia.com/gpu" not in container["requests"]
    assert container["requests"] == {"cpu": "64", "memory": "512Gi"}


def test_dra_jobset_claims_per_pod_set_with_devices(dra, submit, emulator):
    job = submit(WorkloadKind.JOBSET, pods=2, gpus=4)
    obj = emulator.get_obj("JobSet", job.k8s_name, "team-vision")
    assert validate(obj) == []
    (launcher, _, launcher_tpl), (workers, _, workers_tpl) = pod_sets_of(obj)
    assert (launcher, workers) == ("launcher", "workers")
    assert "resourceClaims" not in launcher_tpl["spec"]  # no devices, no claim
    assert workers_tpl["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == f"{job.k8s_name}-workers"
    names = sorted(t["metadata"]["name"] for t in emulator.all("ResourceClaimTemplate"))
    assert names == [f"{job.k8s_name}-workers"]
    claim = emulator.get_obj("ResourceClaimTemplate", f"{job.k8s_name}-workers", "team-vision")
    assert claim["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 4


def test_dra_cancel_deletes_the_claim_templates_with_the_job(
    dra, submit, portal, emulator, django_capture_on_commit_callbacks
):
    job = submit()
    assert len(emulator.all("ResourceClaimTemplate")) == 1
    with django_capture_on_commit_callbacks(execute=True):
        job_cancel(job=job, user=portal.user)
    assert emulator.all("ResourceClaimTemplate") == []


def test_dra_claim_refused_fails_the_job_and_removes_its_object(dra, submit, emulator):
    fault = emulator.fail("POST", r"/resourceclaimtemplates", status=422, message="spec.devices: Invalid value")
    job = submit()
    assert fault.hits == 1
    assert job.state == Job.State.FAILED
    assert "rejected the job's device claim" in job.events.order_by("at", "id").last().message
    assert emulator.get_obj("Job", job.k8s_name, "team-vision") is None


def test_kueue_config_must_map_the_device_class_the_portal_claims(dra, world, cluster, api, emulator):
    emulator.put(kueue_config_map("apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"))
    outcome = kueue_config_check(cluster=cluster, api=api, now=at(0))
    assert outcome.state == "mismatch"
    assert outcome.problem == (
        "Kueue's configuration does not count the DRA devices the portal claims: add "
        "{name: nvidia.com/gpu, deviceClassNames: [gpu.nvidia.com]} (class h100) to resources.deviceClassMappings "
        "(feature gate DynamicResourceAllocation)."
    )
    mapped = (
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nresources:\n  deviceClassMappings:\n"
        "  - name: nvidia.com/gpu\n    deviceClassNames: [gpu.nvidia.com]\n"
    )
    emulator.put(kueue_config_map(mapped))
    assert kueue_config_check(cluster=cluster, api=api, now=at(1)).state == "matches"
