"""Benchmark: wasted GPU-hours to preemption, with and without the portal's protected work, on the same trace.

One cohort of 4 ClusterQueues (16 GPUs nominal each, 64 GPUs, borrowing without limit; each preempts lower
priority within itself and reclaims lent quota from the cohort). Two streams share it:

* training runs (priority 0; 4 or 8 GPUs; 2-10 h of work; two thirds write a checkpoint every 30 min and resume
  from the last one after a preemption, the rest restart from the beginning; each declares a maximum runtime of
  its work + 10 %);
* urgent jobs (priority 100; 1-8 GPUs; 10-60 min), arriving in bursts.

Variants, each replayed on the same trace through the engine (``queues.engine``):

* ``none``: Kueue as it is: a victim is chosen by priority and fair share alone;
* ``checkpoint``: a checkpointing run may be preempted only in the 2 min after a checkpoint (nothing else);
* ``full``: the protection a class would give (``model.Protection``): that, a 20 min minimum runtime for every run,
  and no preemption in the last 15 min of a run that restarts from the beginning (its maximum runtime counts from
  each admission).

Work lost to one preemption (GPU-hours): the GPUs × the time it ran since its admission, or since its last checkpoint
when it writes them. Printed per variant: preemptions, wasted GPU-hours (total, per team queue), the urgent jobs'
mean and 95th percentile wait, and the replay's wall time.

    python benchmarks/preemption_protection.py [--days 3] [--seed 7] [--load 1.3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from queues.engine.model import (
    ClusterQueue,
    ClusterState,
    FlavorQuotas,
    LocalQueue,
    Namespace,
    PodSet,
    PreemptionPolicy,
    Protection,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Workload,
)
from queues.engine.scheduler import Engine
from queues.engine.simulation import Replay

GPU = "nvidia.com/gpu"
TEAMS = ("vision", "nlp", "speech", "robotics")
NOMINAL = 16
CHECKPOINT_EVERY = 1800.0
MIN_RUNTIME = 1200.0
CHECKPOINT_GRACE = 120.0
FINISHING = 900.0
#: none: Kueue alone; checkpoint: only "preempt just after a checkpoint" (runs that checkpoint); full: every rule.
VARIANTS = ("none", "checkpoint", "full")


@dataclass
class Job:
    """One workload of the trace and the work it still has to do."""

    spec: Workload
    gpus: int
    work: float
    checkpoints: bool
    urgent: bool


def trace(*, days: float, seed: int, load: float) -> list[Job]:
    """The workload stream: training runs at ``load`` × 70 % of the capacity, urgent bursts on top."""
    rng = random.Random(seed)
    horizon = days * 86400
    capacity = NOMINAL * len(TEAMS)
    jobs: list[Job] = []
    t = 0.0
    train_rate = load * 0.7 * capacity / (6.0 * 6 * 3600)  # mean 6 GPUs × 6 h
    while t < horizon:
        t += rng.expovariate(train_rate)
        gpus, work = rng.choice((4, 8)), rng.uniform(2 * 3600, 10 * 3600)
        jobs.append(Job(_spec(len(jobs), rng.choice(TEAMS), gpus, 0, t), gpus, work, rng.random() < 2 / 3, False))
    t = 0.0
    while t < horizon:
        t += rng.expovariate(1 / 1800)  # a burst every 30 min on average
        team = rng.choice(TEAMS)
        for _ in range(rng.randint(1, 4)):
            gpus, work = rng.choice((1, 2, 4, 8)), rng.uniform(600, 3600)
            jobs.append(Job(_spec(len(jobs), team, gpus, 100, t), gpus, work, False, True))
    return jobs


def _spec(i: int, team: str, gpus: int, priority: int, at: float) -> Workload:
    return Workload(
        namespace=team,
        name=f"job-{i:05d}",
        queue_name="main",
        pod_sets=(PodSet("main", 1, {GPU: gpus}),),
        priority=priority,
        created_at=at,
        submit_at=at,
    )


def protection_of(job: Job, variant: str) -> Protection | None:
    """What a variant gives a job (urgent jobs are never preempted here: none)."""
    if job.urgent or variant == "none":
        return None
    if variant == "checkpoint":
        if not job.checkpoints:
            return None
        return Protection(checkpoint_interval=CHECKPOINT_EVERY, checkpoint_grace=CHECKPOINT_GRACE)
    if job.checkpoints:
        return Protection(
            min_runtime=MIN_RUNTIME, checkpoint_interval=CHECKPOINT_EVERY, checkpoint_grace=CHECKPOINT_GRACE
        )
    return Protection(min_runtime=MIN_RUNTIME, max_runtime=job.work * 1.1, finishing_window=FINISHING)


def cluster_state() -> ClusterState:
    """The cohort's four queues, no nodes (quota decides)."""
    policy = PreemptionPolicy(within_cluster_queue="LowerPriority", reclaim_within_cohort="Any")
    cqs = tuple(
        ClusterQueue(
            name=team,
            cohort="org",
            resource_groups=(ResourceGroup((GPU,), (FlavorQuotas("gpu", (ResourceQuota(GPU, NOMINAL),)),)),),
            preemption=policy,
        )
        for team in TEAMS
    )
    return ClusterState(
        flavors=(ResourceFlavor("gpu"),),
        cluster_queues=cqs,
        local_queues=tuple(LocalQueue(team, "main", team) for team in TEAMS),
        namespaces=tuple(Namespace(team) for team in TEAMS),
    )


