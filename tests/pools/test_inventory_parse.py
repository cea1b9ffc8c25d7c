"""Parsing Nodes and ResourceSlices into records, against every reference sample (no database)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from pools.inventory.device_plugin import mig_units_per_card
from pools.inventory.parse import load_file, load_text, parse_inventory
from pools.inventory.records import InventoryError, is_source_reason
from pools.inventory.versions import compare_versions, version_at_least, version_tuple
from tests.pools.fixtures.builders import excerpt_cases, excerpt_node, illustrative_mig_slice, label_dump_node

FIXTURES = Path(__file__).parent / "fixtures"
VKS = "dra/examples/vks_resourceslices_gpu.nvidia.com_compute-domain_v25.12.0.yaml"
OPENSHIFT = "dra/examples/openshift_resourceslice_t4_condensed.yaml"
MiB = 2**20


def units(inv, resource=None):
    """Schedulable units (optionally of one resource)."""
    return [d for d in inv.devices if d.resource_name and (resource is None or d.resource_name == resource)]


def case(reference, title_start):
    """One excerpt case by the start of its title."""
    return next(c for c in excerpt_cases(reference) if str(c.get("case", "")).startswith(title_start))


# --- device plugin: full cards and health ---------------------------------------------------------------------


def test_xid_excerpt_as_printed_gives_seven_healthy_cards(reference):
    inv = parse_inventory([excerpt_node(case(reference, "device-plugin marked"))])
    gpus = units(inv, "nvidia.com/gpu")
    assert len(gpus) == 7
    assert all(d.health == "healthy" for d in gpus)  # no gpu.count label in the excerpt: nothing to compare with


def test_xid_excerpt_with_gpu_count_marks_the_dropped_card(reference):
    """The doc's note: capacity itself dropped to 7; gpu.count (8) says a card is missing."""
    inv = parse_inventory([excerpt_node(case(reference, "device-plugin marked"), labels={"nvidia.com/gpu.count": "8"})])
    gpus = units(inv, "nvidia.com/gpu")
    assert [d.key for d in gpus] == [f"nvidia.com/gpu-{i}" for i in range(8)]
    assert [d.health for d in gpus] == ["healthy"] * 7 + ["unhealthy"]
    assert gpus[7].health_reason.startswith("node capacity 7 < 8 expected from nvidia.com/gpu.count=8")


def test_xid_on_current_kubelet_capacity_8_allocatable_7(reference):
    node = excerpt_node(case(reference, "device-plugin marked"))
    node["status"]["capacity"]["nvidia.com/gpu"] = "8"
    inv = parse_inventory([node])
    gpus = units(inv, "nvidia.com/gpu")
    assert len(gpus) == 8
    assert gpus[7].health == "unhealthy"
    assert gpus[7].health_reason == "node allocatable 7 < capacity 8 (device plugin marked devices unhealthy)"
    assert is_source_reason(gpus[7].health_reason)
    assert all(d.health == "healthy" for d in gpus[:7])


def test_dgx_mig_disabled_excerpt_eight_full_cards(reference):
    inv = parse_inventory([excerpt_node(case(reference, "DGX H100 (8 GPUs), MIG disabled"))])
    assert [(d.kind, d.index) for d in units(inv)] == [("full", i) for i in range(8)]


def test_label_dump_mig_single_all_disabled_is_one_full_h100(reference):
    node = label_dump_node(
        reference, "gpu-operator-docs_mig-node-labels.json", name="s4124-0073", capacity={"nvidia.com/gpu": "1"}
    )
    inv = parse_inventory([node])
    (gpu,) = inv.devices
    assert (gpu.key, gpu.kind, gpu.resource_name) == ("nvidia.com/gpu-0", "full", "nvidia.com/gpu")
    assert gpu.product == "NVIDIA-H100-80GB-HBM3"
    assert gpu.memory_bytes == 81559 * MiB
    assert (gpu.architecture, gpu.driver_version, gpu.cuda_version) == ("Hopper", "550.54.15", "12.4")
    assert gpu.attributes["computeCapability"] == "9.0"


def test_vgpu_label_dump_is_a_full_grid_card(reference):
    node = label_dump_node(
        reference, "vks_grid-a100-40c_vgpu_node-labels.json", name="vgpu-node", capacity={"nvidia.com/gpu": "1"}
    )
    (gpu,) = parse_inventory([node]).devices
    assert (gpu.product, gpu.kind, gpu.memory_bytes) == ("GRID-A100-40C", "full", 40960 * MiB)
    assert gpu.driver_version == "580.126.09"
    assert gpu.attributes["vgpu"] == "true"
    assert gpu.attributes["vgpuHostDriverVersion"] == "580.126.08"


