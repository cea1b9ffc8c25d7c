"""Benchmark of the cost page: 100 teams × 12 months of daily rollups, timed through Django's test client.

Usage (from the repository root):

    .venv/bin/python benchmarks/cost_report.py [--requests 30] [--keep | --reuse]

Without ``DATABASE_URL`` it uses a throwaway SQLite file under var/ (deleted first, and afterwards unless
``--keep``; ``--reuse`` times the pages again on a file kept by an earlier ``--keep`` run). With
``DATABASE_URL`` it migrates that database and adds rows to it: point it at an empty, throwaway database.
It also meters a year of jobs of two teams with the real ``metering_sync`` and prints its throughput.
Figures are server time as the test client sees it (view, selectors, templates, charts; no network).
Target: p50 and p95 under 300 ms. ``cpu p50`` is the process's CPU time per request (SQLite runs in-process):
on a loaded machine it is the fairer figure, since wall time then includes waiting for a core.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
SQLITE_PATH = REPO / "var" / "bench_cost_report.sqlite3"

TEAMS = 100
USERS_PER_TEAM = 5
FIRST_DAY = date(2025, 1, 1)
DAYS = 365
US_PER_HOUR = 3_600_000_000


def configure(*, reuse: bool = False) -> bool:
    """Point Django at the benchmark database; True when it is the throwaway SQLite file."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.setdefault("DEBUG", "false")
    throwaway = not os.environ.get("DATABASE_URL")
    if throwaway:
        SQLITE_PATH.parent.mkdir(exist_ok=True)
        for suffix in ("", "-wal", "-shm"):
            if not reuse:
                Path(f"{SQLITE_PATH}{suffix}").unlink(missing_ok=True)
        os.environ["DATABASE_URL"] = f"sqlite:///{SQLITE_PATH}"
    import django

    django.setup()
    return throwaway


