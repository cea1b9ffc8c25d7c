"""Benchmark: one workload trace through real Kueue on the testbed and through the engine's replay, side by side.

The trace is Kueue's own performance test shape (``test/performance/scheduler/configs`` in sigs.k8s.io/kueue,
v0.19.2): cohorts of 6 ClusterQueues (nominal 20 CPU, borrowing limit 100, reclaimWithinCohort Any,
withinClusterQueue LowerPriority); per ClusterQueue 350 small (1 CPU, 200 ms, priority 50, one every 100 ms),
100 medium (5 CPU, 500 ms, priority 100, every 500 ms) and 50 large (20 CPU, 1 s, priority 200, every 1.2 s)
Workloads. ``baseline`` is quota only; ``tas`` adds a Topology (block, rack, hostname), nodes of 96 CPU (10
racks; Kueue's 64 nodes a rack scaled by the cohorts run) and pods with rack topology requests (2, 4 and 8 pods).

Kueue's side runs as its performance runner does: Workloads created directly at their times (no Job, no pods), a
Workload marked Finished its runtime after Kueue admitted it, an evicted one's quota reservation cleared (the job
controller's part). The engine's side replays the same objects as a scenario file (``sim.portal/submit-at``,
``sim.portal/runtime``), in simulated time.

Printed: wall time; admission order agreement (Kendall's tau over the workloads both admitted, and per
ClusterQueue); time to admission per class in both (mean, p50, p90) and per workload in a CSV; ClusterQueue
usage in both (Kueue's way: the time integral of reserved quota over nominal x window); evictions; and Kueue's
figures beside the published ``rangespec.yaml`` of the same config (which are for 5 cohorts of 500 workloads a
queue on Kueue's CI machines: a run with fewer cohorts is not held to them, they are shown for scale).

    python benchmarks/kueue_vs_engine.py [--trace baseline|tas|both] [--cohorts 1] [--workload-scale 1]
                                         [--time-scale 1] [--csv-dir var/benchmarks] [--ports 18400-18499]

Needs the testbed built (``scripts/testbed build --minimal``); it starts its own (etcd, kube-apiserver, Kueue) on
free loopback ports and stops it at the end.
"""

from __future__ import annotations

import argparse
import csv
import heapq
import os
import shutil
import statistics
import sys
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from queues.engine.scenario import loads_scenario  # noqa: E402
from queues.engine.scheduler import Engine  # noqa: E402
from queues.engine.simulation import Replay, primary_resource  # noqa: E402
from testbed import layout  # noqa: E402
from testbed.cluster import Testbed  # noqa: E402
from testbed.errors import ApiError, TestbedError  # noqa: E402
from testbed.kubeapi import KubeApi, path_of  # noqa: E402

KUEUE = "kueue.x-k8s.io/v1beta2"
LABEL = "benchmarks.gpu-pool-portal.io/run"
BLOCK, RACK, HOST = "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack", "kubernetes.io/hostname"
T0 = "2026-01-01T00:00:00Z"

#: (count, creation interval ms, class, runtime ms, priority, CPU per pod, pods, topology mode) per workload set.
BASELINE_SETS = (
    (350, 100, "small", 200, 50, "1", 1, ""),
    (100, 500, "medium", 500, 100, "5", 1, ""),
    (50, 1200, "large", 1000, 200, "20", 1, ""),
)
#: Kueue's tas config, with its "balanced" (slice) sets sent as "required": the engine has no slice topology.
TAS_SETS = (
    (120, 100, "small-required-rack", 200, 50, "500m", 2, "required"),
    (120, 100, "small-preferred-rack", 200, 50, "500m", 2, "preferred"),
    (110, 100, "small-balanced-rack", 200, 50, "500m", 2, "required"),
    (34, 500, "medium-required-rack", 500, 100, "1250m", 4, "required"),
    (33, 500, "medium-preferred-rack", 500, 100, "1250m", 4, "preferred"),
    (33, 500, "medium-balanced-rack", 500, 100, "1250m", 4, "required"),
    (17, 1200, "large-required-rack", 1000, 200, "2500m", 8, "required"),
    (17, 1200, "large-preferred-rack", 1000, 200, "2500m", 8, "preferred"),
    (16, 1200, "large-balanced-rack", 1000, 200, "2500m", 8, "required"),
)
#: Kueue's published ranges (test/performance/scheduler/configs/<trace>/rangespec.yaml at v0.19.2), for 5 cohorts.
RANGESPEC = {
    "baseline": {
        "maxWallMs": 425_000,
        "cqMinUsage": 50,
        "maxAvgTimeToAdmissionMs": {"large": 23_000, "medium": 90_000, "small": 260_000},
    },
    "tas": {
        "maxWallMs": 482_000,
        "cqMinUsage": 57,
        "maxAvgTimeToAdmissionMs": {
            "large-balanced-rack": 46_000,
            "large-preferred-rack": 48_000,
            "large-required-rack": 48_000,
            "medium-balanced-rack": 128_000,
            "medium-preferred-rack": 128_000,
            "medium-required-rack": 129_000,
            "small-balanced-rack": 286_000,
            "small-preferred-rack": 296_000,
            "small-required-rack": 297_000,
        },
    },
}


