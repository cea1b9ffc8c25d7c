"""Benchmark: replay 15,000 workloads through the admission engine (``--until end`` semantics).

5 cohorts x 6 ClusterQueues (nominal 20 GPUs, borrowingLimit 100 each, one flavor), workloads of 1, 4
and 8 GPUs submitted over simulated time with runtimes. Variants: quota only (no nodes), and with
nodes (8 GPUs each, in racks; ``--nodes``). Prints wall time, workloads decided per second,
utilisation per ClusterQueue and mean time to admission per size.

    python benchmarks/engine_replay.py [--workloads 15000] [--nodes] [--load 1.05] [--seed 7] [--fair-sharing]
    python benchmarks/engine_replay.py --node-count 2000 [--workloads 15000]
    python benchmarks/engine_replay.py --scaling [--fair-sharing]
    python benchmarks/engine_replay.py --digest [--node-count 2000 | --nodes-only] [--fair-sharing]

``--node-count N`` uses N nodes of 8 GPUs in NVLink domains (4 nodes, label ``nvidia.com/gpu.clique``), racks
(16 nodes) and blocks (128 nodes), and gives a third of the workloads a topology rule (8 GPUs as 2 pods of 4 in
one NVLink domain, required; 4 GPUs as 4 pods of 1, rack preferred; 1 GPU, block preferred). ``--scaling``
prints decisions per CPU second for 1,500 / 15,000 / 60,000 workloads, quota only and on 75 / 2,000 / 8,000
such nodes. ``--digest`` prints sha256 digests of the chosen variant's decisions instead of timing it (to show
that a change of the engine decides exactly as before).

``--fair-sharing`` turns on Kueue's fair sharing (default preemption strategies; the queues do not preempt,
so it changes the admission order only: the tournament through each cohort).
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from queues.engine import native
from queues.engine.model import (
    ClusterQueue,
    ClusterState,
    FairSharing,
    FlavorQuotas,
    LocalQueue,
    Namespace,
    Node,
    PodSet,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Topology,
    TopologyRequest,
    Workload,
)
from queues.engine.scenario import Scenario, run_scenario
from queues.engine.scheduler import CycleOutcome, Engine
from queues.engine.simulation import Replay

GPU = "nvidia.com/gpu"
SIZES = (1, 4, 8)
CLIQUE = "nvidia.com/gpu.clique"
LEVELS = ("block", "rack", CLIQUE, "kubernetes.io/hostname")
#: With ``node_count``: how a workload of each size is shaped when it carries a topology rule.
TOPOLOGY_SHAPES = {
    8: (2, 4, TopologyRequest(required=CLIQUE)),
    4: (4, 1, TopologyRequest(preferred="rack")),
    1: (1, 1, TopologyRequest(preferred="block")),
}


def topology_nodes(count: int) -> list[Node]:
    """``count`` nodes of 8 GPUs: NVLink domains of 4 nodes, racks of 16, blocks of 128."""
    return [
        Node(
            name=f"gpu-{i:05d}",
            labels={
                "pool": "gpu",
                "block": f"b{i // 128}",
                "rack": f"r{i // 16}",
                CLIQUE: f"c{i // 4}",
                "kubernetes.io/hostname": f"gpu-{i:05d}",
            },
            capacity={GPU: 8},
            allocatable={GPU: 8},
        )
        for i in range(count)
    ]


def build(
    n_workloads: int, *, nodes: bool, load: float, seed: int, fair: bool = False, node_count: int = 0
) -> Scenario:
    """A synthetic cluster and a workload stream offered at ``load`` times the total nominal capacity."""
    rng = random.Random(seed)
    nodes = nodes or node_count > 0
    flavor = ResourceFlavor("gpu", node_labels={"pool": "gpu"}, topology_name="dc" if nodes else None)
    cqs = []
    lqs = []
    namespaces = []
    for c in range(5):
        for q in range(6):
            name = f"team-{c}-{q}"
            cqs.append(
                ClusterQueue(
                    name=name,
                    cohort=f"cohort-{c}",
                    resource_groups=(
                        ResourceGroup((GPU,), (FlavorQuotas("gpu", (ResourceQuota(GPU, 20, borrowing_limit=100),)),)),
                    ),
                )
            )
            lqs.append(LocalQueue(name, "main", name))
            namespaces.append(Namespace(name))
    node_list = []
    if node_count:
        node_list = topology_nodes(node_count)
    elif nodes:
        # 600 GPUs: 75 nodes of 8 GPUs in 5 blocks x 3 racks x 5 nodes.
        for i in range(75):
            node_list.append(
                Node(
                    name=f"gpu-{i:03d}",
                    labels={
                        "pool": "gpu",
                        "block": f"b{i // 15}",
                        "rack": f"r{i // 5}",
                        "kubernetes.io/hostname": f"gpu-{i:03d}",
                    },
                    capacity={GPU: 8},
                    allocatable={GPU: 8},
                )
            )
    capacity = 30 * 20
    mean_size = statistics.mean(SIZES)
    mean_runtime = 3600.0
    rate = load * capacity / (mean_size * mean_runtime)  # workloads per second
    t = 0.0
    submissions = []
    for i in range(n_workloads):
        t += rng.expovariate(rate)
        size = rng.choice(SIZES)
        cq = rng.randrange(30)
        ns = f"team-{cq // 6}-{cq % 6}"
        runtime = rng.uniform(600, 2 * mean_runtime - 600)
        pod_set = PodSet("main", 1, {GPU: size})
        if node_count and rng.random() < 1 / 3:
            pods, per_pod, rule = TOPOLOGY_SHAPES[size]
            pod_set = PodSet("main", pods, {GPU: per_pod}, topology=rule)
        wl = Workload(
            namespace=ns,
            name=f"job-{i:05d}",
            queue_name="main",
            pod_sets=(pod_set,),
            priority=rng.choice((0, 0, 0, 100)),
            created_at=t,
            runtime=runtime,
            submit_at=t,
        )
        submissions.append((t, wl))
    state = ClusterState(
        flavors=(flavor,),
        topologies=(
            (Topology("dc", LEVELS if node_count else ("block", "rack", "kubernetes.io/hostname")),) if nodes else ()
        ),
        cluster_queues=tuple(cqs),
        local_queues=tuple(lqs),
        namespaces=tuple(namespaces),
        nodes=tuple(node_list),
        fair_sharing=FairSharing() if fair else None,
    )
    return Scenario(state=state, start=0.0, submissions=tuple(submissions))


def report(label: str, scenario: Scenario) -> None:
    """Run one variant and print its figures."""
    started = time.perf_counter()
    cpu_started = time.process_time()
    doc = run_scenario(scenario, mode="replay", until=None)
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    rows = doc["workloads"]
    decided = sum(1 for w in rows if w["admittedAt"] is not None or w["state"] == "finished")
    print(f"== {label}")
    print(
        f"workloads: {len(rows)}   admitted at least once: {decided}   still pending: "
        f"{sum(1 for w in rows if w['state'] == 'pending')}"
    )
    print(
        f"wall time: {wall:.2f} s (CPU {cpu:.2f} s)   decided per second: {decided / wall:,.0f} "
        f"(per CPU second: {decided / cpu:,.0f})"
    )
    sizes: dict[int, list[float]] = {s: [] for s in SIZES}
    by_name = {f"{wl.namespace}/{wl.name}": wl for _, wl in scenario.submissions}
    for w in rows:
        if w["admittedAt"] is None:
            continue
        ps = by_name[w["name"]].pod_sets[0]
        size = ps.count * next(iter(ps.requests.values()))
        sizes[size].append(w["admittedAt"] - w["submittedAt"])
    for size, waits in sizes.items():
        if waits:
            print(f"  mean time to admission, {size} GPU(s): {statistics.mean(waits) / 60:8.1f} min  (n={len(waits)})")
    wait = doc["summary"]["waitSeconds"]
    print(f"  wait p50 {wait['p50'] / 60:.1f} min, p90 {wait['p90'] / 60:.1f} min")
    queues = doc["summary"]["clusterQueues"]
    utils = [q["utilization"] for q in queues.values()]
    print(
        f"  utilisation per ClusterQueue (share of nominal, time-averaged): mean {statistics.mean(utils):.3f}, "
        f"min {min(utils):.3f}, max {max(utils):.3f}"
    )
    line = []
    for name, q in queues.items():
        line.append(f"{name}={q['utilization']:.2f}")
        if len(line) == 6:
            print("   ", " ".join(line))
            line = []


def measure(scenario: Scenario) -> tuple[int, float]:
    """(workloads decided, CPU seconds) of one replay."""
    cpu_started = time.process_time()
    doc = run_scenario(scenario, mode="replay", until=None)
    cpu = time.process_time() - cpu_started
    decided = sum(1 for w in doc["workloads"] if w["admittedAt"] is not None or w["state"] == "finished")
    return decided, cpu


def digest(scenario: Scenario) -> str:
    """sha256 of the replay's decision stream: per cycle, its time, the admissions (queue, flavors, nodes,
    borrowing, checks) and preemptions in order, then the ``run_scenario`` document (states, times, summary)."""
    engine = Engine(scenario.state, scenario.start)
    replay = Replay(engine, start=scenario.start, checks_delay=scenario.checks_delay)
    for when, wl in scenario.submissions:
        replay.submit_at(wl, when)
    stream = hashlib.sha256()

    def record(now: float, outcome: CycleOutcome) -> None:
        if outcome.admitted or outcome.preemptions:
            admitted = [
                (
                    d.workload,
                    d.cluster_queue,
                    [(p.name, p.count, sorted(p.flavors.items()), p.nodes) for p in d.pod_sets],
                    d.borrowing,
                    d.pending_checks,
                )
                for d in outcome.admitted
            ]
            preempted = [(p.victim, p.preemptor, p.reason, p.message) for p in outcome.preemptions]
            stream.update(repr((now, admitted, preempted)).encode())

    replay.on_cycle = record
    replay.run(until=None)
    doc = run_scenario(scenario, mode="replay", until=None)
    doc_hash = hashlib.sha256(repr(doc).encode()).hexdigest()
    return f"decisions {stream.hexdigest()[:16]}  document {doc_hash[:16]}"


def scaling(fair: bool, load: float, seed: int, workloads: tuple[int, ...], node_counts: tuple[int, ...]) -> None:
    """Print decisions per CPU second for each workload count, quota only and on each node count."""
    print(f"== scaling{' (fair sharing on)' if fair else ''}: decisions per CPU second (CPU seconds)")
    header = ["workloads", "quota only", *(f"{n:,} nodes" for n in node_counts)]
    print(" | ".join(f"{h:>20}" for h in header))
    for n in workloads:
        cells = [f"{n:,}"]
        for count in (0, *node_counts):
            scenario = build(n, nodes=False, load=load, seed=seed, fair=fair, node_count=count)
            decided, cpu = measure(scenario)
            cells.append(f"{decided / cpu:,.0f} ({cpu:.2f} s)")
        print(" | ".join(f"{c:>20}" for c in cells), flush=True)


def main() -> None:
    """Parse arguments and run the variants."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=15000)
    parser.add_argument("--load", type=float, default=1.05, help="offered load relative to total nominal quota")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--nodes", action="store_true", help="also run the variant with 75 nodes (TAS racks)")
    parser.add_argument("--nodes-only", action="store_true")
    parser.add_argument("--fair-sharing", action="store_true", help="Kueue fair sharing on (admission tournament)")
    parser.add_argument("--node-count", type=int, default=0, help="N nodes in NVLink domains/racks/blocks")
    parser.add_argument("--scaling", action="store_true", help="the scaling table (workloads x nodes)")
    parser.add_argument("--scaling-workloads", default="1500,15000,60000")
    parser.add_argument("--scaling-nodes", default="75,2000,8000")
    parser.add_argument(
        "--digest", action="store_true", help="print sha256 digests of the decisions of the chosen variant, no timing"
    )
    args = parser.parse_args()
    fair = args.fair_sharing
    if args.digest:
        nodes = args.nodes or args.nodes_only or args.node_count > 0
        scenario = build(
            args.workloads, nodes=nodes, load=args.load, seed=args.seed, fair=fair, node_count=args.node_count
        )
        print(digest(scenario))
        return
    print(native.describe())
    if args.scaling:
        scaling(
            fair,
            args.load,
            args.seed,
            tuple(int(x) for x in args.scaling_workloads.split(",")),
            tuple(int(x) for x in args.scaling_nodes.split(",")),
        )
        return
    suffix = ", fair sharing on" if fair else ""
    if args.node_count:
        report(
            f"with {args.node_count:,} nodes x 8 GPUs (NVLink domain/rack/block, a third with a topology rule){suffix}",
            build(args.workloads, nodes=True, load=args.load, seed=args.seed, fair=fair, node_count=args.node_count),
        )
        return
    if not args.nodes_only:
        report(
            f"quota only (no nodes){suffix}",
            build(args.workloads, nodes=False, load=args.load, seed=args.seed, fair=fair),
        )
    if args.nodes or args.nodes_only:
        report(
            f"with 75 nodes x 8 GPUs (block/rack/host topology){suffix}",
            build(args.workloads, nodes=True, load=args.load, seed=args.seed, fair=fair),
        )


if __name__ == "__main__":
    main()
