"""The demo pool as real Kubernetes objects: Nodes with GFD / AMD labels, capacity and taints, plus flavors.

Deterministic (same output on every call) and imported through the same inventory service a real cluster
goes through. 88 physical accelerators, 184 device rows:

* 6 H100 80GB nodes x 8 GPUs, in two NVLink domains (``nvidia.com/gpu.clique``), one per rack, both racks in
  one block; ``h100-r2-03`` advertises 8 GPUs but only 7 allocatable (a degraded card for the repair demo);
* 2 A100 80GB nodes x 8 GPUs, MIG strategy mixed, ``all-balanced`` (per GPU 2x 1g.10gb, 1x 2g.20gb, 1x 3g.40gb);
* 2 L4 nodes x 4 GPUs, time-sliced 4 ways with ``renameByDefault`` (``nvidia.com/gpu.shared``);
* 2 AMD MI300X nodes x 8 GPUs (``amd.com/gpu``).

Label values follow the reference dumps (driver 580.126.09, CUDA 13.0, H100 memory 81559 MiB); the A100 MIG
memory figures, node CPU/memory and the AMD driver version are illustrative.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from pools.health.ingest import health_ingest_scrape, health_reconcile
from pools.inventory.service import ImportReport, inventory_import
from pools.models import Cluster, HealthSignal, ResourceFlavor, Topology

BLOCK, RACK, HOST = "topology.portal.example/block", "topology.portal.example/rack", "kubernetes.io/hostname"
TOPOLOGY = "block-rack-host"
CLIQUE = {"rack-1": "7b968a6d-c8aa-45e1-9e07-e1e51be99c31.1", "rack-2": "7b968a6d-c8aa-45e1-9e07-e1e51be99c31.2"}
SEEN = "2026-01-05T08:00:00Z"
NVIDIA_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
AMD_TAINT = {"key": "amd.com/gpu", "value": "present", "effect": "NoSchedule"}
DEGRADED_NODE = "h100-r2-03"


@dataclass(frozen=True)
class DemoPool:
    """Node objects as ``kubectl get nodes -o json`` prints them, and the flavor and topology definitions."""

    nodes: list[dict[str, Any]]
    flavors: list[dict[str, Any]]
    topologies: list[dict[str, Any]]


def _gfd(
    product: str,
    *,
    memory_mib: int,
    count: int,
    family: str,
    compute: tuple[int, int],
    strategy: str = "single",
    sharing: str = "none",
    replicas: int = 1,
    mig_config: str | None = None,
) -> dict[str, str]:
    """GPU feature discovery and GPU Operator labels of an NVIDIA node."""
    labels = {
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.memory": str(memory_mib),
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.family": family,
        "nvidia.com/gpu.compute.major": str(compute[0]),
        "nvidia.com/gpu.compute.minor": str(compute[1]),
        "nvidia.com/gpu.replicas": str(replicas),
        "nvidia.com/gpu.sharing-strategy": sharing,
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/cuda.driver-version.full": "580.126.09",
        "nvidia.com/cuda.driver-version.major": "580",
        "nvidia.com/cuda.driver-version.minor": "126",
        "nvidia.com/cuda.driver-version.revision": "09",
        "nvidia.com/cuda.runtime-version.full": "13.0",
        "nvidia.com/cuda.runtime-version.major": "13",
        "nvidia.com/cuda.runtime-version.minor": "0",
        "nvidia.com/mig.capable": "true" if mig_config else "false",
        "nvidia.com/mig.strategy": strategy,
        "nvidia.com/mps.capable": "false",
        "nvidia.com/gfd.timestamp": "1767600000",
    }
    if mig_config:
        labels |= {"nvidia.com/mig.config": mig_config, "nvidia.com/mig.config.state": "success"}
    return labels


def _node(
    name: str,
    labels: dict[str, str],
    devices: dict[str, str],
    *,
    allocatable: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    cpu: str = "224",
    memory: str = "2113531904Ki",
) -> dict[str, Any]:
    """A Node object: common labels, capacity = host resources + devices, a Ready condition."""
    capacity = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "3904652Mi", **devices}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                HOST: name,
                "node-role.kubernetes.io/worker": "",
                **labels,
            },
        },
        "spec": {"taints": list(taints or [])},
        "status": {
            "capacity": capacity,
            "allocatable": {**capacity, "cpu": str(int(cpu) - 2), **(allocatable or {})},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastTransitionTime": SEEN,
                }
            ],
        },
    }


def _h100_nodes() -> list[dict[str, Any]]:
    """Six 8x H100 nodes, three per rack; one NVLink domain per rack."""
    nodes = []
    for rack in ("rack-1", "rack-2"):
        for i in range(1, 4):
            name = f"h100-{rack.replace('rack-', 'r')}-{i:02d}"
            labels = _gfd("NVIDIA-H100-80GB-HBM3", memory_mib=81559, count=8, family="hopper", compute=(9, 0))
            labels |= {"nvidia.com/gpu.clique": CLIQUE[rack], BLOCK: "block-1", RACK: rack}
            labels |= {"nvidia.com/gpu.machine": "DGX-H100", "node.kubernetes.io/instance-type": "dgx-h100"}
            degraded = {"nvidia.com/gpu": "7"} if name == DEGRADED_NODE else None
            nodes.append(_node(name, labels, {"nvidia.com/gpu": "8"}, allocatable=degraded, taints=[NVIDIA_TAINT]))
    return nodes


def _a100_mig_nodes() -> list[dict[str, Any]]:
    """Two 8x A100 80GB nodes, MIG mixed, all-balanced."""
    profiles = {"1g.10gb": (2, 9728, 14), "2g.20gb": (1, 19968, 28), "3g.40gb": (1, 40192, 42)}
    nodes = []
    for i in (1, 2):
        labels = _gfd(
            "NVIDIA-A100-SXM4-80GB",
            memory_mib=81920,
            count=8,
            family="ampere",
            compute=(8, 0),
            strategy="mixed",
            mig_config="all-balanced",
        )
        labels |= {BLOCK: "block-2", RACK: "rack-3"}
        devices = {"nvidia.com/gpu": "0"}
        for profile, (per_gpu, memory_mib, sms) in profiles.items():
            prefix = f"nvidia.com/mig-{profile}"
            labels |= {
                f"{prefix}.count": str(per_gpu * 8),
                f"{prefix}.memory": str(memory_mib),
                f"{prefix}.multiprocessors": str(sms),
                f"{prefix}.product": f"NVIDIA-A100-SXM4-80GB-MIG-{profile}",
                f"{prefix}.replicas": "1",
                f"{prefix}.sharing-strategy": "none",
            }
            devices[prefix] = str(per_gpu * 8)
        nodes.append(_node(f"a100-mig-{i:02d}", labels, devices, taints=[NVIDIA_TAINT], cpu="128"))
    return nodes


def _l4_nodes() -> list[dict[str, Any]]:
    """Two 4x L4 nodes, time-sliced 4 ways, advertised as nvidia.com/gpu.shared (renameByDefault)."""
    nodes = []
    for i in (1, 2):
        labels = _gfd(
            "NVIDIA-L4",
            memory_mib=23034,
            count=4,
            family="ada-lovelace",
            compute=(8, 9),
            sharing="time-slicing",
            replicas=4,
        )
        labels |= {BLOCK: "block-2", RACK: "rack-4", "nvidia.com/device-plugin.config": "l4-time-sliced"}
        devices = {"nvidia.com/gpu": "0", "nvidia.com/gpu.shared": "16"}
        nodes.append(_node(f"l4-{i:02d}", labels, devices, taints=[NVIDIA_TAINT], cpu="64", memory="263981056Ki"))
    return nodes


def _mi300x_nodes() -> list[dict[str, Any]]:
    """Two 8x AMD Instinct MI300X nodes, labelled by the AMD node labeller."""
    labels = {
        "feature.node.kubernetes.io/pci-1002.present": "true",
        "amd.com/gpu.family": "AI",
        "amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM",
        "amd.com/gpu.vram": "192G",
        "amd.com/gpu.cu-count": "304",
        "amd.com/gpu.simd-count": "1216",
        "amd.com/gpu.device-id": "74a1",
        "amd.com/gpu.driver-version": "6.10.5",
        "amd.com/compute-memory-partition": "spx_nps1",
        BLOCK: "block-3",
        RACK: "rack-5",
    }
    return [_node(f"mi300x-{i:02d}", labels, {"amd.com/gpu": "8"}, taints=[AMD_TAINT], cpu="192") for i in (1, 2)]


def demo_pool() -> DemoPool:
    """The demo pool, built afresh (callers may change what they get)."""
    nodes = _h100_nodes() + _a100_mig_nodes() + _l4_nodes() + _mi300x_nodes()
    nvidia_taints = [dict(NVIDIA_TAINT)]
    flavors = [
        {
            "name": "h100",
            "display_name": "H100 80GB",
            "node_labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "node_taints": nvidia_taints,
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "topology": TOPOLOGY,
        },
        {
            "name": "a100-mig",
            "display_name": "A100 80GB (MIG)",
            "node_labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/mig.config": "all-balanced"},
            "node_taints": nvidia_taints,
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "topology": None,
        },
        {
            "name": "l4-shared",
            "display_name": "L4 (time-shared)",
            "node_labels": {"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.sharing-strategy": "time-slicing"},
            "node_taints": nvidia_taints,
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "topology": None,
        },
        {
            "name": "mi300x",
            "display_name": "MI300X 192GB",
            "node_labels": {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"},
            "node_taints": [dict(AMD_TAINT)],
            "tolerations": [{"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "topology": TOPOLOGY,
        },
    ]
    topologies = [{"name": TOPOLOGY, "levels": [BLOCK, RACK, HOST]}]
    return DemoPool(nodes=nodes, flavors=flavors, topologies=topologies)


@transaction.atomic
def demo_pool_install(*, cluster: Cluster, now: datetime | None = None) -> ImportReport:
    """Create or update the demo topology and flavors, then import the demo nodes into ``cluster`` (idempotent)."""
    pool = demo_pool()
    topologies = {}
    for spec in pool.topologies:
        topologies[spec["name"]] = _upsert(Topology, spec["name"], {"levels": spec["levels"]})
    for spec in pool.flavors:
        fields = {k: v for k, v in spec.items() if k not in ("name", "topology")}
        fields["topology"] = topologies.get(spec["topology"]) if spec["topology"] else None
        _upsert(ResourceFlavor, spec["name"], fields)
    return inventory_import(cluster=cluster, objects=pool.nodes, complete=True, now=now)


def _upsert(model, name: str, fields: dict[str, Any]):
    """Get-or-create by name, saving only the fields that differ (a second install writes nothing)."""
    obj = model.objects.filter(name=name).first()
    if obj is None:
        return model.objects.create(name=name, **fields)
    changed = [k for k, v in fields.items() if getattr(obj, k) != v]
    for k in changed:
        setattr(obj, k, fields[k])
    if changed:
        obj.save(update_fields=changed)
    return obj


# --- health ------------------------------------------------------------------------------------------------------

#: The GPU that runs hot in the demo (degraded: used last), as node and index.
HOT_GPU = ("h100-r1-02", 5)
DEMO_DRIVER = "580.126.09"


def demo_scrape(*, node: str, temperatures: dict[int, float], xids: dict[int, int] | None = None) -> str:
    """A dcgm-exporter scrape of one 8-GPU H100 node, in the exporter's label layout (HELP/TYPE, ``Hostname``)."""
    xids = xids or {}
    fields = (
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", lambda i: temperatures.get(i, 38)),
        ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", lambda i: xids.get(i, 0)),
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors.", lambda i: 0),
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", lambda i: 0),
    )
    lines = []
    for name, kind, text, value in fields:
        lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
        for i in sorted(set(range(8)) | set(temperatures) | set(xids)):
            card = uuid.uuid5(uuid.NAMESPACE_DNS, f"{node}.gpu{i}")
            labels = (
                f'gpu="{i}",UUID="GPU-{card}",pci_bus_id="00000000:{0x18 + 0x10 * i:02X}:00.0",device="nvidia{i}",'
                f'modelName="NVIDIA H100 80GB HBM3",Hostname="{node}",DCGM_FI_DRIVER_VERSION="{DEMO_DRIVER}"'
            )
            if name == "DCGM_FI_DEV_XID_ERRORS":
                code = int(value(i))
                labels += f',err_code="{code}",err_msg="{"No Error" if code == 0 else "XID " + str(code)}"'
            lines.append(f"{name}{{{labels}}} {value(i)}")
    return "\n".join(lines) + "\n"


def demo_health_seed(*, cluster: Cluster, now: datetime) -> list[str]:
    """The demo's health picture, through the product's own services: the card the device plugin reports
    unhealthy on ``h100-r2-03`` gets its repair ticket (drained, in repair), and one H100 runs hot for longer than
    the policy allows (degraded: used last). Idempotent: a second call changes nothing."""
    notes = [str(c) for c in health_reconcile(cluster=cluster, now=now).changes]
    node, index = HOT_GPU
    if HealthSignal.objects.filter(
        device__node__cluster=cluster, device__node__name=node, signal="temperature"
    ).exists():
        return notes  # scraped before: the demo's history is not written twice
    for seconds_ago in (600, 240, 0):
        report = health_ingest_scrape(
            text=demo_scrape(node=node, temperatures={index: 89}),
            now=now - timedelta(seconds=seconds_ago),
            cluster=cluster,
            origin="demo scrape",
        )
        notes += [str(c) for c in report.changes]
    return notes