# --- MIG -----------------------------------------------------------------------------------------------------


def test_composite_mixed_node_one_partitioned_card_four_mig_units(reference):
    composite = excerpt_cases(reference)[-1]
    assert composite["kind"] == "Node"
    inv = parse_inventory([composite])
    card = next(d for d in inv.devices if not d.resource_name)
    assert (card.key, card.kind, card.product) == ("gpu-0", "full", "NVIDIA-H100-80GB-HBM3")
    migs = {d.key: d for d in units(inv)}
    assert sorted(migs) == ["gpu-0/mig-1g.10gb-0", "gpu-0/mig-1g.10gb-1", "gpu-0/mig-2g.20gb-0", "gpu-0/mig-3g.40gb-0"]
    one = migs["gpu-0/mig-1g.10gb-1"]
    assert (one.kind, one.resource_name, one.parent_key, one.mig_profile) == (
        "mig",
        "nvidia.com/mig-1g.10gb",
        "gpu-0",
        "1g.10gb",
    )
    assert one.memory_bytes == 9984 * MiB
    assert one.product == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    assert migs["gpu-0/mig-3g.40gb-0"].memory_bytes == 40320 * MiB


def test_mixed_label_dump_matches_the_composite(reference):
    node = label_dump_node(
        reference,
        "gpu-operator-docs_mig-mixed-node-labels.json",
        name="s4124-0073",
        capacity={
            "nvidia.com/gpu": "0",
            "nvidia.com/mig-1g.10gb": "2",
            "nvidia.com/mig-2g.20gb": "1",
            "nvidia.com/mig-3g.40gb": "1",
        },
    )
    composite = parse_inventory([excerpt_cases(reference)[-1]])
    assert [d.key for d in parse_inventory([node]).devices] == [d.key for d in composite.devices]


def test_dgx_mixed_excerpt_without_gpu_count_warns_and_keeps_units(reference):
    inv = parse_inventory([excerpt_node(case(reference, "DGX H100 (8 GPUs), mig strategy mixed"))])
    assert Counter(d.resource_name for d in units(inv)) == {
        "nvidia.com/mig-1g.10gb": 16,
        "nvidia.com/mig-2g.20gb": 8,
        "nvidia.com/mig-3g.40gb": 8,
    }
    assert all(d.parent_key is None for d in inv.devices)
    assert any("no nvidia.com/gpu.count" in w for w in inv.warnings)


def test_dgx_mixed_with_gpu_count_spreads_units_over_eight_cards(reference):
    node = excerpt_node(case(reference, "DGX H100 (8 GPUs), mig strategy mixed"), labels={"nvidia.com/gpu.count": "8"})
    inv = parse_inventory([node])
    cards = [d for d in inv.devices if not d.resource_name]
    assert [c.key for c in cards] == [f"gpu-{i}" for i in range(8)]
    per_card = Counter((d.parent_key, d.mig_profile) for d in units(inv))
    assert set(per_card.values()) == {2, 1}
    assert per_card[("gpu-5", "1g.10gb")] == 2
    assert per_card[("gpu-5", "3g.40gb")] == 1


def test_dgx_single_excerpt_ignores_lingering_zero_profiles(reference):
    """16 MIG devices advertised as nvidia.com/gpu; the per-profile resources at 0 are ignored."""
    inv = parse_inventory([excerpt_node(case(reference, "DGX H100 (8 GPUs) re-configured"))])
    gpus = units(inv)
    assert len(gpus) == 16
    assert {(d.resource_name, d.kind, d.mig_profile) for d in gpus} == {("nvidia.com/gpu", "mig", "3g.40gb")}
    assert any("cannot tell how many 3g.40gb" in w for w in inv.warnings)  # no product label: no cards


def test_dgx_single_with_product_label_finds_eight_cards(reference):
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb", "nvidia.com/mig.strategy": "single"}
    inv = parse_inventory([excerpt_node(case(reference, "DGX H100 (8 GPUs) re-configured"), labels=labels)])
    cards = [d for d in inv.devices if not d.resource_name]
    assert len(cards) == 8
    assert cards[0].product == "NVIDIA-H100-80GB-HBM3"
    assert [d.key for d in units(inv)][:3] == ["gpu-0/mig-3g.40gb-0", "gpu-0/mig-3g.40gb-1", "gpu-1/mig-3g.40gb-0"]