def populate(*, seed: int = 11) -> dict[str, int]:
    """Teams with leads and members, two classes on two flavors, and a year of daily rollups for each team."""
    from django.contrib.auth import get_user_model

    from billing.models import (
        Budget,
        CapacityDaily,
        CapacityTeamMonthly,
        Notification,
        UsageDaily,
        UsageTeamDaily,
        UsageTeamMonthly,
    )
    from billing.services.rollup import _team_rows, month_rollup
    from pools.models import ResourceClass, ResourceFlavor
    from queues.models import Membership, Team

    rng = random.Random(seed)
    User = get_user_model()
    flavors = [ResourceFlavor.objects.create(name=n, display_name=n.upper()) for n in ("h100", "a100")]
    classes = [
        ResourceClass.objects.create(slug="h100-train", name="H100 training", resource_name="nvidia.com/gpu"),
        ResourceClass.objects.create(slug="a100-mig", name="A100 MIG 1g", resource_name="nvidia.com/mig-1g.10gb"),
    ]
    teams = Team.objects.bulk_create(
        Team(slug=f"team-{i:03d}", name=f"Team {i:03d}", namespace=f"team-{i:03d}") for i in range(TEAMS)
    )
    users = User.objects.bulk_create(
        User(username=f"u{t:03d}-{u}", first_name=f"User{u}", last_name=f"T{t:03d}")
        for t in range(TEAMS)
        for u in range(USERS_PER_TEAM)
    )
    User.objects.create_user("bench-admin", password="bench", is_staff=True)
    members_of = {t.pk: users[i * USERS_PER_TEAM : (i + 1) * USERS_PER_TEAM] for i, t in enumerate(teams)}
    Membership.objects.bulk_create(
        Membership(team=t, user=u, role=Membership.Role.LEAD if n == 0 else Membership.Role.MEMBER)
        for t in teams
        for n, u in enumerate(members_of[t.pk])
    )
    usage, capacity = [], []
    for team in teams:
        for d in range(DAYS):
            day = FIRST_DAY + timedelta(days=d)
            for user in members_of[team.pk]:
                for rc, flavor, price in (
                    (classes[0], flavors[0], Decimal("2.5")),
                    (classes[1], flavors[1], Decimal("0.5")),
                ):
                    owned = rng.randrange(0, 8 * US_PER_HOUR)
                    borrowed = rng.randrange(0, 2 * US_PER_HOUR) if rng.random() < 0.3 else 0
                    usage.append(
                        UsageDaily(
                            day=day, team=team, user=user, resource_class=rc, flavor=flavor, currency="EUR",
                            owned_us=owned, borrowed_us=borrowed,
                            owned_cost=(Decimal(owned) * price / US_PER_HOUR).quantize(Decimal("0.00000001")),
                            borrowed_cost=(Decimal(borrowed) * price / US_PER_HOUR).quantize(Decimal("0.00000001")),
                            lost_preemption_hours=Decimal(rng.randrange(0, 3)) if rng.random() < 0.1 else 0,
                            lost_hardware_hours=Decimal("0.5") if rng.random() < 0.02 else 0,
                        )
                    )  # fmt: skip
            for flavor, resource in ((flavors[0], "nvidia.com/gpu"), (flavors[1], "nvidia.com/mig-1g.10gb")):
                reserved = 16 * 24 * US_PER_HOUR
                idle = rng.randrange(0, reserved // 2)
                capacity.append(
                    CapacityDaily(
                        day=day, team=team, flavor=flavor, resource_name=resource, nominal=16, reserved_us=reserved,
                        owned_us=reserved - idle, idle_us=idle, lent_us=idle // 3, currency="EUR",
                        idle_cost=(Decimal(idle) * 2 / US_PER_HOUR).quantize(Decimal("0.01")),
                        lent_credit=(Decimal(idle // 3) * 2 / US_PER_HOUR).quantize(Decimal("0.01")),
                        counted_until=datetime.combine(day + timedelta(days=1), datetime.min.time(), tzinfo=UTC),
                    )
                )  # fmt: skip
        # The team-level rollup is the user-level one summed over users, per day (as usage_rollup writes it).
        by_day: dict = {}
        for row in usage:
            by_day.setdefault(row.day, []).append(row)
        UsageTeamDaily.objects.bulk_create([t for rows in by_day.values() for t in _team_rows(rows)], batch_size=5000)
        UsageDaily.objects.bulk_create(usage, batch_size=5000)
        usage = []
    CapacityDaily.objects.bulk_create(capacity, batch_size=5000)
    # The monthly team rollups, as usage_rollup keeps them (it rewrites the month of each day it rolls).
    month = FIRST_DAY
    while month < FIRST_DAY + timedelta(days=DAYS):
        month_rollup(month=month)
        month = (month.replace(day=28) + timedelta(days=4)).replace(day=1)
    budgets = Budget.objects.bulk_create(
        Budget(team=t, period="month", amount=Decimal("5000"), currency="EUR", thresholds=[50, 80, 100]) for t in teams
    )
    now = datetime(2025, 12, 31, 12, tzinfo=UTC)
    Notification.objects.bulk_create(
        Notification(
            team=b.team, kind="budget_threshold", budget=b, period_start=date(2025, 12, 1), threshold=50,
            message=f"Team {b.team.name} has used 50 % of its monthly budget.", created_at=now,
        )
        for b in budgets
    )  # fmt: skip
    return {
        "teams": TEAMS,
        "users": len(users),
        "usage rollup rows": UsageDaily.objects.count(),
        "team usage rollup rows": UsageTeamDaily.objects.count(),
        "capacity rollup rows": CapacityDaily.objects.count(),
        "monthly team rollup rows": UsageTeamMonthly.objects.count() + CapacityTeamMonthly.objects.count(),
    }


#: Teams whose year is also metered from real jobs and allocations (the lead's and the one staff opens).
METERED_TEAMS = ("team-042", "team-007")
JOBS_PER_DAY = 25


def populate_jobs(*, seed: int = 12) -> dict[str, int]:
    """A year of finished jobs with their allocations for ``METERED_TEAMS`` (the jobs panel reads their usage
    records); the records themselves are written by the real ``metering_sync``, timed by the caller."""
    from django.contrib.auth import get_user_model

    from pools.models import Allocation, Cluster, Device, Node, ResourceClass, ResourceFlavor
    from queues.models import Job, Team

    rng = random.Random(seed)
    first_seen = datetime(2024, 12, 1, tzinfo=UTC)
    cluster = Cluster.objects.create(name="bench", display_name="Benchmark cluster")
    h100 = ResourceFlavor.objects.get(name="h100")
    rc = ResourceClass.objects.get(slug="h100-train")
    devices = []
    for n in range(8):
        node = Node.objects.create(
            cluster=cluster, name=f"bench-h100-{n}", flavor=h100, first_seen_at=first_seen, last_seen_at=first_seen
        )
        devices += Device.objects.bulk_create(
            Device(
                node=node, key=f"GPU-bench-{n}-{i}", uuid=f"GPU-bench-{n}-{i}", vendor="nvidia",
                product="NVIDIA H100 80GB HBM3", index=i, resource_name="nvidia.com/gpu", kind="full",
                first_seen_at=first_seen, last_seen_at=first_seen,
            )
            for i in range(8)
        )  # fmt: skip
    users = get_user_model().objects.in_bulk(field_name="username")
    jobs, pending = 0, []
    for slug in METERED_TEAMS:
        team = Team.objects.get(slug=slug)
        members = [users[f"{slug.replace('team-', 'u')}-{u}"] for u in range(USERS_PER_TEAM)]
        for d in range(DAYS):
            day = datetime.combine(FIRST_DAY + timedelta(days=d), datetime.min.time(), tzinfo=UTC)
            for n in range(JOBS_PER_DAY):
                start = day + timedelta(seconds=rng.randrange(0, 86400))
                end = start + timedelta(seconds=rng.randrange(600, 10 * 3600))
                job = Job(
                    team=team, owner=rng.choice(members), cluster=cluster, name=f"bench-{d}-{n}", image="bench:1",
                    resource_class=rc, devices_per_pod=rng.choice([1, 1, 2, 4, 8]), state="succeeded",
                    submitted_at=start, queued_at=start, admitted_at=start, started_at=start, finished_at=end,
                    state_changed_at=end, borrowing=False, assigned_flavor=h100,
                )  # fmt: skip
                pending.append(job)
        Job.objects.bulk_create(pending, batch_size=2000)
        jobs += len(pending)
        allocations = [
            Allocation(job=job, device=device, started_at=job.started_at, ended_at=job.finished_at, end_reason="")
            for job in pending
            for device in rng.sample(devices, job.devices_per_pod)
        ]
        Allocation.objects.bulk_create(allocations, batch_size=5000)
        pending = []
    return {"jobs": jobs, "allocations": Allocation.objects.count()}


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered) + 0.5) - 1))]


