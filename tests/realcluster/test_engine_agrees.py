"""The engine against real Kueue on small scenarios: the same Workloads, arriving one by one, end in the same state
(which hold quota, which were preempted) in both. The engine explains waits and predicts admissions in kubernetes
mode; where it disagrees with Kueue, its explanations describe another scheduler.

Workloads are created directly (as Kueue's own performance runner does), one a second so their creation times order
them as the scenario does; between steps Kueue settles, and an evicted Workload's quota is released as its job
controller would. The engine replays the same arrivals (``sim.portal/submit-at``) to the end.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest
import yaml

from queues.engine.scenario import loads_scenario, run_scenario
from testbed.kubeapi import KubeApi, wait_for

KUEUE = "kueue.x-k8s.io/v1beta2"
T0 = "2026-01-01T00:00:00Z"


@dataclass(frozen=True)
class W:
    """One workload of a scenario: its queue, name, CPUs and priority."""

    queue: str
    name: str
    cpu: int
    priority: int


def _cluster_queue(name: str, cohort: str, flavor: str, nominal: int) -> dict:
    spec: dict = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}},
        "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
        "resourceGroups": [
            {
                "coveredResources": ["cpu"],
                "flavors": [{"name": flavor, "resources": [{"name": "cpu", "nominalQuota": str(nominal)}]}],
            }
        ],
    }
    if cohort:
        spec["cohortName"] = cohort
        spec["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"] = "100"
    return {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def _workload(w: W) -> dict:
    container = {"name": "c", "image": "pause", "resources": {"requests": {"cpu": str(w.cpu)}}}
    return {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {"name": w.name, "namespace": w.queue},
        "spec": {
            "queueName": w.queue,
            "priority": w.priority,
            "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [container]}}}],
        },
    }


def _conditions(wl: dict) -> dict[str, dict]:
    return {c["type"]: c for c in (wl.get("status") or {}).get("conditions") or []}


def _release_evicted(kubectl: KubeApi, workloads: list[W]) -> bool:
    """What a job controller does for an evicted workload: give its quota back. True if one was released."""
    released = False
    for w in workloads:
        wl = kubectl.get("Workload", w.name, w.queue)
        conds = _conditions(wl)
        if conds.get("Evicted", {}).get("status") == "True" and (wl.get("status") or {}).get("admission"):
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            wl["status"].pop("admission")
            wl["status"]["conditions"] = [c for c in wl["status"]["conditions"] if c["type"] != "QuotaReserved"] + [
                {
                    "type": "QuotaReserved",
                    "status": "False",
                    "reason": "Pending",
                    "message": "Evicted by the test",
                    "lastTransitionTime": stamp,
                }
            ]
            kubectl.replace(wl, subresource="status")
            released = True
    return released


def _settled(kubectl: KubeApi, workloads: list[W]) -> bool:
    """Every workload has Kueue's verdict (QuotaReserved set) and no eviction waits for its quota to be released."""
    for w in workloads:
        wl = kubectl.get("Workload", w.name, w.queue)
        conds = _conditions(wl)
        if "QuotaReserved" not in conds:
            return False
        if conds.get("Evicted", {}).get("status") == "True" and (wl.get("status") or {}).get("admission"):
            return False
    return True