@pytest.mark.parametrize(
    ("profile", "product", "expected"),
    [
        ("1g.10gb", "NVIDIA-H100-80GB-HBM3", 7),
        ("1g.20gb", "NVIDIA-H100-80GB-HBM3", 4),
        ("2g.20gb", "NVIDIA-A100-SXM4-80GB", 3),
        ("3g.40gb", "NVIDIA-H100-80GB-HBM3", 2),
        ("7g.80gb", "NVIDIA-H100-80GB-HBM3", 1),
        ("1g.5gb", "NVIDIA-A100-SXM4-40GB", 7),
        ("1g.10gb", "NVIDIA-A100-SXM4-40GB", 4),
        ("1g.12gb", "NVIDIA-GH200-96GB-HBM3", 7),
        ("1g.6gb", "NVIDIA-A30", 4),
        ("3g.40gb", "mystery", None),
    ],
)
def test_mig_units_per_card(profile, product, expected):
    assert mig_units_per_card(profile, product) == expected


# --- time-slicing --------------------------------------------------------------------------------------------


def test_time_slicing_same_name(reference):
    inv = parse_inventory([excerpt_node(case(reference, "time-slicing, renameByDefault=false"), name="t4")])
    cards = [d for d in inv.devices if not d.resource_name]
    replicas = units(inv)
    assert [c.key for c in cards] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert cards[0].product == "Tesla-T4"  # the "-SHARED" suffix is a GFD marker, not the product
    assert len(replicas) == 16
    assert {(d.resource_name, d.kind) for d in replicas} == {("nvidia.com/gpu", "shared")}
    assert [(d.key, d.replica_index, d.index) for d in replicas[4:6]] == [
        ("gpu-1/replica-0", 0, 4),
        ("gpu-1/replica-1", 1, 5),
    ]


def test_time_slicing_rename_by_default(reference):
    inv = parse_inventory([excerpt_node(case(reference, "time-slicing, renameByDefault=true"), name="t4")])
    assert Counter(d.resource_name for d in inv.devices) == {"": 4, "nvidia.com/gpu.shared": 16}
    assert {d.product for d in inv.devices} == {"Tesla-T4"}


def test_time_slicing_unhealthy_card_takes_all_its_replicas(reference):
    node = excerpt_node(case(reference, "time-slicing, renameByDefault=true"), name="t4")
    node["status"]["allocatable"]["nvidia.com/gpu.shared"] = "12"
    inv = parse_inventory([node])
    bad = sorted(d.key for d in inv.devices if d.health == "unhealthy")
    assert bad == ["gpu-3", "gpu-3/replica-0", "gpu-3/replica-1", "gpu-3/replica-2", "gpu-3/replica-3"]
    card = next(d for d in inv.devices if d.key == "gpu-3")
    assert card.health_reason.startswith("every unit of this card is unhealthy (node allocatable 12 < capacity 16")


# --- DRA -----------------------------------------------------------------------------------------------------


def test_vks_list_skips_compute_domain(reference):
    inv = parse_inventory(load_file(reference / VKS))
    assert len(inv.nodes) == 4
    assert not any(n.observed for n in inv.nodes)
    assert inv.ignored == {"compute-domain.nvidia.com device (IMEX channels and daemons, not GPUs)": 8}
    assert len(inv.devices) == 4
    big = next(d for d in inv.devices if d.product == "GRID A100-40C")
    assert big.key == big.uuid == "GPU-b65409f1-9131-4932-bbf9-065400000000"
    assert (big.resource_name, big.kind, big.source, big.index) == ("nvidia.com/gpu", "full", "dra", 0)
    assert (big.dra_driver, big.dra_device) == ("gpu.nvidia.com", "gpu-0")
    assert big.dra_pool == "test-ai-0-node-pool-40c-kn48j-7n6h9-gvhpn"
    assert big.memory_bytes == 40 * 2**30
    assert (big.driver_version, big.cuda_version, big.architecture) == ("580.126.9", "13.0.0", "Ampere")
    assert big.attributes["brand"] == "NvidiaVCS"


