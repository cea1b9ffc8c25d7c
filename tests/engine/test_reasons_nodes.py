"""Wait reasons about nodes with worked examples: health seen from the node (issue 16 item 6) and fragmentation
with the numbers that matter (item 7).

Each test builds the cluster the sentence describes, runs the engine to a settled state and checks the code,
the exact sentence and the figures in ``details``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from queues.engine import ResourceFlavor, Taint, Topology, TopologyRequest, settle
from queues.engine.model import DEVICE_PLUGIN
from queues.engine.placement import NodePool
from queues.engine.reasons_nodes import free_blocks, level_word
from queues.engine.scenario import load_scenario, run_scenario

from .builders import cq, node, state, wl

SCENARIOS = Path(__file__).resolve().parents[2] / "docs" / "scenarios"
A100 = ResourceFlavor("a100", node_labels={"gpu": "a100"}, display_name="A100")
TOPO = Topology("dc", ("cloud/block", "cloud/rack", "kubernetes.io/hostname"))
A100_TAS = ResourceFlavor("a100", node_labels={"gpu": "a100"}, topology_name="dc", display_name="A100")


def a100_nodes(**overrides):
    """Four 8-GPU A100 nodes n0..n3 (racks r0: n0, n1 and r1: n2, n3) and node-17; overrides per node name."""
    out = []
    for i, name in enumerate(["n0", "n1", "n2", "n3", "node-17"]):
        extra = dict(overrides.get(name, {}))
        labels = {"gpu": "a100", "cloud/block": "b1", "cloud/rack": f"r{min(i, 3) // 2}", **extra.pop("labels", {})}
        out.append(node(name, 8, labels=labels, **extra))
    return out


def busy(used: dict[str, int]):
    """One admitted single-pod workload per node, using that many GPUs."""
    return [wl(f"a/run-{name}", n, admitted="a", flavor="a100", nodes=[name]) for name, n in used.items() if n]


def pending(reason_of, key="a/j"):
    """The settled wait reason of one pending workload."""
    return settle(reason_of, 0).pending[key]


QUEUE = cq("a", {"a100": {"nvidia.com/gpu": 64}})
FULL = {"n0": 8, "n1": 8, "n2": 8, "n3": 8}


# --------------------------------------------------------------------------------------------- health


def test_device_plugin_gap_is_health_blocked_naming_node_and_numbers():
    """The issue's example: 6 A100s on node-17 marked unhealthy (capacity 8, allocatable 2); every other A100 is
    busy. An 8-GPU job would fit on node-17 were they back: health_blocked, not class_exhausted."""
    nodes = a100_nodes(**{"node-17": {"allocatable": 2}})
    s = state([QUEUE], [*busy(FULL), wl("a/j", 8, created=1)], flavors=[A100], nodes=nodes)
    reason = pending(s)
    assert reason.code == "health_blocked"
    assert reason.message == (
        "The capacity this job needs exists, but part of it is out for health: 6 A100 GPUs on node-17 are marked "
        "unhealthy by the device plugin (capacity 8, allocatable 2). Free now on healthy devices: 2, needed: 8; "
        "once repaired this job can start."
    )
    assert reason.details["unhealthyNodes"] == ["node-17"]
    assert reason.details["excludedForHealth"] == 6
    assert reason.details["healthNodes"] == [
        {"node": "node-17", "units": 6, "cause": "device_plugin", "capacity": 8, "allocatable": 2}
    ]


def test_same_cluster_without_the_gap_is_class_exhausted():
    """The control: node-17 healthy but busy, nothing out for health: every device of the class is in use."""
    s = state([QUEUE], [*busy({**FULL, "node-17": 6}), wl("a/j", 8, created=1)], flavors=[A100], nodes=a100_nodes())
    reason = pending(s)
    assert reason.code == "class_exhausted"
    assert "unhealthyNodes" not in reason.details


def test_gap_the_portal_made_names_its_source_and_reason():
    """Devices the portal excluded (DCGM, a ticket): allocatable lowered by the portal, its note quoted."""
    note = "2 device(s) excluded for health: nvidia.com/gpu-6: XID 79; nvidia.com/gpu-7: XID 79"
    nodes = a100_nodes(**{"node-17": {"allocatable": 6, "health": note}})
    nodes[-1] = _with(nodes[-1], health_gap_by="the portal's health checks")
    s = state([QUEUE], [*busy(FULL), wl("a/j", 8, created=1)], flavors=[A100], nodes=nodes)
    reason = pending(s)
    assert reason.code == "health_blocked"
    assert (
        "2 A100 GPUs on node-17 are marked unhealthy by the portal's health checks (capacity 8, allocatable 6): " + note
        in reason.message
    )
    assert reason.details["healthNodes"][0]["cause"] == "portal"


def test_gap_the_device_plugin_made_in_portal_records_drops_the_repeated_note():
    """From the portal's device records with only device-plugin reasons: the numbers say it all."""
    note = "6 device(s) excluded for health: nvidia.com/gpu-2: node allocatable 2 < capacity 8 (device plugin ...)"
    nodes = a100_nodes(**{"node-17": {"allocatable": 2, "health": note}})
    nodes[-1] = _with(nodes[-1], health_gap_by=DEVICE_PLUGIN)
    s = state([QUEUE], [*busy(FULL), wl("a/j", 8, created=1)], flavors=[A100], nodes=nodes)
    reason = pending(s)
    assert "6 A100 GPUs on node-17 are marked unhealthy by the device plugin (capacity 8, allocatable 2)." in (
        reason.message
    )
    assert "excluded for health:" not in reason.message


