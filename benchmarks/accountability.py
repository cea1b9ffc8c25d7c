"""Benchmark of the accountability rollups and pages: wait attribution at 1 M jobs, the borrowing ledger over a month
of metering, and the waiting and statement pages at 100 teams × 12 months.

Usage (from the repository root):

    .venv/bin/python benchmarks/accountability.py [--jobs 1000000] [--requests 20] [--part all|attribution|ledger|pages]

Without ``--database-url`` (or ``DATABASE_URL``) it uses a throwaway SQLite file under var/ (deleted first); with one
it migrates that database and adds rows to it: point it at an empty, throwaway database (e.g. a PostgreSQL database
of your own). Every figure is printed; nothing is asserted.

* **attribution**: ``--jobs`` finished jobs over a year (each with its submission, one to three wait reasons, its
  admission and its end) and 1 % still waiting; the first ``wait_attribution_sync`` reads the whole timeline (the
  backfill, once); then incremental runs after 1,000 jobs changed (new reasons, admissions, new submissions), and a
  run with nothing new — the cost follows what changed, not the history.
* **ledger**: 100 teams in 10 cohorts with a month of jobs (some borrowing) metered by the real ``metering_sync``;
  the month's 30 daily rollups (which write the ledger with the capacity rows), then the sweep a beat runs
  (``usage_rollup_pending``) after one more hour of metering: only today is rolled again.
* **pages**: the cost benchmark's 100 teams × 12 months of rollups (``benchmarks/cost_report.populate``) plus a
  year of ledger rows, reclaims and weekly wait rollups for every team and the jobs behind one team's; p50 / p95 of
  the pages through Django's test client (server time: views, selectors, templates; no network). Goal: p95 under
  300 ms (docs/billing.md).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from _setup import ROOT, add_database_argument, setup_django

US_PER_HOUR = 3_600_000_000
YEAR_START = datetime(2025, 1, 6, tzinfo=UTC)  # a Monday
CODES = ("quota_exhausted", "topology_fragmented", "health_blocked", "class_exhausted", "borrow_limit")


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered) + 0.5) - 1))]


# --------------------------------------------------------------------------- attribution at 1 M jobs


def _base(rng: random.Random):
    """A cluster, a class, 100 teams with a user each (the attribution needs only these)."""
    from django.contrib.auth import get_user_model

    from pools.models import Cluster, ResourceClass, ResourceFlavor
    from queues.models import Team

    cluster = Cluster.objects.create(name="bench-wait", display_name="Benchmark")
    flavor = ResourceFlavor.objects.create(name="bench-h100")
    rc = ResourceClass.objects.create(slug="bench-h100", name="H100", resource_name="nvidia.com/gpu")
    rc.flavor_links.create(flavor=flavor, order=0)
    teams = Team.objects.bulk_create(
        Team(slug=f"wait-{i:03d}", name=f"Wait {i:03d}", namespace=f"wait-{i:03d}") for i in range(100)
    )
    user = get_user_model().objects.create(username="bench-waiter")
    return cluster, rc, teams, user


#: The timelines as PostgreSQL writes them in one statement per kind (the same shape as the Python path below).
PG_TIMELINES = [
    # submitted
    """INSERT INTO queues_jobevent (job_id, at, kind, message, details, source_key)
       SELECT id, submitted_at, 'submitted', '', '{}'::jsonb, '' FROM queues_job WHERE cluster_id = %(cluster)s""",
    # one to three wait reasons, 30 s to 6 h apart
    """INSERT INTO queues_jobevent (job_id, at, kind, message, details, source_key)
       SELECT j.id, j.submitted_at + make_interval(secs => 30 + k * ((j.id * 7919 + k * 104729) %% 21600)),
              'wait_reason', '', jsonb_build_object('code', (ARRAY[%(codes)s])[1 + (j.id * 31 + k) %% 5]), ''
       FROM queues_job j CROSS JOIN generate_series(1, 3) AS k
       WHERE j.cluster_id = %(cluster)s AND k <= 1 + j.id %% 3""",
    # admitted 1 min to 12 h after the last reason, then finished 1 to 10 h later (all but the 1 % still waiting)
    """INSERT INTO queues_jobevent (job_id, at, kind, message, details, source_key)
       SELECT e.job_id, max(e.at) + make_interval(secs => 60 + (e.job_id * 6151) %% 43200), 'admitted', '',
              '{}'::jsonb, ''
       FROM queues_jobevent e JOIN queues_job j ON j.id = e.job_id
       WHERE j.cluster_id = %(cluster)s AND j.state = 'succeeded' GROUP BY e.job_id""",
    """INSERT INTO queues_jobevent (job_id, at, kind, message, details, source_key)
       SELECT e.job_id, e.at + make_interval(hours => (1 + e.job_id %% 10)::int), 'succeeded', '', '{}'::jsonb, ''
       FROM queues_jobevent e JOIN queues_job j ON j.id = e.job_id
       WHERE j.cluster_id = %(cluster)s AND e.kind = 'admitted'""",
]


def populate_waits(n_jobs: int, *, seed: int = 5) -> dict[str, int]:
    """``n_jobs`` jobs over a year with their timelines (bulk inserts; the rollup reads only these rows)."""
    from django.db import connection

    from queues.models import Job, JobEvent

    rng = random.Random(seed)
    cluster, rc, teams, user = _base(rng)
    if connection.vendor == "postgresql":
        return _populate_waits_pg(n_jobs, rng=rng, cluster=cluster, rc=rc, teams=teams, user=user)
    events = 0
    batch = 20_000
    for first in range(0, n_jobs, batch):
        jobs, timelines = [], []
        for n in range(first, min(first + batch, n_jobs)):
            submitted = YEAR_START + timedelta(seconds=rng.randrange(0, 360 * 86400))
            waiting = n % 100 == 0  # 1 % still waiting
            job = Job(
                team=teams[n % len(teams)], owner=user, cluster=cluster, name=f"w{n}", image="bench:1",
                resource_class=rc, devices_per_pod=rng.choice((1, 2, 4, 8)), pod_count=1,
                state="pending" if waiting else "succeeded", submitted_at=submitted, queued_at=submitted,
                state_changed_at=submitted,
            )  # fmt: skip
            at = submitted
            timeline = [("submitted", at, {})]
            for _ in range(rng.randint(1, 3)):
                at += timedelta(seconds=rng.randrange(30, 6 * 3600))
                timeline.append(("wait_reason", at, {"code": rng.choice(CODES)}))
            if not waiting:
                at += timedelta(seconds=rng.randrange(60, 12 * 3600))
                timeline.append(("admitted", at, {}))
                timeline.append(("succeeded", at + timedelta(hours=rng.randint(1, 10)), {}))
            jobs.append(job)
            timelines.append(timeline)
        Job.objects.bulk_create(jobs, batch_size=5000)
        rows = [
            JobEvent(job=job, at=at, kind=kind, message=kind, details=details)
            for job, timeline in zip(jobs, timelines, strict=True)
            for kind, at, details in timeline
        ]
        JobEvent.objects.bulk_create(rows, batch_size=5000)
        events += len(rows)
    return {"jobs": n_jobs, "events": events}


def _populate_waits_pg(n_jobs: int, *, rng, cluster, rc, teams, user) -> dict[str, int]:
    """One job saved by the ORM, copied ``n_jobs`` times by PostgreSQL (team, size, state and times varied by the
    row number), then the timelines written by PostgreSQL too (``PG_TIMELINES``)."""
    from django.db import connection

    from queues.models import Job, JobEvent

    del rng  # the rows vary by their number
    template = Job.objects.create(
        team=teams[0], owner=user, cluster=cluster, name="template", image="bench:1", resource_class=rc,
        state="succeeded", submitted_at=YEAR_START, queued_at=YEAR_START, state_changed_at=YEAR_START,
    )  # fmt: skip
    team_ids = ", ".join(str(t.pk) for t in teams)
    varied = {
        "team_id": f"(ARRAY[{team_ids}])[1 + g %% {len(teams)}]",
        "name": "'w' || g",
        "devices_per_pod": "(ARRAY[1, 2, 4, 8])[1 + (g * 17) %% 4]",
        "state": "CASE WHEN g %% 100 = 0 THEN 'pending' ELSE 'succeeded' END",
        "submitted_at": "t.submitted_at + make_interval(secs => (g * 2654435761) %% 31104000)",
        "queued_at": "t.submitted_at + make_interval(secs => (g * 2654435761) %% 31104000)",
        "state_changed_at": "t.submitted_at + make_interval(secs => (g * 2654435761) %% 31104000)",
    }
    columns = [f.column for f in Job._meta.concrete_fields if f.column != "id"]
    values = [varied.get(c, f"t.{c}") for c in columns]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO queues_job ({', '.join(columns)}) SELECT {', '.join(values)} "
            "FROM queues_job t CROSS JOIN generate_series(1, %s) AS g WHERE t.id = %s",
            [n_jobs, template.pk],
        )
        cursor.execute("DELETE FROM queues_job WHERE id = %s", [template.pk])
        codes = ", ".join(f"'{c}'" for c in CODES)
        for statement in PG_TIMELINES:
            cursor.execute(statement.replace("%(codes)s", codes), {"cluster": cluster.pk})
        cursor.execute("ANALYZE queues_jobevent")
        cursor.execute("ANALYZE queues_job")
    return {"jobs": n_jobs, "events": JobEvent.objects.count()}


def attribution(n_jobs: int) -> None:
    """Time the backfill, then incremental runs after 1,000 jobs changed, and a run with nothing new."""
    from django.db.models import Max

    from queues.models import Job, JobEvent, WaitCursor, WaitOpen, WaitTally, WaitWeekly
    from queues.waiting.rollup import LAG, wait_attribution_sync
    from queues.waiting.selectors import wait_report

    print(f"\n== wait attribution, {n_jobs:,} jobs ==")
    start = time.perf_counter()
    counts = populate_waits(n_jobs)
    print(f"populated in {time.perf_counter() - start:.0f} s: " + ", ".join(f"{v:,} {k}" for k, v in counts.items()))
    now = YEAR_START + timedelta(days=365)
    start, cpu = time.perf_counter(), time.process_time()
    report = wait_attribution_sync(now=now)
    took = time.perf_counter() - start
    print(
        f"backfill (the first run reads the whole timeline): {report.jobs:,} jobs, {report.tallies:,} tallies, "
        f"{report.open_spans:,} open spans in {took:.0f} s wall / {time.process_time() - cpu:.0f} s CPU "
        f"({report.jobs / took:,.0f} jobs/s)"
    )
    print(
        f"rows kept: {WaitTally.objects.count():,} per job × week × cause, {WaitWeekly.objects.count():,} per team × "
        f"class × week × cause, {WaitOpen.objects.count():,} open"
    )
    rng = random.Random(9)
    clock = now
    for round_ in (1, 2, 3):
        clock += 2 * LAG
        pending = list(Job.objects.filter(state="pending").order_by("?").values_list("pk", flat=True)[:500])
        done = list(Job.objects.filter(state="succeeded").order_by("-pk").values_list("pk", "team_id")[:500])
        new = [
            JobEvent(job_id=pk, at=clock, kind="wait_reason", message="", details={"code": rng.choice(CODES)})
            for pk in pending
        ]
        new += [JobEvent(job_id=pk, at=clock, kind="requeued", message="", details={}) for pk, _ in done]
        JobEvent.objects.bulk_create(new)
        high = JobEvent.objects.aggregate(m=Max("pk"))["m"]
        start, cpu = time.perf_counter(), time.process_time()
        report = wait_attribution_sync(now=clock)
        print(
            f"incremental run {round_} after 1,000 jobs changed (events up to {high:,}): {report.jobs:,} jobs "
            f"recomputed in {(time.perf_counter() - start) * 1000:.0f} ms wall / "
            f"{(time.process_time() - cpu) * 1000:.0f} ms CPU"
        )
    clock += 2 * LAG
    wait_attribution_sync(now=clock)  # the cursor passes the last changes
    clock += 2 * LAG
    start = time.perf_counter()
    report = wait_attribution_sync(now=clock)
    print(f"run with nothing new: {report.jobs} jobs in {(time.perf_counter() - start) * 1000:.0f} ms")
    cursor = WaitCursor.objects.get(pk=1)
    print(f"cursor at event {cursor.checked_event_id:,}")
    start = time.perf_counter()
    year = wait_report(teams=None, first_week=YEAR_START.date(), last_week=clock.date(), now=clock)
    print(
        f"every team's year of weeks read in {(time.perf_counter() - start) * 1000:.0f} ms "
        f"({year.total_us / US_PER_HOUR:,.0f} GPU-hours of waiting)"
    )


# --------------------------------------------------------------------------- a month of metering and the ledger


def ledger(*, teams: int = 100, jobs_per_team_day: int = 6, seed: int = 8) -> None:
    """A month of jobs of 100 teams in 10 cohorts (a third borrowing) metered, then the month's daily rollups."""
    from django.contrib.auth import get_user_model

    from billing import services
    from billing.models import LedgerDaily, LedgerMonthly, ReclaimRecord, UsageRecord
    from pools.models import Allocation, Cluster, Device, Node, ResourceClass, ResourceFlavor
    from queues.models import Cohort, Job, QuotaLine, Team, TeamQuota

    print(f"\n== borrowing ledger: a month of metering, {teams} teams ==")
    rng = random.Random(seed)
    month = date(2025, 3, 1)
    first = datetime(2025, 3, 1, tzinfo=UTC)
    cluster = Cluster.objects.create(name="bench-ledger", display_name="Ledger benchmark")
    flavor = ResourceFlavor.objects.create(name="ledger-h100")
    rc = ResourceClass.objects.create(slug="ledger-h100", name="H100 (ledger)", resource_name="nvidia.com/gpu")
    services.rate_set(flavor=flavor, price_per_hour="2.50", effective_from=datetime(2025, 1, 1, tzinfo=UTC))
    seen = datetime(2025, 1, 1, tzinfo=UTC)
    devices = []
    for n in range(teams):  # 8 GPUs per team in the pool
        node = Node.objects.create(
            cluster=cluster, name=f"ledger-{n}", flavor=flavor, first_seen_at=seen, last_seen_at=seen
        )
        devices += Device.objects.bulk_create(
            Device(
                node=node, key=f"L-{n}-{i}", uuid=f"L-{n}-{i}", vendor="nvidia", product="NVIDIA H100 80GB HBM3",
                index=i, resource_name="nvidia.com/gpu", kind="full", first_seen_at=seen, last_seen_at=seen,
            )
            for i in range(8)
        )  # fmt: skip
    cohorts = [Cohort.objects.create(name=f"ledger-c{c}") for c in range(max(1, teams // 10))]
    user = get_user_model().objects.create(username="bench-ledger")
    team_rows = Team.objects.bulk_create(
        Team(slug=f"ledger-{i:03d}", name=f"Ledger {i:03d}", namespace=f"ledger-{i:03d}") for i in range(teams)
    )
    for i, team in enumerate(team_rows):
        quota = TeamQuota.objects.create(
            team=team, cluster=cluster, cluster_queue_name=team.slug, cohort=cohorts[i % len(cohorts)]
        )
        QuotaLine.objects.create(team_quota=quota, flavor=flavor, resource_name="nvidia.com/gpu", nominal="8")
    jobs, allocations = [], []
    free_at = {d.pk: first for d in devices}
    for day in range(30):
        for team_index, team in enumerate(team_rows):
            for _ in range(jobs_per_team_day):
                start = first + timedelta(days=day, seconds=rng.randrange(0, 86400))
                end = start + timedelta(seconds=rng.randrange(1800, 8 * 3600))
                size = rng.choice((1, 2, 4, 8))
                borrowing = rng.random() < 0.33
                pool = devices[team_index * 8 : team_index * 8 + 8] if not borrowing else devices
                chosen = [d for d in pool if free_at[d.pk] <= start][:size]
                if len(chosen) < size:
                    continue
                job = Job(
                    team=team, owner=user, cluster=cluster, name=f"l{day}", image="bench:1", resource_class=rc,
                    devices_per_pod=size, state="succeeded", submitted_at=start, queued_at=start, admitted_at=start,
                    started_at=start, finished_at=end, state_changed_at=end, borrowing=borrowing,
                    assigned_flavor=flavor,
                )  # fmt: skip
                jobs.append((job, chosen))
                for d in chosen:
                    free_at[d.pk] = end
    Job.objects.bulk_create([j for j, _ in jobs], batch_size=5000)
    for job, chosen in jobs:
        allocations += [
            Allocation(job=job, device=d, started_at=job.started_at, ended_at=job.finished_at) for d in chosen
        ]
    Allocation.objects.bulk_create(allocations, batch_size=5000)
    print(f"{len(jobs):,} jobs, {len(allocations):,} allocations in March 2025")
    after = datetime(2025, 4, 1, 1, tzinfo=UTC)
    start = time.perf_counter()
    report = services.metering_sync(now=after, full=True)
    print(f"metering: {report.allocations:,} allocations → {UsageRecord.objects.count():,} records in "
          f"{time.perf_counter() - start:.0f} s")  # fmt: skip
    times = []
    for d in range(31):
        start = time.perf_counter()
        services.usage_rollup(day=month + timedelta(days=d), now=after)
        times.append(time.perf_counter() - start)
    print(
        f"31 daily rollups (usage, capacity, ledger, reclaims, the month's rows): {sum(times):.0f} s in all, "
        f"p50 {statistics.median(times):.1f} s, max {max(times):.1f} s a day"
    )
    print(
        f"ledger: {LedgerDaily.objects.count():,} daily rows, {LedgerMonthly.objects.count():,} monthly rows, "
        f"{ReclaimRecord.objects.count():,} reclaims"
    )
    start = time.perf_counter()
    services.metering_sync(now=after + timedelta(hours=1))
    reports = services.usage_rollup_pending(now=after + timedelta(hours=1))
    print(
        f"the beat's sweep one hour later (incremental metering, then pending days): {len(reports)} day(s) rolled "
        f"in {time.perf_counter() - start:.1f} s"
    )


# --------------------------------------------------------------------------- pages at 100 teams × 12 months


def populate_pages(*, seed: int = 13) -> None:
    """The cost benchmark's rollups, plus a year of ledger rows, reclaims and weekly waiting for every team."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from cost_report import populate

    from billing.models import LedgerDaily, ReclaimRecord
    from billing.services.ledger import ledger_month_rollup
    from pools.models import Cluster, ResourceClass, ResourceFlavor
    from queues.models import Cohort, Job, Team, TeamQuota, WaitOpen, WaitTally, WaitWeekly
    from queues.waiting.causes import CAUSES

    start = time.perf_counter()
    counts = populate()
    rng = random.Random(seed)
    teams = list(Team.objects.filter(slug__startswith="team-").order_by("slug"))
    flavor = ResourceFlavor.objects.get(name="h100")
    classes = list(ResourceClass.objects.filter(slug__in=("h100-train", "a100-mig")))
    cohorts = [Cohort.objects.create(name=f"bench-c{c}") for c in range(10)]
    cluster = Cluster.objects.create(name="bench-pages", display_name="Pages")
    for i, team in enumerate(teams):
        TeamQuota.objects.create(team=team, cluster=cluster, cluster_queue_name=team.slug, cohort=cohorts[i % 10])
    rows = []
    for d in range(365):
        day = date(2025, 1, 1) + timedelta(days=d)
        for i, lender in enumerate(teams):
            for k in (1, 2, 3):  # each team lends to three others of its cohort
                borrower = teams[(i + 10 * k) % len(teams)]
                us = rng.randrange(0, 6 * US_PER_HOUR)
                rows.append(
                    LedgerDaily(
                        day=day, cohort=cohorts[i % 10], lender=lender, borrower=borrower, flavor=flavor,
                        resource_name="nvidia.com/gpu", currency="EUR", lent_us=us,
                        value=(Decimal(us) * Decimal("2.5") / US_PER_HOUR).quantize(Decimal("0.00000001")),
                    )
                )  # fmt: skip
    LedgerDaily.objects.bulk_create(rows, batch_size=5000)
    month = date(2025, 1, 1)
    while month.year == 2025:
        after = (month.replace(day=28) + timedelta(days=4)).replace(day=1)
        ledger_month_rollup(first=month, after=after)
        month = after
    # jobs behind one team's waiting (the lead's, team-042), and weekly rollups for every team
    lead_team = next(t for t in teams if t.slug == "team-042")
    owner = lead_team.memberships.first().user
    jobs = Job.objects.bulk_create(
        Job(
            team=lead_team, owner=owner, cluster=cluster, name=f"p{n}", image="bench:1", resource_class=classes[0],
            devices_per_pod=rng.choice((1, 2, 4, 8)), state="succeeded", submitted_at=YEAR_START,
            queued_at=YEAR_START, state_changed_at=YEAR_START,
        )
        for n in range(10_000)
    )  # fmt: skip
    tallies, weekly, reclaims = [], {}, []
    for n, job in enumerate(jobs):
        week = (YEAR_START + timedelta(weeks=n % 52)).date()
        for cause in rng.sample(CAUSES[:7], 2):
            us = rng.randrange(1, 20) * US_PER_HOUR
            tallies.append(
                WaitTally(job=job, team=lead_team, resource_class=classes[0], week=week, cause=cause,
                          device_us=us * job.devices_per_pod, wait_us=us)
            )  # fmt: skip
    WaitTally.objects.bulk_create(tallies, batch_size=5000)
    for team in teams:
        for w in range(52):
            week = (YEAR_START + timedelta(weeks=w)).date()
            for rc in classes:
                for cause in rng.sample(CAUSES[:8], 4):
                    weekly[(team.pk, rc.pk, week, cause)] = WaitWeekly(
                        team=team, resource_class=rc, week=week, cause=cause,
                        device_us=rng.randrange(1, 200) * US_PER_HOUR, wait_us=US_PER_HOUR, jobs=rng.randint(1, 50),
                    )  # fmt: skip
    WaitWeekly.objects.bulk_create(weekly.values(), batch_size=5000)
    WaitOpen.objects.bulk_create(
        WaitOpen(
            job=job, team=lead_team, resource_class=classes[0], cause="quota", code="quota_exhausted",
            since=datetime(2025, 12, 29, tzinfo=UTC), since_us=0, since_week=date(2025, 12, 29), devices=2,
        )
        for job in jobs[:100]
    )  # fmt: skip
    for job in jobs[:300]:
        at = YEAR_START + timedelta(days=rng.randrange(0, 360))
        reclaims.append(
            ReclaimRecord(day=at.date(), at=at, victim_job=job, victim_team=lead_team, reclaimer_team=teams[0],
                          reason="InCohortReclamation", devices=job.devices_per_pod, lost_device_hours=Decimal("1.5"))
        )  # fmt: skip
    ReclaimRecord.objects.bulk_create(reclaims)
    print(
        f"populated in {time.perf_counter() - start:.0f} s: {counts['usage rollup rows']:,} usage rollup rows, "
        f"{len(rows):,} ledger rows, {len(weekly):,} weekly waiting rows, {len(tallies):,} tallies of one team"
    )


def measure(client, url: str, *, requests: int, headers: dict) -> dict:
    """Time ``requests`` GETs of one URL after one warm-up."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.get(url, **headers)
    times, cpu, queries = [], [], 0
    for _ in range(requests):
        with CaptureQueriesContext(connection) as captured:
            start, start_cpu = time.perf_counter(), time.process_time()
            response = client.get(url, **headers)
            times.append((time.perf_counter() - start) * 1000)
            cpu.append((time.process_time() - start_cpu) * 1000)
        assert response.status_code == 200, (url, response.status_code, response.content[:300])
        queries = len(captured)
    return {
        "p50": statistics.median(times),
        "p95": percentile(times, 0.95),
        "cpu": statistics.median(cpu),
        "q": queries,
    }


def pages(*, requests: int) -> None:
    """The waiting, statement and cost pages (and their CSV and API) at 100 teams × 12 months."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    print("\n== pages at 100 teams × 12 months ==")
    populate_pages()
    lead = Client()
    lead.force_login(get_user_model().objects.get(username="u042-0"))
    admin = Client()
    admin.force_login(get_user_model().objects.get(username="bench-admin"))
    htmx = {"HTTP_HX_REQUEST": "true"}
    year = "start=2025-01-06&end=2025-12-29"
    cases = [
        ("lead: waiting, 12 weeks", lead, "/waiting/?start=2025-10-13&end=2025-12-29", {}),
        ("lead: waiting, a year", lead, f"/waiting/?{year}", {}),
        ("lead: waiting fragment, a year", lead, f"/waiting/?{year}", htmx),
        ("lead: drill-down, one week", lead, "/waiting/jobs/?week=2025-06-02&cause=quota", {}),
        ("lead: waiting CSV, a year", lead, f"/waiting/export.csv?{year}", {}),
        ("lead: waiting API, a year", lead, f"/api/waiting/?{year}", {}),
        ("staff: waiting, all teams, year", admin, f"/waiting/?team=all&{year}", {}),
        ("lead: statement, a month", lead, "/cost/ledger/?month=2025-06", {}),
        ("lead: statement CSV", lead, "/cost/ledger/export.csv?month=2025-06", {}),
        ("lead: statement API", lead, "/api/billing/statement/?month=2025-06", {}),
        ("staff: cohort ledger, a month", admin, "/cost/ledger/?team=all&month=2025-06", {}),
        ("lead: cost, month (+ borrowing)", lead, "/cost/?start=2025-06-01&end=2025-06-30", {}),
        ("lead: cost, year per month", lead, "/cost/?start=2025-01-01&end=2025-12-31&bucket=month", {}),
    ]
    print(f"\n{requests} timed requests each (after one warm-up), server time in ms:\n")
    print(f"{'case':<34} {'p50':>8} {'p95':>8} {'cpu p50':>8} {'queries':>8}")
    for label, client, url, headers in cases:
        r = measure(client, url, requests=requests, headers=headers)
        print(f"{label:<34} {r['p50']:8.1f} {r['p95']:8.1f} {r['cpu']:8.1f} {r['q']:8d}")


def main() -> None:
    """Populate, time and print (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_database_argument(parser, "bench_accountability.sqlite3")
    parser.add_argument("--jobs", type=int, default=1_000_000, help="jobs of the attribution part (default 1 M)")
    parser.add_argument("--requests", type=int, default=20, help="timed requests per page (default 20)")
    parser.add_argument("--part", choices=("all", "attribution", "ledger", "pages"), default="all")
    args = parser.parse_args()
    setup_django(args.database_url, fresh_sqlite=True)
    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import setup_test_environment

    from queues.engine import native

    setup_test_environment()
    call_command("migrate", verbosity=0)
    print(f"database: {connection.vendor} ({connection.settings_dict['NAME']}); engine: {native.describe()}")
    if args.part in ("all", "pages"):
        pages(requests=args.requests)
    if args.part in ("all", "ledger"):
        ledger()
    if args.part in ("all", "attribution"):
        attribution(args.jobs)


if __name__ == "__main__":
    main()