def _compare(kubectl: KubeApi, prefix: str, queues: dict[str, str], steps: list[list[W]]) -> None:
    """Run the scenario through Kueue and the engine; assert both end with the same admitted and preempted sets."""
    flavor = f"{prefix}-cpu"
    objects = [{"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": flavor}, "spec": {}}]
    for queue, cohort in queues.items():
        objects += [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": queue}},
            _cluster_queue(queue, cohort, flavor, 20),
            {
                "apiVersion": KUEUE,
                "kind": "LocalQueue",
                "metadata": {"name": queue, "namespace": queue},
                "spec": {"clusterQueue": queue},
            },
        ]
    try:
        for obj in objects:
            kubectl.apply(obj)
        for queue in queues:
            wait_for(
                f"ClusterQueue {queue} active",
                lambda q=queue: _conditions(kubectl.get("ClusterQueue", q)).get("Active", {}).get("status") == "True",
            )
        created: list[W] = []
        engine_docs = list(objects)
        started = time.monotonic()
        for step in steps:
            for w in step:
                kubectl.create(_workload(w))
                doc = _workload(w)
                doc["metadata"]["creationTimestamp"] = T0
                doc["metadata"]["annotations"] = {"sim.portal/submit-at": f"{round(time.monotonic() - started)}s"}
                engine_docs.append(doc)
                created.append(w)
                time.sleep(1.05)  # one creation second each: Kueue orders equal priorities by it
            deadline = time.monotonic() + 60
            while not _settled(kubectl, created):
                _release_evicted(kubectl, created)
                assert time.monotonic() < deadline, "Kueue did not settle"
                time.sleep(0.3)
            time.sleep(1.5)  # anything Kueue does once the quota is back
            while _release_evicted(kubectl, created) or not _settled(kubectl, created):
                time.sleep(0.5)
        kueue = {}
        for w in created:
            wl = kubectl.get("Workload", w.name, w.queue)
            conds = _conditions(wl)
            holding = (wl.get("status") or {}).get("admission") is not None
            preempted = "Preempted" in conds or "Evicted" in conds
            kueue[f"{w.queue}/{w.name}"] = (holding, preempted)
        document = run_scenario(loads_scenario(yaml.safe_dump_all(engine_docs), source=prefix), mode="replay")
        engine = {
            r["name"]: (r["state"] in ("admitted", "finished"), bool(r["preemptedBy"])) for r in document["workloads"]
        }
        assert kueue == engine, {k: (kueue[k], engine.get(k)) for k in kueue if kueue[k] != engine.get(k)}
    finally:
        for queue in queues:
            kubectl.delete("Namespace", queue)
            kubectl.delete("ClusterQueue", queue)
        kubectl.delete("ResourceFlavor", flavor)


@pytest.fixture
def names():
    return f"e{time.time_ns() % 10**6}"


def test_a_higher_priority_workload_preempts_within_its_queue(kubectl, names):
    a = f"{names}-a"
    _compare(
        kubectl,
        names,
        {a: ""},
        [[W(a, f"m{i}", 5, 100) for i in range(4)], [W(a, "large", 20, 200)]],
    )


def test_borrowing_before_preempting(kubectl, names):
    """A queue at its nominal quota borrows a peer's unused quota for a higher-priority workload, preempting nobody."""
    a, b = f"{names}-a", f"{names}-b"
    _compare(
        kubectl,
        names,
        {a: f"{names}-cohort", b: f"{names}-cohort"},
        [[W(a, f"m{i}", 5, 100) for i in range(4)], [W(a, "large", 20, 200)]],
    )


def test_reclaim_from_a_borrowing_queue_and_own_lower_priority(kubectl, names):
    a, b = f"{names}-a", f"{names}-b"
    _compare(
        kubectl,
        names,
        {a: f"{names}-cohort", b: f"{names}-cohort"},
        [
            [W(a, f"m{i}", 5, 100) for i in range(6)] + [W(b, f"m{i}", 5, 100) for i in range(2)],
            [W(b, "large", 20, 200)],
        ],
    )


def test_larges_arriving_one_by_one_into_a_full_cohort(kubectl, names):
    queues = [f"{names}-{q}" for q in "abc"]
    first = [W(q, f"s{i}", 1, 50) for q in queues for i in range(4)] + [W(q, "m0", 5, 100) for q in queues]
    _compare(
        kubectl,
        names,
        dict.fromkeys(queues, f"{names}-cohort"),
        [first, [W(queues[0], "large", 20, 200)], [W(queues[1], "large", 20, 200)], [W(queues[2], "large", 20, 200)]],
    )