def milli(quantity: str) -> int:
    """CPU quantity → millicores."""
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


@dataclass(frozen=True)
class Item:
    """One workload of the trace."""

    namespace: str  # = its ClusterQueue's and LocalQueue's name
    name: str
    klass: str
    priority: int
    cpu: str  # per pod
    pods: int
    topology: str  # "", "required", "preferred"
    submit_ms: int
    runtime_ms: int

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def cpu_milli(self) -> int:
        return milli(self.cpu) * self.pods


@dataclass
class Trace:
    """The objects and the workloads of one run."""

    kind: str
    queues: list[tuple[str, str]]  # (ClusterQueue, cohort)
    items: list[Item]
    nodes: list[dict] = field(default_factory=list)

    @property
    def flavor(self) -> str:
        return "tas-flavor" if self.kind == "tas" else "rf"


def make_trace(kind: str, *, cohorts: int, workload_scale: int, time_scale: float = 1.0) -> Trace:
    """Kueue's generator, as its runner lays it out: queue ``cq-0-<q>-cohort-<c>``, workload
    ``<class>-<set>-<n>-0`` created at (n + 1) x interval after the start, each set of a queue in parallel."""
    sets = BASELINE_SETS if kind == "baseline" else TAS_SETS
    queues, items = [], []
    for c in range(cohorts):
        cohort = f"cohort-{c}"
        for q in range(6):
            cq = f"cq-0-{q}-{cohort}"
            queues.append((cq, cohort))
            for s, (count, interval, klass, runtime, priority, cpu, pods, topo) in enumerate(sets):
                for n in range(max(1, count // workload_scale)):
                    items.append(
                        Item(
                            cq,
                            f"{klass}-{s}-{n}-0",
                            klass,
                            priority,
                            cpu,
                            pods,
                            topo,
                            round((n + 1) * interval * time_scale),
                            round(runtime * time_scale),
                        )
                    )
    nodes = []
    if kind == "tas":
        per_rack = -(-64 * cohorts // 5)
        for r in range(10):
            for n in range(per_rack):
                name = f"tas-r{r}-n{n}"
                nodes.append(
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "metadata": {
                            "name": name,
                            "labels": {
                                BLOCK: "b0",
                                RACK: f"r{r}",
                                HOST: name,
                                "tas-node-group": "tas",
                                LABEL: "benchmark",
                            },
                        },
                        "spec": {},
                        "status": {
                            "capacity": {"cpu": "96", "memory": "256Gi", "pods": "110"},
                            "allocatable": {"cpu": "96", "memory": "256Gi", "pods": "110"},
                            "conditions": [
                                {
                                    "type": "Ready",
                                    "status": "True",
                                    "reason": "KubeletReady",
                                    "message": "benchmark node",
                                    "lastHeartbeatTime": T0,
                                    "lastTransitionTime": T0,
                                }
                            ],
                        },
                    }
                )
    items.sort(key=lambda i: (i.submit_ms, i.key))
    return Trace(kind, queues, items, nodes)


# --- the objects, for both sides -----------------------------------------------------------------------------


def config_objects(trace: Trace, run: str) -> list[dict]:
    """ResourceFlavor, Topology, Namespaces, ClusterQueues, LocalQueues of the trace (Nodes apart)."""
    labels = {LABEL: run}
    flavor: dict = {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": trace.flavor, "labels": labels}}
    out = []
    if trace.kind == "tas":
        out.append(
            {
                "apiVersion": KUEUE,
                "kind": "Topology",
                "metadata": {"name": "default-topology", "labels": labels},
                "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}, {"nodeLabel": HOST}]},
            }
        )
        flavor["spec"] = {"nodeLabels": {"tas-node-group": "tas"}, "topologyName": "default-topology"}
    else:
        flavor["spec"] = {}
    out.append(flavor)
    for cq, cohort in trace.queues:
        out.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": cq, "labels": labels}})
        out.append(
            {
                "apiVersion": KUEUE,
                "kind": "ClusterQueue",
                "metadata": {"name": cq, "labels": labels},
                "spec": {
                    "cohortName": cohort,
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu"],
                            "flavors": [
                                {
                                    "name": trace.flavor,
                                    "resources": [{"name": "cpu", "nominalQuota": "20", "borrowingLimit": "100"}],
                                }
                            ],
                        }
                    ],
                    "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
                },
            }
        )
        out.append(
            {
                "apiVersion": KUEUE,
                "kind": "LocalQueue",
                "metadata": {"name": cq, "namespace": cq, "labels": labels},
                "spec": {"clusterQueue": cq},
            }
        )
    return out


def workload_object(item: Item, run: str) -> dict:
    """The Workload Kueue's runner creates for one trace item."""
    pod_set: dict = {
        "name": "main",
        "count": item.pods,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": item.cpu}}}],
            }
        },
    }
    if item.topology:
        pod_set["topologyRequest"] = {item.topology: RACK}
    return {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {
            "name": item.name,
            "namespace": item.namespace,
            "labels": {LABEL: run, "kueue.x-k8s.io/performance-scheduler-class": item.klass},
        },
        "spec": {"queueName": item.namespace, "priority": item.priority, "podSets": [pod_set]},
    }


