"""Benchmark of the pool overview: 10,000 devices on ~1,250 nodes, timed through Django's test client.

Usage (from the repository root):

    .venv/bin/python benchmarks/pool_overview.py [--requests 30] [--keep]

Without ``DATABASE_URL`` it uses a throwaway SQLite file under var/ (deleted first, and afterwards unless
``--keep``). With ``DATABASE_URL`` it migrates that database and adds rows to it: point it at an empty, throwaway
database. Figures are server time as the test client sees it (view, templates, middleware; no network).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
SQLITE_PATH = REPO / "var" / "bench_pool_overview.sqlite3"

GiB = 1024**3


def configure() -> bool:
    """Point Django at the benchmark database; True when it is the throwaway SQLite file."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.setdefault("DEBUG", "false")
    throwaway = not os.environ.get("DATABASE_URL")
    if throwaway:
        SQLITE_PATH.parent.mkdir(exist_ok=True)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{SQLITE_PATH}{suffix}").unlink(missing_ok=True)
        os.environ["DATABASE_URL"] = f"sqlite:///{SQLITE_PATH}"
    import django

    django.setup()
    return throwaway


#: flavor: (nodes, cards per node, units per card, resource name, product, vendor, memory per unit)
KINDS = {
    "h100": (700, 8, 0, "nvidia.com/gpu", "NVIDIA H100 80GB HBM3", "nvidia", 80 * GiB),
    "mi300x": (300, 8, 0, "amd.com/gpu", "AMD Instinct MI300X", "amd", 192 * GiB),
    "a100-mig": (125, 1, 7, "nvidia.com/mig-1g.10gb", "NVIDIA A100-SXM4-80GB", "nvidia", 10 * GiB),
    "l4-shared": (125, 2, 4, "nvidia.com/gpu.shared", "NVIDIA L4", "nvidia", 24 * GiB),
}


def populate(*, seed: int = 7) -> dict[str, int]:
    """Two clusters, four flavors, ~1,250 nodes and ~10,000 schedulable units with a mix of states and jobs."""
    from django.utils import timezone

    from pools.models import Device

    rng = random.Random(seed)
    now = timezone.now()
    clusters, flavors, classes, owner, teams = populate_catalogue()
    nodes = populate_nodes(rng, now, clusters, flavors)
    populate_devices(rng, now, nodes)
    jobs, allocations = populate_jobs(rng, now, teams=teams, owner=owner, classes=classes)
    return {
        "nodes": len(nodes),
        "devices": Device.objects.count(),
        "schedulable units": Device.objects.exclude(resource_name="").count(),
        "jobs": len(jobs),
        "open allocations": len(allocations),
    }


def populate_catalogue() -> tuple[list, dict, dict, object, list]:
    """Clusters, one flavor and one class per kind, the owner, eight teams with a quota of 64 per flavor."""
    from django.contrib.auth import get_user_model

    from pools.models import Cluster, ResourceClass, ResourceClassFlavor, ResourceFlavor
    from queues.models import QuotaLine, Team, TeamQuota

    clusters = [Cluster.objects.create(name=f"bench-{n}") for n in ("east", "west")]
    flavors = {
        name: ResourceFlavor.objects.create(name=name, display_name=name.upper(), node_labels={"pool/flavor": name})
        for name in KINDS
    }
    classes = {}
    for order, (name, spec) in enumerate(KINDS.items()):
        rc = ResourceClass.objects.create(
            slug=f"{name}-class", name=f"{name.upper()} class", resource_name=spec[3], display_order=order
        )
        ResourceClassFlavor.objects.create(resource_class=rc, flavor=flavors[name])
        classes[name] = rc
    owner = get_user_model().objects.create_user("bench", password="bench")
    teams = [Team.objects.create(slug=f"team-{i}", name=f"Team {i}", namespace=f"team-{i}") for i in range(8)]
    for team in teams:
        for cluster in clusters:
            quota = TeamQuota.objects.create(
                team=team, cluster=cluster, cluster_queue_name=f"{team.slug}-{cluster.name}"
            )
            for name, spec in KINDS.items():
                QuotaLine.objects.create(team_quota=quota, flavor=flavors[name], resource_name=spec[3], nominal="64")
    return clusters, flavors, classes, owner, teams


