"""The job list at a million jobs: server time and query count of the page and the API.

Builds a throwaway database (SQLite under var/ by default, or ``--database-url`` / DATABASE_URL, e.g.
postgres://postgres@127.0.0.1:5432/bench_jobs), fills it with ``--jobs`` jobs by bulk_create (once; a
later run reuses them), then times, through Django's test client, the job list page and the API list:
the first page, filtered pages and a deep page (a cursor about 90 % down the team's history).

    .venv/bin/python benchmarks/job_list.py                     # SQLite, 1,000,000 jobs
    .venv/bin/python benchmarks/job_list.py --database-url postgres://postgres@127.0.0.1:5432/bench_jobs

Prints p50 / p95 server time (ms) and the number of SQL queries per request; target p95 < 100 ms.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from datetime import UTC, datetime, timedelta

from _setup import add_database_argument, setup_django


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=40, help="timed requests per case")
    add_database_argument(parser, "bench_jobs.sqlite3")
    return parser.parse_args()


ARGS = parse_args()
setup_django(ARGS.database_url)

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from pools.models import Cluster, ResourceClass, ResourceClassFlavor, ResourceFlavor  # noqa: E402
from queues.models import Job, Membership, PriorityClass, QuotaLine, Team, TeamQuota  # noqa: E402
from queues.selectors import Cursor  # noqa: E402

BATCH = 20_000
STATES = [
    (Job.State.SUCCEEDED, 70),
    (Job.State.FAILED, 10),
    (Job.State.CANCELLED, 12),
    (Job.State.TIMED_OUT, 3),
    (Job.State.PENDING, 3),
    (Job.State.RUNNING, 2),
]


def setup_world():
    """Cluster, flavors, classes, three teams with members; idempotent."""
    User = get_user_model()
    cluster, _ = Cluster.objects.get_or_create(name="bench", defaults={"backend": Cluster.Backend.SIMULATED})
    PriorityClass.objects.get_or_create(name="normal", defaults={"value": 100, "is_default": True})
    classes = []
    for slug, name, flavor_name in (("h100", "H100 80GB", "h100"), ("a100", "A100", "a100"), ("l4", "L4", "l4")):
        flavor, _ = ResourceFlavor.objects.get_or_create(name=flavor_name)
        rc, _ = ResourceClass.objects.get_or_create(
            slug=slug, defaults={"name": name, "resource_name": "nvidia.com/gpu", "allowed_counts": [1, 2, 4, 8]}
        )
        ResourceClassFlavor.objects.get_or_create(resource_class=rc, flavor=flavor)
        classes.append(rc)
    teams, users = [], {}
    for slug in ("vision", "speech", "robotics"):
        team, _ = Team.objects.get_or_create(slug=slug, defaults={"name": slug.title(), "namespace": slug})
        quota, _ = TeamQuota.objects.get_or_create(team=team, cluster=cluster, defaults={"cluster_queue_name": slug})
        for rc in classes:
            QuotaLine.objects.get_or_create(
                team_quota=quota,
                flavor=rc.flavor_links.first().flavor,
                resource_name="nvidia.com/gpu",
                defaults={"nominal": "64"},
            )
        members = []
        for i in range(5):
            user, created = User.objects.get_or_create(username=f"{slug}-{i}")
            if created:
                user.set_password("bench")
                user.save()
            Membership.objects.get_or_create(team=team, user=user)
            members.append(user)
        teams.append(team)
        users[team.pk] = members
    return cluster, classes, teams, users


def fill(n: int, cluster, classes, teams, users) -> None:
    """Bulk-create jobs until there are ``n``: 70 % in the first team, over a year, mostly finished."""
    have = Job.objects.count()
    if have >= n:
        print(f"reusing {have:,} jobs")
        return
    rng = random.Random(42)
    states = [s for s, w in STATES for _ in range(w)]
    start = datetime(2026, 1, 1, tzinfo=UTC)
    span = 330 * 86400
    t0 = time.perf_counter()
    for offset in range(have, n, BATCH):
        rows = []
        for i in range(offset, min(offset + BATCH, n)):
            team = teams[0] if rng.random() < 0.7 else rng.choice(teams[1:])
            at = start + timedelta(seconds=span * i / n + rng.random())
            state = rng.choice(states)
            final = state in Job.FINAL_STATES
            rows.append(
                Job(
                    team=team,
                    owner=rng.choice(users[team.pk]),
                    cluster=cluster,
                    name=f"job-{i}",
                    image="registry.example.org/ml/train:1.0",
                    resource_class=rng.choice(classes),
                    devices_per_pod=rng.choice([1, 2, 4, 8]),
                    pod_count=1,
                    priority=100,
                    state=state,
                    wait_reason="class_exhausted" if state == Job.State.PENDING else "",
                    submitted_at=at,
                    queued_at=at,
                    state_changed_at=at,
                    admitted_at=at + timedelta(minutes=2) if state != Job.State.PENDING else None,
                    started_at=at + timedelta(minutes=3) if state != Job.State.PENDING else None,
                    finished_at=at + timedelta(hours=1) if final else None,
                    k8s_namespace=team.namespace,
                    k8s_name=f"job-{i}",
                )
            )
        with transaction.atomic():
            Job.objects.bulk_create(rows, batch_size=2000)
        done = offset + len(rows)
        if done % 200_000 < BATCH:
            print(f"  {done:,} jobs ({time.perf_counter() - t0:.0f} s)", flush=True)
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("ANALYZE queues_job")
    else:
        with connection.cursor() as cur:
            cur.execute("ANALYZE")


def timed(client: Client, url: str, repeat: int) -> tuple[float, float, int, int]:
    """p50 and p95 milliseconds, the query count and the status of ``url``."""
    for _ in range(3):
        client.get(url)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        client.get(url)
        times.append((time.perf_counter() - t) * 1000)
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    times.sort()
    p95 = times[min(len(times) - 1, round(0.95 * len(times)) - 1)]
    return statistics.median(times), p95, len(captured), response.status_code


def deep_cursor(team: Team) -> str:
    """A cursor about 90 % down the team's history (found once, slowly; not part of the timing)."""
    qs = Job.objects.filter(team=team).order_by("-submitted_at", "-id")
    total = qs.count()
    row = qs.values_list("submitted_at", "pk")[int(total * 0.9)]
    return Cursor(submitted_at=row[0], pk=row[1], direction="older").encode()