# --- the engine ----------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What happened to each workload on one side: times in ms after the start, eviction counts."""

    created: dict[str, float] = field(default_factory=dict)
    admitted: dict[str, float] = field(default_factory=dict)  # first admission
    finished: dict[str, float] = field(default_factory=dict)
    evictions: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    holding: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    wall_ms: float = 0.0
    usage: dict[str, float] = field(default_factory=dict)  # ClusterQueue → % of nominal over the run
    cpu_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def run_engine(trace: Trace) -> Outcome:
    """Replay the trace as a scenario in simulated time."""
    docs = [*trace.nodes, *config_objects(trace, "engine")]
    for item in trace.items:
        wl = workload_object(item, "engine")
        wl["metadata"]["creationTimestamp"] = T0
        wl["metadata"]["annotations"] = {
            "sim.portal/submit-at": f"{item.submit_ms}ms",
            "sim.portal/runtime": f"{item.runtime_ms}ms",
        }
        docs.append(wl)
    scenario = loads_scenario(yaml.safe_dump_all(docs, sort_keys=False), source=f"{trace.kind} trace")
    engine = Engine(scenario.state, scenario.start)
    replay = Replay(engine, start=scenario.start, checks_delay=scenario.checks_delay)
    for when, wl in scenario.submissions:
        replay.submit_at(wl, when)
    started = time.process_time()
    result = replay.run(until=None)
    cpu = time.process_time() - started
    out = Outcome()
    for key, rec in result.records.items():
        out.created[key] = (rec.submitted_at - scenario.start) * 1000
        if rec.first_admitted_at is not None:
            out.admitted[key] = (rec.first_admitted_at - scenario.start) * 1000
        if rec.finished_at is not None:
            out.finished[key] = (rec.finished_at - scenario.start) * 1000
        out.evictions[key] = rec.evictions
    out.wall_ms = max(out.finished.values(), default=0.0)
    window = (result.end - result.start) or 1.0
    out.usage = {  # the engine's own utilization figure: its usage integral over nominal x the replay window
        name: 100 * stats.integral / (primary_resource(engine, name)[1] * window)
        for name, stats in result.queues.items()
    }
    out.cpu_seconds = cpu
    return out


# --- real Kueue ----------------------------------------------------------------------------------------------