def populate_nodes(rng: random.Random, now, clusters: list, flavors: dict) -> list:
    """The nodes of every kind, alternating clusters; about 1 % not ready and 3 % cordoned."""
    from pools.models import Node

    nodes = []
    for name, (count, *_rest) in KINDS.items():
        for i in range(count):
            roll = rng.random()
            nodes.append(
                Node(
                    cluster=clusters[i % 2],
                    name=f"{name}-{i:04d}",
                    labels={"pool/flavor": name},
                    flavor=flavors[name],
                    ready=roll > 0.01,
                    unschedulable=0.01 < roll <= 0.04,
                    first_seen_at=now,
                    last_seen_at=now,
                )
            )
    Node.objects.bulk_create(nodes, batch_size=500)
    return list(Node.objects.select_related("flavor").order_by("id"))


def health(rng: random.Random) -> tuple[str, str]:
    """A random health state and its reason: mostly healthy, a few percent of each other state."""
    roll = rng.random()
    if roll < 0.015:
        return "unhealthy", "XID 79: GPU has fallen off the bus"
    if roll < 0.03:
        return "degraded", "ECC single-bit errors above threshold"
    if roll < 0.035:
        return "quarantined", "Repair ticket open"
    if roll < 0.038:
        return "validating", "Burn-in running"
    if roll < 0.04:
        return "retired", "RMA"
    return "healthy", ""


def populate_devices(rng: random.Random, now, nodes: list) -> None:
    """The cards of every node, then the MIG instances or time-shared replicas of the partitioned ones."""
    from pools.models import Device

    cards, units_of = [], {}
    for node in nodes:
        _count, per_node, per_card, resource, product, vendor, memory = KINDS[node.flavor.name]
        for index in range(per_node):
            state, reason = health(rng)
            partitioned = per_card > 0
            card = Device(
                node=node,
                key=f"{node.name}-gpu{index}",
                uuid=f"GPU-{node.pk:05d}-{index}",
                vendor=vendor,
                product=product,
                index=index,
                memory_bytes=(80 * GiB if partitioned else memory),
                resource_name="" if partitioned else resource,
                driver_version="550.54.15",
                cuda_version="12.4",
                health=state,
                health_reason=reason,
                first_seen_at=now,
                last_seen_at=now,
            )
            cards.append(card)
            if partitioned:
                units_of[card.key] = (node, per_card, resource, product, memory)
    Device.objects.bulk_create(cards, batch_size=1000)
    parents = {d.key: d for d in Device.objects.filter(resource_name="")}
    units = []
    for key, (node, per_card, resource, product, memory) in units_of.items():
        parent = parents[key]
        shared = resource.endswith(".shared")
        for u in range(per_card):
            state, reason = health(rng)
            units.append(
                Device(
                    node=node,
                    key=f"{key}-{'r' if shared else 'mig'}{u}",
                    uuid="" if shared else f"MIG-{node.pk:05d}-{parent.index}-{u}",
                    vendor=parent.vendor,
                    product=product if shared else f"{product} MIG 1g.10gb",
                    index=parent.index,
                    memory_bytes=memory,
                    kind=Device.Kind.SHARED if shared else Device.Kind.MIG,
                    resource_name=resource,
                    parent=parent,
                    mig_profile="" if shared else "1g.10gb",
                    replica_index=u if shared else None,
                    health=state,
                    health_reason=reason,
                    first_seen_at=now,
                    last_seen_at=now,
                )
            )
    Device.objects.bulk_create(units, batch_size=1000)


