"""Every Kueue message the engine writes matches the regex of its entry in reference/kueue/messages.yaml."""

from __future__ import annotations

import re

import pytest
import yaml

from queues.engine import (
    AdmissionCheck,
    AdmissionCheckRule,
    LocalQueue,
    ResourceFlavor,
    Taint,
    Topology,
    TopologyRequest,
    schedule,
    settle,
)
from queues.engine import messages as msg
from tests.fixtures import REFERENCE

from .builders import GPU, cq, node, state, wl


@pytest.fixture(scope="module")
def catalogue() -> dict[str, str]:
    """id -> regex from the reference message catalogue (tests/fixtures/reference/kueue/messages.yaml)."""
    data = yaml.safe_load((REFERENCE / "kueue" / "messages.yaml").read_text())
    regexes = {m["id"]: m["regex"] for m in data["messages"] if m.get("regex")}
    assert regexes, "the message catalogue has no regex"
    return regexes


def _pending(s, key):
    return settle(s, 0).pending[key].kueue_message


def generated() -> dict[str, list[str]]:
    """Messages produced by the engine, keyed by catalogue id."""
    out: dict[str, list[str]] = {}
    quota = state([cq("a", {"f": {GPU: 8}})], [wl("a/run", 6, admitted="a"), wl("a/j", 4, created=1)])
    m = _pending(quota, "a/j")
    out["podset_flavor_assignment_failed"] = [m]
    out["insufficient_unused_quota"] = [m]
    out["max_capacity_exceeded"] = [_pending(state([cq("a", {"f": {GPU: 8}})], [wl("a/j", 9)]), "a/j")]
    out["resource_not_in_clusterqueue"] = [_pending(state([cq("a", {"f": {"cpu": 1000}})], [wl("a/j", 1)]), "a/j")]
    tainted = [ResourceFlavor("spot", node_taints=(Taint("nvidia.com/gpu", "present", "NoSchedule"),))]
    out["untolerated_taint"] = [_pending(state([cq("a", {"spot": {GPU: 8}})], [wl("a/j", 1)], flavors=tainted), "a/j")]
    labelled = [ResourceFlavor("h100", node_labels={"gpu": "h100"})]
    out["node_affinity_mismatch"] = [
        _pending(
            state([cq("a", {"h100": {GPU: 8}})], [wl("a/j", 1, selector={"gpu": "a100"})], flavors=labelled), "a/j"
        )
    ]
    out["flavor_not_found"] = [msg.flavor_not_found("a100-40gb")]
    topo = Topology("gpu-topology", ("rack", "kubernetes.io/hostname"))
    tas = [ResourceFlavor("tas", node_labels={"gpu": "h100"}, topology_name="gpu-topology")]
    plain_cq = cq("a", {"h100": {GPU: 8}})
    out["tas_flavor_not_tas"] = [
        _pending(state([plain_cq], [wl("a/j", 1, topology=TopologyRequest(required="rack"))], flavors=labelled), "a/j")
    ]
    mixed = cq("a", {"tas": {GPU: 8}, "h100": {GPU: 8}})
    out["tas_flavor_only_tas"] = [msg.podset_failed("main", [msg.tas_only("tas")])]
    mixed_state = state([mixed], [wl("a/j", 9)], flavors=[*tas, *labelled], topologies=[topo])
    out["tas_flavor_only_tas"].append(_pending(mixed_state, "a/j"))
    tas_cq = cq("a", {"tas": {GPU: 64}})
    out["tas_level_missing"] = [
        _pending(
            state([tas_cq], [wl("a/j", 1, topology=TopologyRequest(required="zone"))], flavors=tas, topologies=[topo]),
            "a/j",
        )
    ]
    nodes = [node(f"n{i}", 8, labels={"gpu": "h100", "rack": f"r{i // 2}"}) for i in range(4)]
    some = state(
        [tas_cq],
        [
            wl("a/x", 8, admitted="a", flavor="tas", nodes=["n0"]),
            wl("a/y", 8, admitted="a", flavor="tas", nodes=["n2"]),
            wl("a/j", 8, count=2, created=1, topology=TopologyRequest(required="rack")),
        ],
        flavors=tas,
        topologies=[topo],
        nodes=nodes,
    )
    some_msg = _pending(some, "a/j")
    out["tas_fits_only_some"] = [some_msg]
    out["tas_exclusion_stats"] = [some_msg]
    full = state(
        [tas_cq],
        [wl(f"a/x{i}", 8, admitted="a", flavor="tas", nodes=[f"n{i}"]) for i in range(4)]
        + [wl("a/j", 8, created=1, topology=TopologyRequest(required="rack"))],
        flavors=tas,
        topologies=[topo],
        nodes=nodes,
    )
    out["tas_fits_none"] = [_pending(full, "a/j")]
    pre = state(
        [cq("a", {"f": {GPU: 8}}, within="LowerPriority")],
        [wl("a/low", 8, admitted="a"), wl("a/high", 8, priority=5, created=1)],
    )
    result = schedule(pre, 1)
    out["pending_preemption_suffix"] = [result.pending["a/high"].kueue_message]
    out["preempted"] = [p.message for p in result.preemptions]
    cycle = state(
        [cq("a", {"f": {GPU: 4}}, cohort="c"), cq("b", {"f": {GPU: 4}}, cohort="c")],
        [wl("a/run", 4, admitted="a"), wl("a/borrower", 4, priority=100, created=1), wl("b/owner", 4, created=2)],
    )
    out["no_longer_fits"] = [schedule(cycle, 1).pending["a/borrower"].kueue_message]
    out["overlapping_preemption_targets"] = [msg.OVERLAPPING_TARGETS]
    out["local_queue_missing"] = [_pending(state([cq("a", {"f": {GPU: 8}})], [wl("a/j", queue="nope")]), "a/j")]
    out["local_queue_inactive"] = [
        _pending(
            state(
                [cq("a", {"f": {GPU: 8}})], [wl("a/j")], local_queues=[LocalQueue("a", "main", "a", stop_policy="Hold")]
            ),
            "a/j",
        )
    ]
    out["cluster_queue_missing"] = [
        _pending(state([cq("a", {"f": {GPU: 8}})], [wl("a/j")], local_queues=[LocalQueue("a", "main", "zz")]), "a/j")
    ]
    out["cluster_queue_inactive"] = [_pending(state([cq("a", {"f": {GPU: 8}}, stop="Hold")], [wl("a/j")]), "a/j")]
    out["namespace_selector_mismatch"] = [
        _pending(state([cq("a", {"f": {GPU: 8}}, selector=None)], [wl("a/j")]), "a/j")
    ]
    out["failed_admission_checks_pending"] = [
        _pending(state([cq("a", {"f": {GPU: 8}})], [wl("a/j", checks={"p": "Rejected"})]), "a/j")
    ]
    out["admitted_condition_messages"] = [
        schedule(
            state(
                [cq("a", {"f": {GPU: 8}}, checks=[AdmissionCheckRule("p")])], [wl("a/j")], checks=[AdmissionCheck("p")]
            ),
            0,
        )
        .pending["a/j"]
        .kueue_message
    ]
    out["quota_reserved_true"] = [schedule(state([cq("a", {"f": {GPU: 8}})], [wl("a/j")]), 0).admitted[0].message]
    out["deactivated"] = [msg.DEACTIVATED]
    return out