def test_taint_not_ready_and_health_cordon_each_named_with_their_cause():
    """NVSentinel-style taint on n0, n1 NotReady, n2 cordoned for health, n3 busy, node-17 busy: 8 GPUs on one node."""
    nodes = a100_nodes(
        n0={"taints": [Taint("nvidia.com/gpu-xid-error", "48", "NoSchedule")], "health": "XID 48 (DBE)"},
        n1={"ready": False},
        n2={"unschedulable": True, "health": "repair ticket 12 open"},
    )
    s = state([QUEUE], [*busy({"n3": 8, "node-17": 8}), wl("a/j", 8, created=1)], flavors=[A100], nodes=nodes)
    reason = pending(s)
    assert reason.code == "health_blocked"
    assert reason.message == (
        "The capacity this job needs exists, but part of it is out for health: "
        "8 A100 GPUs on n0 are held back by the health taint nvidia.com/gpu-xid-error=48:NoSchedule: XID 48 (DBE); "
        "8 A100 GPUs on n1 are on a node that is NotReady; "
        "8 A100 GPUs on n2 are on a node cordoned for health: repair ticket 12 open. "
        "Free now on healthy devices: 0, needed: 8; once repaired this job can start."
    )
    assert [n["cause"] for n in reason.details["healthNodes"]] == ["taint", "not_ready", "cordoned"]


def test_sick_node_the_job_may_not_use_is_not_blamed():
    """node-17's gap is on a node outside the job's selector: waiting for its repair would not help."""
    nodes = a100_nodes(**{"node-17": {"allocatable": 2, "labels": {"zone": "b"}}})
    nodes = [_with(n, labels={**n.labels, "zone": n.labels.get("zone", "a")}) for n in nodes]
    job = wl("a/j", 8, created=1, selector={"zone": "a"})
    s = state([QUEUE], [*busy(FULL), job], flavors=[A100], nodes=nodes)
    assert pending(s).code == "class_exhausted"


def test_one_unit_reads_singular():
    nodes = a100_nodes(**{"node-17": {"allocatable": 7}})
    s = state([QUEUE], [*busy(FULL), wl("a/j", 8, created=1)], flavors=[A100], nodes=nodes)
    assert "1 A100 GPU on node-17 is marked unhealthy by the device plugin (capacity 8, allocatable 7)" in (
        pending(s).message
    )