def populate_jobs(rng: random.Random, now, *, teams: list, owner, classes: dict) -> tuple[list, list]:
    """About 60 % of the usable units held, one running job per node's worth of held units; (jobs, allocations)."""
    from pools.models import Allocation, Device
    from queues.models import Job

    schedulable = (
        Device.objects.exclude(resource_name="")
        .filter(health__in=["healthy", "degraded"], node__ready=True, node__unschedulable=False)
        .select_related("node__flavor")
        .order_by("node_id", "id")
    )
    held_by_node: dict[int, list] = {}
    for device in schedulable:
        if rng.random() < 0.6:
            held_by_node.setdefault(device.node_id, []).append(device)
    jobs = []
    for n, (_node_id, devices) in enumerate(held_by_node.items()):
        node = devices[0].node
        started = now - timedelta(minutes=rng.randint(1, 600))
        jobs.append(
            Job(
                team=teams[n % len(teams)],
                owner=owner,
                cluster=node.cluster,
                name=f"train-{n}",
                image="registry.example.org/ml/train:1.0",
                resource_class=classes[node.flavor.name],
                devices_per_pod=len(devices),
                state=Job.State.RUNNING,
                submitted_at=started,
                queued_at=started,
                admitted_at=started,
                started_at=started,
                state_changed_at=started,
            )
        )
    Job.objects.bulk_create(jobs, batch_size=500)
    jobs = list(Job.objects.order_by("id"))
    allocations = [
        Allocation(job=job, device=device, started_at=job.started_at)
        for job, devices in zip(jobs, held_by_node.values(), strict=True)
        for device in devices
    ]
    Allocation.objects.bulk_create(allocations, batch_size=1000)
    return jobs, allocations


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered) + 0.5) - 1))]


def measure(client, url: str, *, requests: int, headers: dict) -> dict:
    """Time ``requests`` GETs of one URL; the first (warm-up) request is not counted."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.get(url, **headers)
    times, queries, size = [], 0, 0
    for _ in range(requests):
        with CaptureQueriesContext(connection) as captured:
            start = time.perf_counter()
            response = client.get(url, **headers)
            times.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, (url, response.status_code)
        queries, size = len(captured), len(response.content)
    return {
        "p50": statistics.median(times),
        "p95": percentile(times, 0.95),
        "max": max(times),
        "queries": queries,
        "kb": size / 1024,
    }


def main() -> None:
    """Populate, then time the overview page and its fragment and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=30, help="timed requests per URL (default 30)")
    parser.add_argument("--keep", action="store_true", help="keep the throwaway SQLite file")
    args = parser.parse_args()

    throwaway = configure()
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()
    call_command("migrate", verbosity=0)
    start = time.perf_counter()
    counts = populate()
    print(f"database: {connection.vendor} ({connection.settings_dict['NAME']})")
    print(f"populated in {time.perf_counter() - start:.1f}s: " + ", ".join(f"{v:,} {k}" for k, v in counts.items()))

    from django.contrib.auth import get_user_model

    client = Client()
    client.force_login(get_user_model().objects.get(username="bench"))
    htmx = {"HTTP_HX_REQUEST": "true"}
    cases = [
        ("page, first 50 nodes", "/pool/", {}),
        ("page, 13th of 25 pages", "/pool/?page=13", {}),
        ("fragment (poll)", "/pool/", htmx),
        ("fragment, with problems", "/pool/?health=problems", htmx),
        ("fragment, cluster + class", "/pool/?cluster=bench-east&resource_class=a100-mig-class", htmx),
    ]
    print(f"\n{args.requests} timed requests each (after one warm-up), server time in ms:\n")
    print(f"{'case':<28} {'p50':>8} {'p95':>8} {'max':>8} {'queries':>8} {'KiB':>8}")
    for label, url, headers in cases:
        r = measure(client, url, requests=args.requests, headers=headers)
        print(f"{label:<28} {r['p50']:8.1f} {r['p95']:8.1f} {r['max']:8.1f} {r['queries']:8d} {r['kb']:8.1f}")

    if throwaway and not args.keep:
        connection.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{SQLITE_PATH}{suffix}").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