def plan(sql_qs) -> str:
    """The database's plan for a queryset (first lines)."""
    sql, params = sql_qs.query.sql_with_params()
    with connection.cursor() as cur:
        if connection.vendor == "sqlite":
            cur.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            return "; ".join(r[-1] for r in cur.fetchall())
        cur.execute(f"EXPLAIN {sql}", params)
        return " | ".join(r[0].strip() for r in cur.fetchall()[:4])


def main() -> None:
    print(f"database: {connection.vendor} ({ARGS.database_url})")
    call_command("migrate", verbosity=0)
    cluster, classes, teams, users = setup_world()
    fill(ARGS.jobs, cluster, classes, teams, users)
    team = teams[0]
    user = users[team.pk][0]
    print(f"{Job.objects.count():,} jobs; team {team.slug}: {Job.objects.filter(team=team).count():,}")
    client = Client()
    client.force_login(user)
    cursor = deep_cursor(team)
    other = users[team.pk][3].username
    cases = [
        ("page: first", "/jobs/"),
        ("page: state+class", "/jobs/?state=failed&resource_class=a100"),
        ("page: mine", "/jobs/?scope=mine"),
        ("page: user+dates", f"/jobs/?owner={other}&submitted_from=2026-03-01&submitted_to=2026-03-31"),
        ("page: deep (90%)", f"/jobs/?cursor={cursor}"),
        ("api: first", "/api/jobs/"),
        ("api: state", "/api/jobs/?state=cancelled"),
        ("api: class", "/api/jobs/?resource_class=l4"),
        ("api: deep (90%)", f"/api/jobs/?cursor={cursor}"),
    ]
    print(f"\n{'case':<22} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8}  status")
    worst = 0.0
    for label, url in cases:
        p50, p95, queries, code = timed(client, url, ARGS.repeat)
        worst = max(worst, p95)
        print(f"{label:<22} {p50:8.1f} {p95:8.1f} {queries:8d}  {code}")
    print(f"\nworst p95: {worst:.1f} ms (target < 100 ms)")
    from queues import selectors as sel

    base = sel.jobs_visible_to(user, team=team)
    print("\nplans:")
    print("  first:", plan(base.order_by("-submitted_at", "-id")[:51]))
    print("  state:", plan(base.filter(state="failed").order_by("-submitted_at", "-id")[:51]))
    print("  class:", plan(base.filter(resource_class=classes[1]).order_by("-submitted_at", "-id")[:51]))


if __name__ == "__main__":
    main()
