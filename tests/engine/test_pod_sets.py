"""Workloads of several pod sets (a PyTorchJob's master + workers, a JobSet's launcher + workers): flavor per pod
set, and a wait reason that names the pod set that does not fit.

Worked examples: two 8-GPU A100 nodes and ample quota (64 GPUs), so only the nodes decide.
"""

from __future__ import annotations

from pathlib import Path

from queues.engine import PodSet, ResourceFlavor, settle
from queues.engine.reasons import explain_wl, reason_index
from queues.engine.scenario import load_scenario, run_scenario
from queues.engine.scheduler import Engine

from .builders import GPU, cq, node, state, wl

SCENARIOS = Path(__file__).resolve().parents[2] / "docs" / "scenarios"
A100 = ResourceFlavor("a100", node_labels={"gpu": "a100"}, display_name="A100")
QUEUE = cq("a", {"a100": {GPU: 64}})
NODES = [node("n0", 8, labels={"gpu": "a100"}), node("n1", 8, labels={"gpu": "a100"})]


def busy(n0: int, n1: int):
    """One admitted single-pod workload per node, using that many GPUs."""
    used = {"n0": n0, "n1": n1}
    return [wl(f"a/run-{name}", n, admitted="a", flavor="a100", nodes=[name]) for name, n in used.items() if n]


def pytorchjob(master: int, workers: int, per_worker: int):
    """A PyTorchJob-shaped workload: one master pod, then the workers."""
    return wl(
        "a/j",
        created=1,
        pod_sets=[PodSet("master", 1, {GPU: master}), PodSet("worker", workers, {GPU: per_worker})],
    )


def test_multi_pod_set_workload_is_admitted_with_a_placement_per_pod_set():
    s = state([QUEUE], [pytorchjob(4, 2, 2)], flavors=[A100], nodes=NODES)
    [decision] = settle(s, 0).cycles[0].admitted
    assert [(p.name, p.count, dict(p.flavors)) for p in decision.pod_sets] == [
        ("master", 1, {GPU: "a100"}),
        ("worker", 2, {GPU: "a100"}),
    ]
    assert len(decision.pod_sets[0].nodes) == 1
    assert len(decision.pod_sets[1].nodes) == 2


def test_wait_reason_names_the_pod_set_that_does_not_fit_and_the_one_that_does():
    """6 of 8 GPUs busy on each node: 2 + 2 free. The workers (2 pods x 2) fit alone; the master's 8 GPUs on one
    node do not: class_exhausted (4 free, 12 needed in all), prefixed with which pod set is the obstacle."""
    s = state([QUEUE], [*busy(6, 6), pytorchjob(8, 2, 2)], flavors=[A100], nodes=NODES)
    reason = settle(s, 0).pending["a/j"]
    assert reason.code == "class_exhausted"
    assert reason.message.startswith(
        "Pod set worker (2 pods × 2 GPUs) fits alone; pod set master (1 pod × 8 GPUs) does not. "
    )
    assert reason.details["podSetsFit"] == ["worker"]
    assert reason.details["podSetsBlocked"] == ["master"]
    assert reason.details["podSet"] == "master"


def test_wait_reason_says_when_each_pod_set_fits_alone_but_not_together():
    """4 + 4 free: the master (1 x 4) fits alone, the workers (2 x 4) too, but all three pods need 12 of the 8
    free: class_exhausted counting every pod set, not health_blocked (the workers alone would fit)."""
    s = state([QUEUE], [*busy(4, 4), pytorchjob(4, 2, 4)], flavors=[A100], nodes=NODES)
    reason = settle(s, 0).pending["a/j"]
    assert reason.code == "class_exhausted"
    assert reason.message == (
        "Each pod set fits alone, but not all of them together. The A100 nodes of flavor a100 have 8 free; "
        "this job needs 12 in all (master 1 × 4 + worker 2 × 4)."
    )
    assert reason.details["podSetsBlocked"] == []
    assert reason.details["needed"] == 12


def test_single_pod_set_reason_is_unchanged():
    s = state([QUEUE], [*busy(6, 6), wl("a/j", 8, created=1)], flavors=[A100], nodes=NODES)
    reason = settle(s, 0).pending["a/j"]
    assert reason.message.startswith("The ")
    assert "podSetsFit" not in reason.details


def test_pod_sets_scenario_shows_flavor_per_pod_set_and_names_the_launcher():
    document = run_scenario(load_scenario(SCENARIOS / "pod-sets.yaml"))
    by_name = {w["name"]: w for w in document["workloads"]}
    ray = by_name["ml/ray-tune"]
    assert [(p["name"], p["flavors"]) for p in ray["podSets"]] == [
        ("head", {"cpu": "cpu-pool", "memory": "cpu-pool"}),
        ("workers", {"cpu": "h100", "memory": "h100", "nvidia.com/gpu": "h100"}),
    ]
    reason = by_name["ml/mpi-train"]["reason"]
    assert reason["code"] == "quota_exhausted"
    assert "pod set launcher (1 pod × 160 CPUs, 64Gi of memory) does not." in reason["message"]


def test_explaining_many_jobs_of_one_shape_tries_each_pod_set_alone_once():
    """Two pending jobs of the same shape: the same sentences as explained one by one, and the "fits alone" answer
    of each pod set is worked out once for the pass (per queue, shape and pod set)."""
    first = pytorchjob(8, 2, 2)
    second = wl("a/k", created=2, pod_sets=first.pod_sets)
    s = state([QUEUE], [*busy(6, 6), first, second], flavors=[A100], nodes=NODES)
    engine = Engine(s, 0)
    pending = [engine.workloads["a/j"], engine.workloads["a/k"]]
    index = reason_index(engine)
    together = {w.key: explain_wl(engine, w, index=index).reason for w in pending}
    alone = {w.key: explain_wl(engine, w).reason for w in pending}
    assert together == alone
    assert together["a/k"].message.startswith("Pod set worker (2 pods × 2 GPUs) fits alone; pod set master")
    assert len(index.pod_set_fits) == 2