def test_scenario_node_with_allocatable_below_capacity_is_health_blocked_naming_it():
    """docs/scenarios/device-plugin-health.yaml: a real Node object whose allocatable the device plugin lowered."""
    document = run_scenario(load_scenario(SCENARIOS / "device-plugin-health.yaml"))
    by_name = {w["name"]: w for w in document["workloads"]}
    reason = by_name["ml/train-6x"]["reason"]
    assert reason["code"] == "health_blocked"
    assert (
        "6 A100 GPUs on node-17 are marked unhealthy by the device plugin (capacity 8, allocatable 2)"
        in (reason["message"])
    )
    assert by_name["ml/probe-2x"]["state"] == "admitted"
    assert by_name["ml/probe-2x"]["podSets"][0]["nodes"] == ["node-17"]


# --------------------------------------------------------------------------------------------- fragmentation


def test_fragmented_gives_total_need_and_largest_block_on_one_node():
    """The issue's example: 20 A100s free (6 + 6 + 4 + 4), the job needs 16 as 2 pods of 8, no node has 8 free."""
    used = {"n0": 2, "n1": 2, "n2": 4, "n3": 4, "node-17": 8}
    s = state([QUEUE], [*busy(used), wl("a/j", 8, count=2, created=1)], flavors=[A100], nodes=a100_nodes())
    reason = pending(s)
    assert reason.code == "topology_fragmented"
    assert reason.message == (
        "20 A100 GPUs are free in total, enough for this job's 16, but the largest free block on one node is 6: "
        "there is room for 0 of its 2 pod(s) of 8."
    )
    assert (reason.details["largestFreeBlock"], reason.details["largestFreeNode"]) == (6, "n0")
    assert (reason.details["free"], reason.details["needed"]) == (20, 16)


def test_fragmented_in_required_rack_names_the_rack_with_most_free():
    """3 pods of 2 in one rack: r0 has 3 + 2 = 5 free (room for 2 pods), r1 has 3 + 1 = 4; 9 free in total."""
    used = {"n0": 5, "n1": 6, "n2": 5, "n3": 7, "node-17": 8}
    job = wl("a/j", 2, count=3, created=1, topology=TopologyRequest(required="cloud/rack"))
    s = state([QUEUE], [*busy(used), job], flavors=[A100_TAS], nodes=a100_nodes(), topologies=[TOPO])
    reason = pending(s)
    assert reason.code == "topology_fragmented"
    assert reason.message == (
        "9 A100 GPUs are free in total, enough for this job's 6, but the largest free block on one node is 3, "
        "and all 3 pod(s) of 2 must run in one rack: the rack with the most free, r0, has 5, room for 2 of them."
    )
    assert reason.details["largestDomain"] == "r0"
    assert reason.details["largestDomainFree"] == 5
    assert reason.details["level"] == "cloud/rack"


def test_fragmentation_scenario_sentence_carries_the_largest_block():
    document = run_scenario(load_scenario(SCENARIOS / "fragmentation.yaml"))
    reason = next(w for w in document["workloads"] if w["name"] == "ml/llm-pretrain")["reason"]
    assert reason["code"] == "topology_fragmented"
    assert "the largest free block on one node is 4" in reason["message"]
    assert "the rack with the most free, r1, has 8" in reason["message"]


def test_free_blocks_keys_domains_by_their_path():
    """Two blocks each with a rack called r0: they are different racks, each named r0."""
    nodes = [
        node("a", 8, labels={"cloud/block": "b1", "cloud/rack": "r0"}),
        node("b", 8, labels={"cloud/block": "b2", "cloud/rack": "r0"}, allocatable=3),
        node("c", 8, labels={"cloud/block": "b2", "cloud/rack": "r0"}, allocatable=4),
    ]
    pool = NodePool(nodes)
    states = list(pool.nodes.values())
    levels = TOPO.levels
    assert free_blocks(states, "nvidia.com/gpu", levels, "cloud/rack") == [(8, "r0"), (7, "r0")]
    assert free_blocks(states, "nvidia.com/gpu", levels, None) == [(8, "a"), (4, "c"), (3, "b")]
    assert free_blocks(states, "nvidia.com/gpu", levels, "cloud/block") == [(8, "b1"), (7, "b2")]
    assert level_word("cloud/rack") == "rack"
    assert level_word("kubernetes.io/hostname") == "node"


def _with(n, **changes):
    """A copy of an engine Node with some fields changed."""
    return replace(n, **changes)