def _cond(wl: dict, kind: str) -> dict | None:
    return next((c for c in (wl.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def _true(wl: dict, kind: str) -> bool:
    c = _cond(wl, kind)
    return bool(c) and c.get("status") == "True"


class KueueRun:
    """Creates the trace's Workloads on time, watches Kueue decide, finishes and un-reserves as the runner does."""

    def __init__(self, api: KubeApi, trace: Trace, run: str, *, workers: int = 8) -> None:
        self.api, self.trace, self.run = api, trace, run
        self.items = {i.key: i for i in trace.items}
        self.out = Outcome()
        self.lock = threading.Lock()
        self.t0 = 0.0
        self.done = threading.Event()
        self.due: list[tuple[float, str]] = []  # (monotonic time to finish, key)
        self.due_cv = threading.Condition()
        self.unreserve_pending: set[str] = set()
        self.errors: list[str] = []
        self.pool = ThreadPoolExecutor(max_workers=workers)
        self.cq_usage: dict[str, list[tuple[float, int]]] = defaultdict(list)
        self.admitted_now: dict[str, bool] = {}
        self.admissions: dict[str, float] = {}  # the last admission seen, ms
        self.finish_lag: list[float] = []  # ms between a workload's due finish and Kueue seeing it finished

    def now_ms(self) -> float:
        return (time.monotonic() - self.t0) * 1000

    def setup(self) -> None:
        for node in self.trace.nodes:
            status = node["status"]
            self.api.apply({k: v for k, v in node.items() if k != "status"})
            self.api.patch("Node", node["metadata"]["name"], {"status": status}, subresource="status")
            # the TaintNodesByCondition admission plugin taints a new node not-ready; without
            # kube-controller-manager nobody takes it off when the node is Ready: do what its node lifecycle does
            self.api.patch("Node", node["metadata"]["name"], {"spec": {"taints": None}})
        for obj in config_objects(self.trace, self.run):
            self.api.apply(obj)
        deadline = time.monotonic() + 60
        for cq, _ in self.trace.queues:
            while not _true(self.api.get("ClusterQueue", cq), "Active"):
                if time.monotonic() > deadline:
                    raise TestbedError(f"ClusterQueue {cq} did not become active")
                time.sleep(0.2)

    # --- watching ----------------------------------------------------------------------------------------------

    def _watch(self, kind: str, handle) -> None:
        rv = self.api.request("GET", path_of(kind), params={"limit": "1"})["metadata"]["resourceVersion"]
        while not self.done.is_set():
            try:
                for event in self.api.watch(kind, resource_version=rv, timeout=30):
                    obj = event["object"]
                    if event["type"] == "ERROR":
                        raise TestbedError(f"watch {kind}: {obj}")
                    rv = obj["metadata"]["resourceVersion"]
                    handle(event["type"], obj)
                    if self.done.is_set():
                        return
            except (TestbedError, OSError) as exc:
                if self.done.is_set():
                    return
                self.errors.append(f"watch {kind}: {exc}")
                time.sleep(0.2)

    def on_workload(self, kind: str, wl: dict) -> None:
        """Record what Kueue decided; schedule the finish of a new admission; un-reserve an evicted workload."""
        meta = wl["metadata"]
        if (meta.get("labels") or {}).get(LABEL) != self.run:
            return
        key = f"{meta['namespace']}/{meta['name']}"
        now = self.now_ms()
        finished = _true(wl, "Finished")
        reserved = (wl.get("status") or {}).get("admission") is not None and _true(wl, "QuotaReserved")
        holding = reserved and not finished  # Kueue releases a finished workload's quota (its admission stays)
        admitted = _true(wl, "Admitted") and not _true(wl, "Evicted") and not finished
        with self.lock:
            self.out.created.setdefault(key, now)
            spans = self.out.holding[key]
            if holding and (not spans or spans[-1][1] >= 0):
                spans.append((now, -1.0))
            if not holding and spans and spans[-1][1] < 0:
                spans[-1] = (spans[-1][0], now)
            if admitted and key not in self.out.admitted:
                self.out.admitted[key] = now
            if finished:
                if key not in self.out.finished:
                    self.out.finished[key] = now
                    if len(self.out.finished) == len(self.items):
                        self.done.set()
                return
            if _true(wl, "Evicted") and reserved and key not in self.unreserve_pending:
                self.unreserve_pending.add(key)
                self.out.evictions[key] += 1
                self.pool.submit(self._unreserve, key)
            was_admitted = self.admitted_now.get(key, False)
            self.admitted_now[key] = admitted
            if admitted and not was_admitted:  # a new admission: it runs for its runtime from now
                self.admissions[key] = now
                with self.due_cv:
                    heapq.heappush(self.due, (time.monotonic() + self.items[key].runtime_ms / 1000, key))
                    self.due_cv.notify()

    def on_cluster_queue(self, kind: str, cq: dict) -> None:
        if (cq["metadata"].get("labels") or {}).get(LABEL) != self.run:
            return
        total = 0
        for flavor in (cq.get("status") or {}).get("flavorsReservation") or []:
            for res in flavor.get("resources") or []:
                if res.get("name") == "cpu":
                    total += milli(str(res.get("total", "0")))
        with self.lock:
            self.cq_usage[cq["metadata"]["name"]].append((self.now_ms(), total))

    # --- acting as the job controller --------------------------------------------------------------------------

    def _update_status(self, key: str, change) -> None:
        namespace, name = key.split("/", 1)
        for _ in range(20):
            wl = self.api.get("Workload", name, namespace)
            if not change(wl):
                return
            try:
                self.api.replace(wl, subresource="status")
                return
            except ApiError as exc:
                if exc.status != 409:
                    self.errors.append(f"{key}: {exc}")
                    return
        self.errors.append(f"{key}: status update kept conflicting")

    def _finish(self, key: str) -> None:
        """Mark the workload Finished, as the runner's controller does (one JSON patch of its status)."""
        namespace, name = key.split("/", 1)
        condition = {
            "type": "Finished",
            "status": "True",
            "reason": "ByTest",
            "message": "By test runner",
            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        with self.lock:
            if not self.admitted_now.get(key):  # evicted meanwhile: it finishes after its next admission
                return
            due = self.admissions[key] + self.items[key].runtime_ms
        try:
            self.api.patch(
                "Workload",
                name,
                [{"op": "add", "path": "/status/conditions/-", "value": condition}],
                namespace,
                subresource="status",
            )
        except ApiError as exc:
            if exc.status != 422:  # 422: finished already (one condition of each type)
                self.errors.append(f"finish {key}: {exc}")
            return
        with self.lock:
            self.finish_lag.append(self.now_ms() - due)

    def _unreserve(self, key: str) -> None:
        def change(wl: dict) -> bool:
            if wl.get("status", {}).get("admission") is None:
                return False
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            generation = wl["metadata"].get("generation", 1)
            conditions = [
                c for c in wl["status"].get("conditions") or [] if c["type"] not in ("QuotaReserved", "Admitted")
            ]
            conditions.append(
                {
                    "type": "QuotaReserved",
                    "status": "False",
                    "reason": "Pending",
                    "message": "Evicted by the test runner",
                    "lastTransitionTime": stamp,
                    "observedGeneration": generation,
                }
            )
            conditions.append(
                {
                    "type": "Admitted",
                    "status": "False",
                    "reason": "NoReservation",
                    "message": "The workload has no reservation",
                    "lastTransitionTime": stamp,
                    "observedGeneration": generation,
                }
            )
            wl["status"]["conditions"] = conditions
            wl["status"].pop("admission", None)
            return True

        try:
            self._update_status(key, change)
        finally:
            with self.lock:
                self.unreserve_pending.discard(key)

    def _finisher(self) -> None:
        while not self.done.is_set():
            with self.due_cv:
                while not self.due and not self.done.is_set():
                    self.due_cv.wait(0.2)
                if self.done.is_set():
                    return
                when, key = self.due[0]
                delay = when - time.monotonic()
                if delay > 0:
                    self.due_cv.wait(min(delay, 0.2))
                    continue
                heapq.heappop(self.due)
            self.pool.submit(self._finish, key)

    # --- creating ----------------------------------------------------------------------------------------------

    def _create(self, item: Item) -> None:
        try:
            self.api.create(workload_object(item, self.run))
        except (ApiError, TestbedError) as exc:
            self.errors.append(f"create {item.key}: {exc}")

    def execute(self, *, timeout: float) -> Outcome:
        watchers = [
            threading.Thread(target=self._watch, args=("Workload", self.on_workload), daemon=True),
            threading.Thread(target=self._watch, args=("ClusterQueue", self.on_cluster_queue), daemon=True),
            threading.Thread(target=self._finisher, daemon=True),
        ]
        self.t0 = time.monotonic()
        for thread in watchers:
            thread.start()
        time.sleep(0.5)  # the watches are open before the first Workload exists
        self.t0 = time.monotonic()
        creators = ThreadPoolExecutor(max_workers=8)
        for item in self.trace.items:
            delay = self.t0 + item.submit_ms / 1000 - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            creators.submit(self._create, item)
        creators.shutdown(wait=True)
        print(f"  all {len(self.items)} Workloads created after {self.now_ms() / 1000:.1f} s", flush=True)
        if not self.done.wait(timeout):
            self.errors.append(
                f"timed out after {timeout:.0f} s: {len(self.out.finished)} of {len(self.items)} finished"
            )
        self.done.set()
        self.pool.shutdown(wait=True)
        with self.lock:
            created_lag = [self.out.created[i.key] - i.submit_ms for i in self.trace.items if i.key in self.out.created]
            self.out.notes.append(
                f"harness: a Workload was created {_mean_p90(created_lag)} ms after its time, marked Finished "
                f"{_mean_p90(self.finish_lag)} ms after its runtime ended (mean, p90); load {_load()}"
            )
            self.out.wall_ms = max(self.out.finished.values(), default=self.now_ms())
            for key, spans in self.out.holding.items():
                if spans and spans[-1][1] < 0:
                    spans[-1] = (spans[-1][0], self.out.finished.get(key, self.out.wall_ms))
        return self.out


def _mean_p90(values: list[float]) -> str:
    if not values:
        return "—"
    ordered = sorted(values)
    return f"{statistics.mean(ordered):.0f} / {ordered[int(0.9 * (len(ordered) - 1))]:.0f}"


def _load() -> str:
    try:
        with open("/proc/loadavg") as handle:
            return " ".join(handle.read().split()[:3])
    except OSError:
        return "?"


# --- comparison ----------------------------------------------------------------------------------------------


def kendall_tau(a: dict[str, float], b: dict[str, float]) -> tuple[float, int]:
    """Kendall's tau-a over keys in both (pairs tied in either order count as neither); (tau, pairs)."""
    keys = sorted(set(a) & set(b), key=lambda k: (a[k], k))
    xs = [a[k] for k in keys]
    ys = [b[k] for k in keys]
    concordant = discordant = 0
    n = len(keys)
    for i in range(n):
        xi, yi = xs[i], ys[i]
        for j in range(i + 1, n):
            dx = xs[j] - xi
            dy = ys[j] - yi
            if dx == 0 or dy == 0:
                continue
            if (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    pairs = concordant + discordant
    return ((concordant - discordant) / pairs if pairs else 1.0), pairs


def usage_percent(out: Outcome, trace: Trace) -> dict[str, float]:
    """Per ClusterQueue: time integral of the CPU it held over nominal x window (Kueue's recorder's figure)."""
    requests = {i.key: i.cpu_milli for i in trace.items}
    window = out.wall_ms or 1.0
    used: dict[str, float] = defaultdict(float)
    for key, spans in out.holding.items():
        for start, end in spans:
            used[key.split("/")[0]] += requests[key] * max(0.0, end - start)
    return {cq: 100 * used[cq] / (20_000 * window) for cq, _ in trace.queues}


def _stats(values: list[float]) -> str:
    if not values:
        return "—"
    values = sorted(values)
    p = lambda q: values[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
    return f"{statistics.mean(values):9.0f} {p(0.5):9.0f} {p(0.9):9.0f}"


def _order_agreement(kueue: Outcome, engine: Outcome, trace: Trace) -> str:
    both = set(kueue.admitted) & set(engine.admitted)
    tau, pairs = kendall_tau({k: kueue.admitted[k] for k in both}, {k: engine.admitted[k] for k in both})
    per_cq = []
    for cq, _ in trace.queues:
        ks = [k for k in both if k.startswith(cq + "/")]
        per_cq.append(kendall_tau({k: kueue.admitted[k] for k in ks}, {k: engine.admitted[k] for k in ks})[0])
    return (
        f"Kendall tau {tau:.3f} over {pairs} ordered pairs; within each ClusterQueue mean {statistics.mean(per_cq):.3f}"
        f", min {min(per_cq):.3f}"
    )


def report(
    trace: Trace, kueue: Outcome, engines: dict[str, Outcome], kueue_cq_usage: dict[str, float], csv_path: Path
) -> None:
    """Print the comparison of Kueue's run with each engine replay; write the per-workload CSV."""
    spec = RANGESPEC[trace.kind]
    items = trace.items
    tta = {"Kueue": {k: kueue.admitted[k] - kueue.created[k] for k in kueue.admitted if k in kueue.created}}
    for label, engine in engines.items():
        tta[label] = {k: engine.admitted[k] - engine.created[k] for k in engine.admitted}
    print(f"\n== {trace.kind}: {len(items)} workloads, {len(trace.queues)} ClusterQueues, {len(trace.nodes)} nodes")
    print(
        f"Kueue: wall (start → last finish) {kueue.wall_ms / 1000:.1f} s (rangespec maxWallMs {spec['maxWallMs']} for"
        f" 5 cohorts); admitted {len(kueue.admitted)}, finished {len(kueue.finished)},"
        f" evictions {sum(kueue.evictions.values())}"
    )
    for note in kueue.notes:
        print(f"  {note}")
    for label, engine in engines.items():
        print(
            f"{label}: simulated wall {engine.wall_ms / 1000:.1f} s in {engine.cpu_seconds:.2f} CPU s; admitted"
            f" {len(engine.admitted)}, finished {len(engine.finished)}, evictions {sum(engine.evictions.values())}"
        )
        print(f"  admission order agreement with Kueue: {_order_agreement(kueue, engine, trace)}")
    labels = ["Kueue", *engines]
    print("time to admission, ms (mean / p50 / p90) per class:")
    for klass in sorted({i.klass for i in items}):
        keys = [i.key for i in items if i.klass == klass]
        cells = [f"{label} {_stats([tta[label][k] for k in keys if k in tta[label]])}" for label in labels]
        limit = spec["maxAvgTimeToAdmissionMs"].get(klass, "")
        print(f"  {klass:<22} " + " | ".join(cells) + f" | rangespec max mean {limit}")
    use_k = usage_percent(kueue, trace)
    status = statistics.mean(kueue_cq_usage.values()) if kueue_cq_usage else 0.0
    print(
        f"ClusterQueue usage, % of nominal over the run (rangespec min {spec['cqMinUsage']}):"
        f" Kueue mean {statistics.mean(use_k.values()):.1f} (min {min(use_k.values()):.1f}; {status:.1f} from its"
        " ClusterQueue status)"
        + "".join(
            f"; {label} mean {statistics.mean(e.usage.values()):.1f} (min {min(e.usage.values()):.1f})"
            for label, e in engines.items()
        )
    )
    last = labels[-1]
    diffs = sorted(set(tta["Kueue"]) & set(tta[last]), key=lambda k: -abs(tta["Kueue"][k] - tta[last][k]))[:5]
    print(f"largest time-to-admission differences, ms (Kueue vs {last}):")
    for k in diffs:
        print(f"  {k:<40} {tta['Kueue'][k]:9.0f} {tta[last][k]:9.0f}")
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    outcomes = {"Kueue": kueue, **engines}
    ranks = {
        label: {k: r for r, k in enumerate(sorted(o.admitted, key=lambda k, o=o: (o.admitted[k], k)))}
        for label, o in outcomes.items()
    }
    slug = {label: label.split(" ")[0].lower() + ("" if i < 2 else "_as_kueue_saw") for i, label in enumerate(labels)}
    with csv_path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        header = ["workload", "class", "priority", "submit_ms", "kueue_created_ms"]
        for label in labels:
            header += [f"{slug[label]}_tta_ms", f"{slug[label]}_rank", f"{slug[label]}_evictions"]
        writer.writerow(header)
        for item in items:
            k = item.key
            row = [k, item.klass, item.priority, item.submit_ms, round(kueue.created.get(k, -1))]
            for label in labels:
                value = tta[label].get(k)
                row += [
                    "" if value is None else round(value),
                    ranks[label].get(k, ""),
                    outcomes[label].evictions.get(k, 0),
                ]
            writer.writerow(row)
    print(f"per-workload figures: {csv_path}")


def _samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples of one metric in Prometheus text: (labels, value)."""
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            head, _, value = line.rpartition(" ")
            labels = dict(part.split("=", 1) for part in head[len(name) + 1 : -1].split(",") if "=" in part)
            out.append(({k: v.strip('"') for k, v in labels.items()}, float(value)))
    return out


def scheduler_figures(metrics: str, wall_ms: float) -> str:
    """Kueue's own account of its scheduler: cycles (admission attempts), their mean duration, admissions, and the
    workloads it admitted per second of the run."""
    attempts = sum(v for _, v in _samples(metrics, "kueue_admission_attempts_total"))
    seconds = sum(v for _, v in _samples(metrics, "kueue_admission_attempt_duration_seconds_sum"))
    admitted = sum(v for _, v in _samples(metrics, "kueue_admitted_workloads_total"))
    preempted = sum(v for _, v in _samples(metrics, "kueue_preempted_workloads_total"))
    mean = 1000 * seconds / attempts if attempts else 0.0
    return (
        f"Kueue's metrics: {attempts:.0f} admission attempts taking {mean:.1f} ms each on average"
        f" ({seconds:.1f} s in all), {admitted:.0f} admissions ({admitted / max(wall_ms / 1000, 1e-9):.1f} a second"
        f" over the run), {preempted:.0f} preemptions"
    )


def as_kueue_saw_it(trace: Trace, run: KueueRun) -> Trace:
    """The trace with Kueue's arrivals (when each Workload really appeared) and run times (from its last admission
    to Kueue seeing it Finished, the harness's lag included): the same inputs for the engine as Kueue had."""
    items = []
    for item in trace.items:
        created = run.out.created.get(item.key)
        admitted, finished = run.admissions.get(item.key), run.out.finished.get(item.key)
        runtime = round(finished - admitted) if admitted is not None and finished is not None else item.runtime_ms
        submit = round(created) if created is not None else item.submit_ms
        items.append(replace(item, submit_ms=max(0, submit), runtime_ms=max(1, runtime)))
    return replace(trace, items=sorted(items, key=lambda i: (i.submit_ms, i.key)))


def kueue_status_usage(run: KueueRun, trace: Trace) -> dict[str, float]:
    """ClusterQueue usage from Kueue's own status (flavorsReservation), integrated as its recorder does."""
    out = {}
    window = run.out.wall_ms or 1.0
    for cq, _ in trace.queues:
        samples = run.cq_usage.get(cq, [])
        used = sum(v * (samples[i + 1][0] - t) for i, (t, v) in enumerate(samples[:-1]))
        out[cq] = 100 * used / (20_000 * window)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", choices=("baseline", "tas", "both"), default="both")
    parser.add_argument("--cohorts", type=int, default=1, help="cohorts of 6 ClusterQueues (Kueue's config: 5)")
    parser.add_argument("--workload-scale", type=int, default=1, help="divide each workload set's count by this")
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="multiply creation intervals and runtimes by this (the same load, arriving more slowly)",
    )
    parser.add_argument("--csv-dir", type=Path, default=ROOT / "var" / "benchmarks")
    parser.add_argument("--ports", default="18400-18499")
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args()
    kinds = ("baseline", "tas") if args.trace == "both" else (args.trace,)
    for kind in kinds:
        trace = make_trace(kind, cohorts=args.cohorts, workload_scale=args.workload_scale, time_scale=args.time_scale)
        print(f"{kind}: engine replay of {len(trace.items)} workloads", flush=True)
        ideal = run_engine(trace)
        run_dir = layout.OUT_DIR / f"bench-{os.getpid()}"  # under var/: other people's clean-ups of /tmp miss it
        try:
            bed = Testbed(run_dir=run_dir, port_range=args.ports, attached=True, echo=lambda s: None)
            print(f"{kind}: starting a testbed (etcd, kube-apiserver, Kueue)", flush=True)
            bed.up()
            try:
                run = KueueRun(bed.api(), trace, run=kind)
                run.setup()
                print(f"{kind}: Kueue run of {len(trace.items)} workloads", flush=True)
                kueue = run.execute(timeout=args.timeout)
                status_usage = kueue_status_usage(run, trace)
                kueue.notes.append(scheduler_figures(bed.kueue_metrics(), kueue.wall_ms))
            finally:
                bed.down(quiet=True)
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)
        if run.errors:
            print(f"  {len(run.errors)} errors, first: {run.errors[:3]}")
        seen = run_engine(as_kueue_saw_it(trace, run))
        engines = {"engine (trace times)": ideal, "engine (Kueue's arrivals and run times)": seen}
        report(trace, kueue, engines, status_usage, args.csv_dir / f"kueue_vs_engine-{kind}.csv")


if __name__ == "__main__":
    main()