@dataclass
class Figures:
    """What one variant's replay measured."""

    preemptions: int = 0
    wasted_hours: float = 0.0
    wasted_by_team: dict[str, float] | None = None
    wasted_checkpointing: float = 0.0
    urgent_waits: list[float] | None = None
    finished: int = 0
    wall: float = 0.0


def replay(jobs: list[Job], *, variant: str) -> Figures:
    """Replay the trace with a variant's protection; measure the work each preemption threw away."""
    by_key = {j.spec.key: j for j in jobs}
    specs = [replace(j.spec, protection=protection_of(j, variant)) for j in jobs]
    engine = Engine(replace(cluster_state(), workloads=()), now=0.0)
    remaining = {j.spec.key: j.work for j in jobs}
    run = Replay(engine, start=0.0, runtimes=dict(remaining))
    started: dict[str, float] = {}
    first_admission: dict[str, float] = {}
    figures = Figures(wasted_by_team=dict.fromkeys(TEAMS, 0.0), urgent_waits=[])

    def on_admit(key: str, now: float) -> None:
        started[key] = now
        first_admission.setdefault(key, now)
        run.runtimes[key] = remaining[key]
        run.runtime_changed(key, now)

    def on_cycle(now: float, outcome) -> None:
        for pre in outcome.preemptions:
            job = by_key[pre.victim]
            ran = now - started.pop(pre.victim, now)
            kept = (ran // CHECKPOINT_EVERY) * CHECKPOINT_EVERY if job.checkpoints else 0.0
            remaining[pre.victim] -= kept
            lost = job.gpus * (ran - kept) / 3600
            figures.preemptions += 1
            figures.wasted_hours += lost
            figures.wasted_by_team[job.spec.namespace] += lost
            figures.wasted_checkpointing += lost if job.checkpoints else 0.0

    run.on_admit = on_admit
    run.on_cycle = on_cycle
    for spec in specs:
        run.submit_at(spec, spec.created_at)
    began = time.perf_counter()
    result = run.run(until=None)
    figures.wall = time.perf_counter() - began
    figures.finished = sum(1 for r in result.records.values() if r.finished_at is not None)
    for job in jobs:
        if job.urgent and job.spec.key in first_admission:
            figures.urgent_waits.append(first_admission[job.spec.key] - job.spec.created_at)
    return figures


def main() -> None:
    """Replay both variants on one trace and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--load", type=float, default=1.3, help="training load as a share of 70 %% of the capacity")
    args = parser.parse_args()
    jobs = trace(days=args.days, seed=args.seed, load=args.load)
    urgent = sum(j.urgent for j in jobs)
    print(
        f"trace: {len(jobs)} workloads over {args.days:g} days ({len(jobs) - urgent} training runs, {urgent} urgent), "
        f"{NOMINAL * len(TEAMS)} GPUs in one cohort of {len(TEAMS)} queues, seed {args.seed}"
    )
    rows = {}
    for label in VARIANTS:
        f = rows[label] = replay(jobs, variant=label)
        waits = sorted(f.urgent_waits or [0.0])
        p95 = waits[min(len(waits) - 1, int(0.95 * len(waits)))]
        print(f"== {label}")
        print(f"  preemptions: {f.preemptions}   finished: {f.finished}/{len(jobs)}   replay wall time: {f.wall:.2f} s")
        print(
            f"  wasted GPU-hours (work lost to preemption): {f.wasted_hours:,.1f} (runs that checkpoint "
            f"{f.wasted_checkpointing:,.1f}, runs that restart {f.wasted_hours - f.wasted_checkpointing:,.1f})"
        )
        print("  per team: " + ", ".join(f"{t} {h:,.1f}" for t, h in (f.wasted_by_team or {}).items()))
        print(f"  urgent jobs' wait: mean {statistics.mean(waits) / 60:.1f} min, p95 {p95 / 60:.1f} min")
    before = rows["none"].wasted_hours
    print(f"wasted GPU-hours without protection: {before:,.1f}")
    for label in VARIANTS[1:]:
        after = rows[label].wasted_hours
        change = (after / before - 1) * 100 if before else 0.0
        print(f"wasted GPU-hours with protection '{label}': {after:,.1f} ({change:+.0f} %)")


if __name__ == "__main__":
    main()