def test_dra_driver_version_compares_with_gfd_numerically(reference):
    (dra,) = [d for d in parse_inventory(load_file(reference / VKS)).devices if d.product == "GRID A100-40C"]
    gfd = json.loads((reference / "nvidia/examples/vks_grid-a100-40c_vgpu_node-labels.json").read_text())
    assert dra.driver_version != gfd["nvidia.com/cuda.driver-version.full"]
    assert compare_versions(dra.driver_version, gfd["nvidia.com/cuda.driver-version.full"]) == 0
    assert version_at_least(dra.cuda_version, "13.0")


def test_openshift_t4_slice(reference):
    inv = parse_inventory(load_file(reference / OPENSHIFT))
    assert [(d.dra_device, d.index, d.product, d.memory_bytes) for d in inv.devices] == [
        ("gpu-0", 0, "Tesla T4", 15 * 2**30),
        ("gpu-1", 1, "Tesla T4", 15 * 2**30),
    ]
    assert inv.devices[0].driver_version == "580.126.20"


def test_illustrative_dra_mig_with_parent(reference):
    inv = parse_inventory([illustrative_mig_slice(reference)])
    gpu, mig = inv.devices
    assert (gpu.key, gpu.resource_name, gpu.kind) == ("GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4", "", "full")
    assert (mig.key, mig.parent_key, mig.resource_name, mig.kind, mig.mig_profile) == (
        "MIG-9d14fb21-4ae1-546f-a636-011582899c39",
        gpu.key,
        "nvidia.com/mig-1g.10gb",
        "mig",
        "1g.10gb",
    )
    assert mig.memory_bytes == 9984 * MiB
    assert mig.product == "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
    assert mig.attributes["capacity.multiprocessors"] == "16"


def test_illustrative_dra_mig_without_parent_gets_a_stand_in(reference):
    inv = parse_inventory([illustrative_mig_slice(reference, with_parent=False)])
    parent, mig = inv.devices
    assert parent.key == mig.parent_key == "GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4"
    assert (parent.resource_name, parent.product, parent.dra_device) == ("", "NVIDIA H100 80GB HBM3", "")


@pytest.mark.parametrize(
    ("effect", "health"), [("NoSchedule", "unhealthy"), ("NoExecute", "unhealthy"), ("None", "healthy")]
)
def test_dra_device_taint(reference, effect, health):
    taint = {"key": "gpu.nvidia.com/xid", "value": "48", "effect": effect}
    inv = parse_inventory([illustrative_mig_slice(reference, taints=[taint])])
    mig = inv.devices[1]
    assert mig.health == health
    assert mig.taints == [taint]
    if health == "unhealthy":
        assert mig.health_reason == f"DRA device taint gpu.nvidia.com/xid=48:{effect}"
        assert inv.devices[0].health == "unhealthy"  # its only unit is unhealthy


def test_dra_v1beta1_basic_shape(reference):
    obj = load_file(reference / OPENSHIFT)[0].obj
    obj["apiVersion"] = "resource.k8s.io/v1beta1"
    obj["spec"]["devices"] = [
        {"name": d["name"], "basic": {k: d[k] for k in ("attributes", "capacity")}} for d in obj["spec"]["devices"]
    ]
    assert len(parse_inventory([obj]).devices) == 2


def test_dra_older_pool_generation_is_ignored(reference):
    new = load_file(reference / OPENSHIFT)[0].obj
    old = json.loads(json.dumps(new))
    old["metadata"]["name"] += "-old"
    old["spec"]["pool"]["generation"] = 0
    inv = parse_inventory([old, new])
    assert len(inv.devices) == 2
    assert inv.ignored == {"ResourceSlice of an older pool generation": 1}


def test_device_taint_rule_applies_by_device_name(reference):
    rule = {
        "apiVersion": "resource.k8s.io/v1alpha3",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "gpu-1-broken"},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "device": "gpu-1"},
            "taint": {"key": "example.com/broken", "effect": "NoSchedule"},
        },
    }
    inv = parse_inventory([*load_file(reference / OPENSHIFT), rule])
    assert [d.health for d in inv.devices] == ["healthy", "unhealthy"]
    assert inv.devices[1].health_reason == "DeviceTaintRule gpu-1-broken: example.com/broken:NoSchedule"


