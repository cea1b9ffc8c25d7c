"""The idle-GPU scan (queues.idle) at fleet size: it runs every minute, so its steady state must be cheap.

Builds a fresh throwaway database (SQLite under var/ by default, or ``--database-url`` / DATABASE_URL) with
``--jobs`` running one-GPU jobs of a class with a 30-minute idle window, and 31 activity samples per card (one a
minute), then reports the CPU seconds (median of ``--repeat``) and SQL queries of:

* a scan where every job is busy (the steady state: a snapshot, nothing locked, nothing written);
* the first scan where every job is idle (each is locked and warned: a timeline event and a notification each);
* the scan again at the same instant (nothing to do).

    .venv/bin/python benchmarks/idle_scan.py                 # SQLite, 500 jobs
    .venv/bin/python benchmarks/idle_scan.py --jobs 2000
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import timedelta

from _setup import add_database_argument, setup_django


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    add_database_argument(parser, "bench_idle.sqlite3")
    return parser.parse_args()


ARGS = parse_args()
setup_django(ARGS.database_url, fresh_sqlite=True)

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.utils import timezone  # noqa: E402

from pools.gpu_usage import GpuUtilSample  # noqa: E402
from pools.models import Allocation, Cluster, Device, Node, ResourceClass, ResourceFlavor  # noqa: E402
from queues.idle import idle_negotiations_scan  # noqa: E402
from queues.models import Job, JobEvent, JobIdle, Membership, Team  # noqa: E402

WINDOW = 1800


def build(n: int, *, percent: float):
    """``n`` running jobs on ``n`` cards, each card sampled every minute for the last 31 minutes at ``percent``."""
    call_command("migrate", verbosity=0)
    now = timezone.now().replace(microsecond=0)
    cluster = Cluster.objects.create(name="bench-idle", backend="simulated")
    flavor = ResourceFlavor.objects.create(name="bench-h100")
    rc = ResourceClass.objects.create(
        slug="bench-dev",
        name="Bench dev",
        resource_name="nvidia.com/gpu",
        allowed_counts=[1],
        idle_window_seconds=WINDOW,
    )
    team = Team.objects.create(slug="bench", name="Bench", namespace="bench", local_queue_name="main")
    user = get_user_model().objects.create(username="bench")
    Membership.objects.create(team=team, user=user)
    nodes = Node.objects.bulk_create(
        Node(cluster=cluster, name=f"n{i:04d}", flavor=flavor, ready=True, first_seen_at=now, last_seen_at=now)
        for i in range((n + 7) // 8)
    )
    devices = Device.objects.bulk_create(
        Device(
            node=node,
            key=f"{node.name}-{i}",
            uuid=f"GPU-{node.name}-{i}",
            vendor="nvidia",
            index=i,
            kind="full",
            resource_name="nvidia.com/gpu",
            first_seen_at=now,
            last_seen_at=now,
        )
        for node in nodes
        for i in range(8)
    )[:n]
    started = now - timedelta(hours=2)
    jobs = Job.objects.bulk_create(
        Job(
            team=team,
            owner=user,
            cluster=cluster,
            name=f"s{i}",
            image="jupyter/base:1",
            resource_class=rc,
            state=Job.State.RUNNING,
            submitted_at=started,
            queued_at=started,
            admitted_at=started,
            started_at=started,
            state_changed_at=started,
        )
        for i in range(n)
    )
    Allocation.objects.bulk_create(
        Allocation(job=job, device=device, pod_index=0, started_at=started)
        for job, device in zip(jobs, devices, strict=True)
    )
    GpuUtilSample.objects.bulk_create(
        (
            GpuUtilSample(device=d, observed_at=now - timedelta(minutes=m), gpu_util=percent)
            for d in devices
            for m in range(31)
        ),
        batch_size=2000,
    )
    return now


class QueryCounter:
    """A database execute wrapper that counts the queries (Django's query log stops at 9,000)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        self.count += 1
        return execute(sql, params, many, context)


def measure(label: str, now, *, undo=None) -> None:
    """CPU seconds (median) and queries of one scan at ``now`` (``undo`` puts the state back between runs)."""
    times, queries = [], 0
    for _ in range(ARGS.repeat):
        with transaction.atomic():
            sid = transaction.savepoint()
            counter = QueryCounter()
            start = time.process_time()
            with connection.execute_wrapper(counter):
                idle_negotiations_scan(now=now)
            times.append(time.process_time() - start)
            queries = counter.count
            if undo is not None:
                transaction.savepoint_rollback(sid)
    print(f"{label:<44} {statistics.median(times):8.3f} s CPU  {queries:6d} queries")


def main() -> None:
    busy = build(ARGS.jobs, percent=60.0)
    print(f"{ARGS.jobs} running jobs, {GpuUtilSample.objects.count()} samples ({connection.vendor})")
    measure("every job busy (steady state)", busy)
    assert not JobIdle.objects.exists()
    GpuUtilSample.objects.update(gpu_util=1.0)
    measure("every job idle: first scan (warns each)", busy, undo=True)
    idle_negotiations_scan(now=busy)
    assert JobIdle.objects.filter(phase="warned").count() == ARGS.jobs
    warned = JobEvent.objects.count()
    measure("the same instant again (nothing to do)", busy)
    assert JobEvent.objects.count() == warned


if __name__ == "__main__":
    main()
