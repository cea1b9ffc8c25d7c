"""Health ingestion at fleet size: parsing and ingesting dcgm-exporter scrapes, and the health pages' selectors.

Builds a throwaway database (SQLite under var/ by default, or ``--database-url`` / DATABASE_URL, e.g.
postgres://postgres@127.0.0.1:5432/bench_health) with ``--nodes`` nodes of 8 GPUs (once; a later run reuses
them), then times:

* parsing one node's scrape (the exporter's layout, 12 fields × 8 GPUs) and a whole-fleet scrape;
* ingesting the whole fleet's scrape: the first time (every signal created) and in steady state (nothing new);
* ingesting a fleet scrape in which one GPU reports XID 79 (ticket opened, device quarantined);
* the health map (100 nodes a page), the ticket queue, per-class figures and quota coverage.

    .venv/bin/python benchmarks/health_ingest.py                 # SQLite, 125 nodes = 1,000 GPUs
    .venv/bin/python benchmarks/health_ingest.py --nodes 500 --database-url postgres://postgres@127.0.0.1:5432/bench_health

Prints wall time (ms) and SQL queries per operation. A scrape every 30 s must ingest well within 30 s.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import timedelta

from _setup import add_database_argument, setup_django


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=125)
    parser.add_argument("--repeat", type=int, default=5)
    add_database_argument(parser, "bench_health.sqlite3")
    return parser.parse_args()


ARGS = parse_args()
setup_django(ARGS.database_url)

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from pools.health import selectors  # noqa: E402
from pools.health.dcgm import parse_scrape  # noqa: E402
from pools.health.ingest import health_ingest_scrape  # noqa: E402
from pools.models import (  # noqa: E402
    Cluster,
    Device,
    DeviceHealthTransition,
    HealthObservation,
    HealthSignal,
    Node,
    RepairTicket,
    ResourceClass,
    ResourceClassFlavor,
    ResourceFlavor,
)

FIELDS = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", 1980),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", 2619),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", 41),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", 45),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", 412.5),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", 123456789),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", 0),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", 97),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", 0),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", 0),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", 0),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", 0),
)


def scrape(nodes: list[str], *, xid_at: tuple[str, int] | None = None, energy: int = 0) -> str:
    """A scrape of 8 GPUs per node in the exporter's layout."""
    lines = []
    for name, kind, value in FIELDS:
        lines += [f"# HELP {name} {name}.", f"# TYPE {name} {kind}"]
        for node in nodes:
            for i in range(8):
                v = value + energy if name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" else value
                labels = (
                    f'gpu="{i}",UUID="GPU-{node}-{i}",pci_bus_id="00000000:{0x18 + i:02X}:00.0",device="nvidia{i}",'
                    f'modelName="NVIDIA H100 80GB HBM3",Hostname="{node}",DCGM_FI_DRIVER_VERSION="580.126.09"'
                )
                if name == "DCGM_FI_DEV_XID_ERRORS":
                    v = 79 if xid_at == (node, i) else 0
                    labels += f',err_code="{v}",err_msg="{"No Error" if v == 0 else "GPU has fallen off the bus"}"'
                lines.append(f"{name}{{{labels}}} {v}")
    return "\n".join(lines) + "\n"


def build(n: int) -> list[str]:
    """The bench cluster with ``n`` nodes of 8 H100s (created once)."""
    call_command("migrate", verbosity=0)
    cluster, _ = Cluster.objects.get_or_create(name="bench-health", defaults={"backend": "simulated"})
    flavor, _ = ResourceFlavor.objects.get_or_create(name="bench-h100")
    rc, created = ResourceClass.objects.get_or_create(
        slug="bench-h100", defaults={"name": "Bench H100", "resource_name": "nvidia.com/gpu", "allowed_counts": [1, 8]}
    )
    if created:
        ResourceClassFlavor.objects.create(resource_class=rc, flavor=flavor, order=0)
    names = [f"bench-gpu-{i:04d}" for i in range(n)]
    have = set(Node.objects.filter(cluster=cluster).values_list("name", flat=True))
    now = timezone.now()
    new_nodes = Node.objects.bulk_create(
        Node(cluster=cluster, name=name, flavor=flavor, ready=True, first_seen_at=now, last_seen_at=now)
        for name in names
        if name not in have
    )
    Device.objects.bulk_create(
        Device(
            node=node,
            uuid=f"GPU-{node.name}-{i}",
            key=f"GPU-{node.name}-{i}",
            vendor="nvidia",
            product="NVIDIA H100 80GB HBM3",
            index=i,
            kind="full",
            resource_name="nvidia.com/gpu",
            first_seen_at=now,
            last_seen_at=now,
        )
        for node in new_nodes
        for i in range(8)
    )
    return names