def test_dra_wins_over_device_plugin_on_the_same_node(reference):
    """A node with the vGPU labels and nvidia.com/gpu capacity, and its VKS slice: counted once, from DRA."""
    name = "test-ai-0-node-pool-40c-kn48j-7n6h9-gvhpn"
    node = label_dump_node(
        reference, "vks_grid-a100-40c_vgpu_node-labels.json", name=name, capacity={"nvidia.com/gpu": "1"}
    )
    inv = parse_inventory([node, *load_file(reference / VKS)])
    mine = [d for d in inv.devices if d.node == name]
    assert [(d.source, d.uuid) for d in mine] == [("dra", "GPU-b65409f1-9131-4932-bbf9-065400000000")]
    assert any("DRA wins" in w for w in inv.warnings)
    assert next(n for n in inv.nodes if n.name == name).observed


# --- other vendors -------------------------------------------------------------------------------------------


def test_amd_fixture():
    inv = parse_inventory(load_file(FIXTURES / "amd-mi300x-node.yaml"))
    by_node = inv.devices_by_node()
    mi300x = by_node["mi300x-01"]
    assert [d.key for d in mi300x] == [f"amd.com/gpu-{i}" for i in range(8)]
    gpu = mi300x[0]
    assert (gpu.vendor, gpu.product, gpu.architecture, gpu.driver_version) == (
        "amd",
        "AMD_Instinct_MI300X_OAM",
        "CDNA 3",
        "6.10.5",
    )
    assert gpu.memory_bytes == 192 * 2**30
    assert gpu.attributes["cu-count"] == "304"
    cpx = by_node["mi300x-cpx-01"]
    assert Counter((d.resource_name, d.kind) for d in cpx) == {("", "full"): 8, ("amd.com/cpx_nps4", "mig"): 64}
    assert sorted(d.key for d in cpx if d.health == "unhealthy") == ["gpu-7/cpx_nps4-6", "gpu-7/cpx_nps4-7"]
    legacy = by_node["mi210-legacy-01"][0]
    assert (legacy.product, legacy.memory_bytes, legacy.attributes["family"]) == ("AMD GPU 740f", 64 * 2**30, "AI")
    assert not next(n for n in inv.nodes if n.name == "mi210-legacy-01").ready


def test_other_vendors_fixture():
    inv = parse_inventory(load_file(FIXTURES / "other-vendors.yaml"))
    summary = Counter((d.node, d.vendor, d.resource_name, d.kind, d.product) for d in inv.devices)
    assert summary == {
        ("gaudi-01", "habana", "habana.ai/gaudi", "full", "Intel Gaudi"): 8,
        ("trn1-01", "aws-neuron", "aws.amazon.com/neuron", "full", "Trainium"): 16,
        ("trn1-01", "aws-neuron", "aws.amazon.com/neuroncore", "mig", "Trainium"): 32,
        ("gke-tpu-01", "google-tpu", "google.com/tpu", "full", "tpu-v5-lite-podslice"): 4,
        ("intel-flex-01", "intel", "gpu.intel.com/i915", "full", "Flex_170"): 1,
        ("intel-max-01", "intel", "gpu.intel.com/xe", "full", "Max_1550"): 2,
        ("gke-t4-01", "nvidia", "nvidia.com/gpu", "full", "nvidia-tesla-t4"): 1,
    }
    core = next(d for d in inv.devices if d.key == "aws.amazon.com/neuron-3/neuroncore-1")
    assert core.parent_key == "aws.amazon.com/neuron-3"
    assert next(d for d in inv.devices if d.vendor == "google-tpu").attributes == {"topology": "2x4"}
    assert all(d.health == "healthy" for d in inv.devices)  # nvidia.com/gpu=present:NoSchedule is no health signal


# --- nodes: taints, conditions -------------------------------------------------------------------------------


def _node(**status):
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "labels": {"nvidia.com/gpu.count": "2"}},
        "spec": status.pop("spec", {}),
        "status": {"capacity": {"nvidia.com/gpu": "2"}, "allocatable": {"nvidia.com/gpu": "2"}, **status},
    }


def test_health_taint_makes_devices_unhealthy():
    node = _node(spec={"taints": [{"key": "nvidia.com/gpu-xid-error", "value": "true", "effect": "NoSchedule"}]})
    inv = parse_inventory([node])
    assert {(d.health, d.health_reason) for d in inv.devices} == {
        ("unhealthy", "node taint nvidia.com/gpu-xid-error=true:NoSchedule")
    }