def measure(client, url: str, *, requests: int, headers: dict) -> dict:
    """Time ``requests`` GETs of one URL; the first (warm-up) request is not counted."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.get(url, **headers)
    times, cpu, queries, size = [], [], 0, 0
    for _ in range(requests):
        with CaptureQueriesContext(connection) as captured:
            start, start_cpu = time.perf_counter(), time.process_time()
            response = client.get(url, **headers)
            times.append((time.perf_counter() - start) * 1000)
            cpu.append((time.process_time() - start_cpu) * 1000)
        assert response.status_code == 200, (url, response.status_code)
        queries, size = len(captured), len(response.content)
    return {
        "p50": statistics.median(times),
        "p95": percentile(times, 0.95),
        "max": max(times),
        "cpu": statistics.median(cpu),
        "queries": queries,
        "kb": size / 1024,
    }


def metering(*, now: datetime) -> None:
    """Time the full metering of every allocation, then an incremental run (which must not read the history)."""
    from billing import services
    from billing.models import UsageRecord
    from billing.services.metering import CURSOR_LAG

    start = time.perf_counter()
    report = services.metering_sync(now=now, full=True)
    took = time.perf_counter() - start
    print(
        f"metering, full sweep: {report.allocations:,} allocations → {report.created:,} usage records in {took:.1f}s "
        f"({report.allocations / took:,.0f} allocations/s)"
    )
    for n in (1, 2):  # the second run is past the cursor's lag: the history lies below the cursor
        start = time.perf_counter()
        report = services.metering_sync(now=now + n * 2 * CURSOR_LAG)
        print(
            f"metering, incremental run {n}: {report.allocations:,} allocations looked at, {report.changed} rows "
            f"changed in {(time.perf_counter() - start) * 1000:.0f} ms ({UsageRecord.objects.count():,} records kept)"
        )


def all_teams_report(*, requests: int) -> None:
    """The staff all-teams report of the year per month, before (daily rollups only) and after (monthly rollups
    over the whole months); the two must be the same report."""
    from billing import reporting, selectors

    args = {"teams": None, "start": date(2025, 1, 1), "end": date(2025, 12, 31), "user": None, "resource_class": None}
    print(f"\nall-teams report, {TEAMS} teams × 12 months per month (selector only, {requests} runs, ms):\n")
    print(f"{'read from':<30} {'p50':>8} {'p95':>8} {'cpu p50':>8}")
    reports = {}
    for label, monthly in (("daily rollups (before)", False), ("monthly rollups (after)", True)):
        times, cpu = [], []
        for _ in range(requests):
            start, start_cpu = time.perf_counter(), time.process_time()
            report = selectors._cost_report(bucket="month", monthly=monthly, **args)
            times.append((time.perf_counter() - start) * 1000)
            cpu.append((time.process_time() - start_cpu) * 1000)
        reports[monthly] = report
        p50, p95, cpu50 = statistics.median(times), percentile(times, 0.95), statistics.median(cpu)
        print(f"{label:<30} {p50:8.1f} {p95:8.1f} {cpu50:8.1f}")
    same = reporting.report_csv(reports[False]) == reporting.report_csv(reports[True])
    print(f"same report both ways (CSV compared): {'yes' if same else 'NO'}")


def populate_all() -> None:
    """Rollups for every team, a year of jobs for two, and their metering (timed and printed)."""
    start = time.perf_counter()
    counts = populate()
    print(f"populated in {time.perf_counter() - start:.1f}s: " + ", ".join(f"{v:,} {k}" for k, v in counts.items()))
    start = time.perf_counter()
    job_counts = populate_jobs()
    print(f"jobs for {', '.join(METERED_TEAMS)} in {time.perf_counter() - start:.1f}s: "
          + ", ".join(f"{v:,} {k}" for k, v in job_counts.items()))  # fmt: skip
    metering(now=datetime(2026, 1, 1, tzinfo=UTC))


def main() -> None:
    """Populate, then time the cost page, its fragment and the CSV export and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=30, help="timed requests per URL (default 30)")
    parser.add_argument("--keep", action="store_true", help="keep the throwaway SQLite file")
    parser.add_argument("--reuse", action="store_true", help="time the pages on the file an earlier --keep left")
    args = parser.parse_args()
    if args.reuse and not SQLITE_PATH.exists():
        parser.error(f"--reuse: {SQLITE_PATH} does not exist; run once with --keep first")

    throwaway = configure(reuse=args.reuse)
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()
    call_command("migrate", verbosity=0)
    print(f"database: {connection.vendor} ({connection.settings_dict['NAME']})")
    if not args.reuse:
        populate_all()

    lead = Client()
    lead.force_login(get_user_model().objects.get(username="u042-0"))
    admin = Client()
    admin.force_login(get_user_model().objects.get(username="bench-admin"))
    htmx = {"HTTP_HX_REQUEST": "true"}
    year = "start=2025-01-01&end=2025-12-31"
    cases = [
        ("lead: year per day", lead, f"/cost/?{year}&bucket=day", {}),
        ("lead: year per month", lead, f"/cost/?{year}&bucket=month", {}),
        ("lead: month per day", lead, "/cost/?start=2025-12-01&end=2025-12-31", {}),
        ("lead: fragment, week, user", lead, f"/cost/?{year}&bucket=week&user=", htmx),
        ("lead: CSV year per day", lead, f"/cost/export.csv?{year}", {}),
        ("staff: one team, year/day", admin, f"/cost/?team=team-007&{year}", {}),
        ("staff: all teams, year/month", admin, f"/cost/?team=all&{year}&bucket=month", {}),
    ]
    print(f"\n{args.requests} timed requests each (after one warm-up), server time in ms:\n")
    print(f"{'case':<30} {'p50':>8} {'p95':>8} {'max':>8} {'cpu p50':>8} {'queries':>8} {'KiB':>8}")
    for label, client, url, headers in cases:
        r = measure(client, url, requests=args.requests, headers=headers)
        figures = " ".join(f"{r[k]:8.1f}" for k in ("p50", "p95", "max", "cpu"))
        print(f"{label:<30} {figures} {r['queries']:8d} {r['kb']:8.1f}")

    all_teams_report(requests=args.requests)

    if throwaway and not (args.keep or args.reuse):
        connection.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{SQLITE_PATH}{suffix}").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