def test_messages_match_catalogue_regexes(catalogue):
    produced = generated()
    assert produced, "nothing generated"
    for ident, messages in produced.items():
        assert ident in catalogue, ident
        pattern = re.compile(catalogue[ident])
        for text in messages:
            assert text, ident
            assert pattern.search(text), f"{ident}: {text!r} does not match {catalogue[ident]!r}"


def test_message_examples_in_catalogue_are_reproduced(catalogue):
    # The catalogue's own examples, rebuilt with the engine's formatters.
    assert msg.insufficient_unused_quota(GPU, "h100-80gb", 3) == (
        "insufficient unused quota for nvidia.com/gpu in flavor h100-80gb, 3 more needed"
    )
    assert msg.max_capacity_exceeded(GPU, "h100-80gb", 8, 16, 16) == (
        "insufficient quota for nvidia.com/gpu in flavor h100-80gb, previously considered podsets requests (8) + "
        "current podset request (16) > maximum capacity (16)"
    )
    assert msg.untolerated_taint("{nvidia.com/gpu present NoSchedule <nil>}", "h100-spot") == (
        "untolerated taint {nvidia.com/gpu present NoSchedule <nil>} in flavor h100-spot"
    )
    assert msg.tas_not_fit("gpu-topology", 6, 8, '. Total nodes: 16; excluded: resource "nvidia.com/gpu": 10') == (
        'topology "gpu-topology" allows to fit only 6 out of 8 pod(s). Total nodes: 16; excluded: '
        'resource "nvidia.com/gpu": 10'
    )
    assert msg.preempted(
        "5c023c28-8533-4927-b266-56bca5e310c1",
        "4548c8bd-c399-4027-bb02-6114f3a8cdeb",
        "InCohortReclamation",
        "/gpu-org/team-b-cq",
        "/gpu-org/team-a-cq",
    ) == (
        "Preempted to accommodate a workload (UID: 5c023c28-8533-4927-b266-56bca5e310c1, JobUID: "
        "4548c8bd-c399-4027-bb02-6114f3a8cdeb) due to reclamation within the cohort; preemptor path: "
        "/gpu-org/team-b-cq; preemptee path: /gpu-org/team-a-cq"
    )
    assert msg.preempted("", "", "InClusterQueue", "/a", "/a").startswith(
        "Preempted to accommodate a workload (UID: UNKNOWN, JobUID: UNKNOWN)"
    )