def reset() -> None:
    """Forget the health history of an earlier run, so "first time" is the first time."""
    mine = {"device__node__cluster__name": "bench-health"}
    HealthSignal.objects.filter(**mine).delete()
    HealthObservation.objects.filter(**mine).delete()
    DeviceHealthTransition.objects.filter(**mine).delete()
    RepairTicket.objects.filter(node__cluster__name="bench-health").delete()
    Device.objects.filter(node__cluster__name="bench-health").update(health="healthy", health_reason="")


def timed(fn):
    """Wall time (ms), SQL statements run, and the result of ``fn()``."""
    count = [0]

    def counter(execute, sql, params, many, context):
        count[0] += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(counter):
        start = time.perf_counter()
        result = fn()
        elapsed = (time.perf_counter() - start) * 1000
    return elapsed, count[0], result


def main() -> None:
    names = build(ARGS.nodes)
    reset()
    gpus = len(names) * 8
    vendor = connection.vendor
    print(f"{vendor}: {len(names)} nodes, {gpus} GPUs")
    one = scrape(names[:1])
    fleet = scrape(names)
    t = [timed(lambda: parse_scrape(one))[0] for _ in range(ARGS.repeat)]
    print(f"parse one node's scrape ({len(one) / 1024:.0f} KiB): p50 {statistics.median(t):.1f} ms")
    t = [timed(lambda: parse_scrape(fleet))[0] for _ in range(max(ARGS.repeat // 2, 1))]
    print(f"parse the fleet scrape ({len(fleet) / 1024 / 1024:.1f} MiB): p50 {statistics.median(t):.0f} ms")
    base = timezone.now()
    node_scrapes = [scrape([n], energy=500) for n in names[:10]]
    runs = [
        timed(lambda text=text: health_ingest_scrape(text=text, now=base - timedelta(minutes=5)))
        for text in node_scrapes
    ]
    print(
        f"ingest one node's scrape (8 GPUs; what one exporter serves), first time: "
        f"p50 {statistics.median(r[0] for r in runs):.0f} ms, {runs[-1][1]} queries"
    )
    node_scrapes = [scrape([n], energy=900) for n in names[:10]]
    runs = [
        timed(lambda text=text: health_ingest_scrape(text=text, now=base - timedelta(minutes=4)))
        for text in node_scrapes
    ]
    print(
        f"ingest one node's scrape, steady state: p50 {statistics.median(r[0] for r in runs):.0f} ms, "
        f"{runs[-1][1]} queries"
    )
    ms, queries, _ = timed(lambda: health_ingest_scrape(text=fleet, now=base))
    print(f"ingest the fleet scrape, first time: {ms:.0f} ms, {queries} queries ({ms / gpus:.2f} ms/GPU)")
    steady = []
    for k in range(1, ARGS.repeat + 1):
        text = scrape(names, energy=k * 1000)
        ms, queries, _ = timed(
            lambda text=text, k=k: health_ingest_scrape(text=text, now=base + timedelta(seconds=30 * k))
        )
        steady.append((ms, queries))
    print(
        f"ingest the fleet scrape, steady state: p50 {statistics.median(m for m, _ in steady):.0f} ms, "
        f"{steady[-1][1]} queries ({statistics.median(m for m, _ in steady) / gpus:.2f} ms/GPU)"
    )
    fault = scrape(names, xid_at=(names[len(names) // 2], 3), energy=(ARGS.repeat + 1) * 1000)
    at = base + timedelta(seconds=30 * (ARGS.repeat + 1))
    ms, queries, report = timed(lambda: health_ingest_scrape(text=fault, now=at))
    print(
        f"ingest with one XID 79: {ms:.0f} ms, {queries} queries, "
        f"{len(report.changes)} state changes, tickets {report.tickets_opened}"
    )
    for label, fn in (
        ("health map, page 1 (100 nodes)", lambda: selectors.health_map(page=1, per_page=100)),
        ("health map, problems only", lambda: selectors.health_map(problems_only=True)),
        ("ticket queue (open)", lambda: selectors.ticket_queue()),
        ("per-class figures (MTTR, out)", lambda: selectors.class_health()),
        ("quota coverage", lambda: selectors.quota_coverage()),
    ):
        runs = [timed(fn) for _ in range(ARGS.repeat)]
        print(f"{label}: p50 {statistics.median(r[0] for r in runs):.1f} ms, {runs[-1][1]} queries")


if __name__ == "__main__":
    main()
