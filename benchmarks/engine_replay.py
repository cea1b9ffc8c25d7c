"""Benchmark: replay 15,000 workloads through the admission engine (``--until end`` semantics).

5 cohorts x 6 ClusterQueues (nominal 20 GPUs, borrowingLimit 100 each, one flavor), workloads of 1, 4
and 8 GPUs submitted over simulated time with runtimes. Variants: quota only (no nodes), and with
nodes (8 GPUs each, in racks; ``--nodes``). Prints wall time, workloads decided per second,
utilisation per ClusterQueue and mean time to admission per size.

    python benchmarks/engine_replay.py [--workloads 15000] [--nodes] [--load 1.05] [--seed 7] [--fair-sharing]

``--fair-sharing`` turns on Kueue's fair sharing (default preemption strategies; the queues do not preempt,
so it changes the admission order only: the tournament through each cohort).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

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
    Workload,
)
from queues.engine.scenario import Scenario, run_scenario

GPU = "nvidia.com/gpu"
SIZES = (1, 4, 8)


def build(n_workloads: int, *, nodes: bool, load: float, seed: int, fair: bool = False) -> Scenario:
    """A synthetic cluster and a workload stream offered at ``load`` times the total nominal capacity."""
    rng = random.Random(seed)
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
    if nodes:
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
        wl = Workload(
            namespace=ns,
            name=f"job-{i:05d}",
            queue_name="main",
            pod_sets=(PodSet("main", 1, {GPU: size}),),
            priority=rng.choice((0, 0, 0, 100)),
            created_at=t,
            runtime=runtime,
            submit_at=t,
        )
        submissions.append((t, wl))
    state = ClusterState(
        flavors=(flavor,),
        topologies=(Topology("dc", ("block", "rack", "kubernetes.io/hostname")),) if nodes else (),
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
        size = next(iter(by_name[w["name"]].pod_sets[0].requests.values()))
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


def main() -> None:
    """Parse arguments and run the variants."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=15000)
    parser.add_argument("--load", type=float, default=1.05, help="offered load relative to total nominal quota")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--nodes", action="store_true", help="also run the variant with 75 nodes (TAS racks)")
    parser.add_argument("--nodes-only", action="store_true")
    parser.add_argument("--fair-sharing", action="store_true", help="Kueue fair sharing on (admission tournament)")
    args = parser.parse_args()
    fair = args.fair_sharing
    suffix = ", fair sharing on" if fair else ""
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
