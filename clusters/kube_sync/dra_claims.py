"""DRA submission: on a cluster whose devices of a class come as ResourceSlices, each pod set with devices asks
for them through a ResourceClaimTemplate (``resource.k8s.io/v1``) instead of an extended resource.

The claim's request names the DeviceClass the devices belong to and selects them with a CEL expression built from
the class's constraints as the inventory saw those devices (driver, ``type``, product, memory, MIG profile,
minimum driver and CUDA versions). Pure functions of the portal's rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clusters.kube_sync.labels import JOB_ID_LABEL, managed_labels
from kernel.quantity import format_quantity
from pools.models import Device, ResourceClass
from queues.models import Job
from queues.pod_sets import PodSetShape

#: The name of the claim in the pod spec and in the template's request.
CLAIM_NAME = "devices"
#: (driver, device ``type`` attribute) → the DeviceClass its devices belong to: the classes NVIDIA's DRA driver
#: chart installs (tests/fixtures/reference/dra/examples/nvidia-dra-driver-gpu_v25.12.0_deviceclasses.rendered.yaml).
DEVICE_CLASSES = {("gpu.nvidia.com", "gpu"): "gpu.nvidia.com", ("gpu.nvidia.com", "mig"): "mig.nvidia.com"}


@dataclass(frozen=True)
class DraRequest:
    """What a pod of the class asks of the DRA scheduler: a DeviceClass and a CEL selector."""

    device_class: str
    driver: str
    selector: str


def _semver(version: str) -> str:
    """A dotted version as CEL's ``semver()`` wants it (major.minor.patch)."""
    parts = [p for p in version.split(".") if p][:3]
    return ".".join(parts + ["0"] * (3 - len(parts)))


def _quoted(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def dra_request(job: Job) -> DraRequest | None:
    """The DRA request of a job's devices, when its class's devices on the job's cluster come from ResourceSlices
    (None: they are extended resources of a device plugin)."""
    return class_dra_request(job.resource_class, cluster_id=job.cluster_id)


def class_dra_request(rc: ResourceClass, *, cluster_id: int | None) -> DraRequest | None:
    """The DRA request of a class's devices on a cluster where all of them are published as ResourceSlices (None
    where a device plugin advertises any of them: the pods then ask for the extended resource, as everywhere)."""
    if cluster_id is None:  # no cluster: no devices
        return None
    devices = list(
        Device.objects.filter(
            node__cluster_id=cluster_id,
            node__flavor__in=rc.flavors.all(),
            resource_name=rc.resource_name,
            gone_at__isnull=True,
        ).only("source", "dra_driver", "kind", "attributes", "memory_bytes", "mig_profile")
    )
    if not devices or any(d.source != Device.Source.DRA for d in devices):
        return None
    driver = devices[0].dra_driver
    kind = "mig" if devices[0].kind == Device.Kind.MIG else "gpu"
    attrs = f"device.attributes[{_quoted(driver)}]"
    terms = [f"device.driver == {_quoted(driver)}", f"{attrs}.type == {_quoted(kind)}"]
    products = sorted({str(d.attributes.get("productName", "")) for d in devices} - {""})
    if products:
        terms.append(f"{attrs}.productName in [{', '.join(_quoted(p) for p in products)}]")
    profiles = sorted({d.mig_profile for d in devices if d.mig_profile})
    if profiles:
        terms.append(f"{attrs}.profile in [{', '.join(_quoted(p) for p in profiles)}]")
    memories = [d.memory_bytes for d in devices if d.memory_bytes]
    if memories:
        least = format_quantity(min(memories), "memory")
        terms.append(f"device.capacity[{_quoted(driver)}].memory.compareTo(quantity({_quoted(least)})) >= 0")
    if rc.min_driver_version:
        version = _quoted(_semver(rc.min_driver_version))
        terms.append(f"{attrs}.driverVersion.compareTo(semver({version})) >= 0")
    if rc.min_cuda_version:
        version = _quoted(_semver(rc.min_cuda_version))
        terms.append(f"{attrs}.cudaDriverVersion.compareTo(semver({version})) >= 0")
    device_class = DEVICE_CLASSES.get((driver, kind), driver)
    return DraRequest(device_class=device_class, driver=driver, selector=" && ".join(terms))


def claim_template_name(job: Job, pod_set: PodSetShape) -> str:
    """The ResourceClaimTemplate of one pod set of a job."""
    return f"{job.k8s_name}-{pod_set.name}"


def claim_template(job: Job, pod_set: PodSetShape, request: DraRequest, owner: dict[str, Any]) -> dict[str, Any]:
    """The ResourceClaimTemplate giving each pod of the pod set its devices, owned by the job's object (it goes
    when the object is deleted)."""
    meta = owner.get("metadata") or {}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": claim_template_name(job, pod_set),
            "namespace": job.k8s_namespace or job.team.namespace,
            "labels": managed_labels(**{JOB_ID_LABEL: str(job.pk)}),
            "ownerReferences": [
                {
                    "apiVersion": owner["apiVersion"],
                    "kind": owner["kind"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": CLAIM_NAME,
                            "exactly": {
                                "deviceClassName": request.device_class,
                                "allocationMode": "ExactCount",
                                "count": pod_set.devices_per_pod,
                                "selectors": [{"cel": {"expression": request.selector}}],
                            },
                        }
                    ]
                }
            }
        },
    }