def test_cordon_and_not_ready_are_node_facts_not_device_health():
    node = _node(
        spec={"unschedulable": True, "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]},
        conditions=[{"type": "Ready", "status": "False", "reason": "KubeletNotReady", "lastHeartbeatTime": "x"}],
    )
    inv = parse_inventory([node])
    (parsed,) = inv.nodes
    assert parsed.unschedulable
    assert not parsed.ready
    assert parsed.conditions == [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]
    assert {d.health for d in inv.devices} == {"healthy"}


def test_typed_node_list_and_json():
    text = json.dumps({"kind": "NodeList", "apiVersion": "v1", "items": [{"metadata": {"name": "a"}}]})
    inv = parse_inventory(load_text(text, json_only=True))
    assert [n.name for n in inv.nodes] == ["a"]


def test_other_kinds_are_counted_as_ignored(reference):
    docs = load_file(reference / "dra/examples/nvidia-dra-driver-gpu_v25.12.0_deviceclasses.rendered.yaml")
    assert parse_inventory(docs).ignored == {"DeviceClass": 5}


# --- validation ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda n: n["status"]["capacity"].update({"nvidia.com/gpu": "eight"}),
            'Node "n1": status.capacity["nvidia.com/gpu"]: invalid quantity "eight"',
        ),
        (
            lambda n: n["status"]["allocatable"].update({"memory": "12 GB"}),
            'Node "n1": status.allocatable["memory"]: invalid quantity "12 GB"',
        ),
        (
            lambda n: n["metadata"]["labels"].update({"nvidia.com/gpu.count": "two"}),
            'Node "n1": metadata.labels["nvidia.com/gpu.count"]: not an integer: \'two\'',
        ),
        (lambda n: n["metadata"].pop("name"), "object 1 (Node): metadata.name: missing"),
        (
            lambda n: n["spec"].update({"taints": [{"key": "x", "effect": "Sometimes"}]}),
            'Node "n1": spec.taints[0].effect',
        ),
        (lambda n: n["spec"].update({"unschedulable": "yes"}), 'Node "n1": spec.unschedulable'),
        (lambda n: n.pop("kind"), "object 1: kind: missing"),
    ],
)
def test_malformed_node_names_object_and_field(mutate, message):
    node = _node()
    mutate(node)
    with pytest.raises(InventoryError) as exc:
        parse_inventory([node])
    assert str(exc.value).startswith(message)


def test_malformed_slice_names_the_field(reference):
    obj = load_file(reference / OPENSHIFT)[0].obj
    obj["spec"]["devices"][1]["capacity"]["memory"] = {"value": "lots"}
    with pytest.raises(InventoryError) as exc:
        parse_inventory([obj])
    assert str(exc.value) == (
        'ResourceSlice "harpatil4220c-g9kfm-gpu-c-rd8r8-gpu.nvidia.com-wvrlc": '
        "spec.devices[1].capacity.memory.value: invalid quantity 'lots'"
    )


def test_bad_attribute_type_and_document_position_in_files(tmp_path):
    path = tmp_path / "slices.yaml"
    path.write_text(
        "---\nkind: ResourceSlice\napiVersion: resource.k8s.io/v1\nmetadata: {name: s}\n"
        "spec: {driver: gpu.nvidia.com, nodeName: n, devices: [{name: gpu-0, attributes: {type: {text: gpu}}}]}\n"
    )
    with pytest.raises(InventoryError, match=r'slices.yaml: ResourceSlice "s": spec.devices\[0\].attributes.type'):
        parse_inventory(load_file(path))
    path.write_text("---\nkind: Node\nmetadata: {name: a}\n---\nkind: Node\nmetadata: {labels: {}}\n")
    with pytest.raises(InventoryError, match=r"slices.yaml: document 2 \(Node\): metadata.name: missing"):
        parse_inventory(load_file(path))


def test_duplicate_node_and_invalid_yaml(tmp_path):
    with pytest.raises(InventoryError, match="the same node appears twice"):
        parse_inventory([_node(), _node()])
    path = tmp_path / "x.yaml"
    path.write_text("kind: Node\n  bad: [indent\n")
    with pytest.raises(InventoryError, match=r"x\.yaml: not valid YAML"):
        load_file(path)


def test_version_helpers():
    assert version_tuple("580.126.09") == version_tuple("580.126.9") == (580, 126, 9)
    assert compare_versions("13.0", "13.0.0") == 0
    assert compare_versions("550.54.15", "580.126.9") == -1
    assert version_at_least("580.126.20", "580.126.9")
    assert not version_at_least("", "1")
