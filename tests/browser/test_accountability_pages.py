"""Browser tests of the accountability pages: where the waiting went, the borrowing statements, and a wait reason
that says the team used more than its share. Playwright (sync API) driving Debian's /usr/bin/chromium headless.

Screenshots go to docs/screenshots/ when SAVE_SCREENSHOTS=1 (waiting.png, waiting-jobs.png, waiting-study.png,
ledger-statement.png, job-recent-usage.png), else to a temp folder.
"""

from __future__ import annotations

import csv
import io
import random
import re
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from billing.models import CohortSettlement
from clusters.backends.simulated import simulated_cluster_tick_run
from pools.models import Allocation
from queues import services as job_services
from queues.engine import wait_codes as wc
from queues.job_spec import JobSpec
from queues.models import Cohort, Job, JobEvent, Membership, TeamQuota
from queues.waiting import rollup
from queues.waiting.forms import monday
from tests.billing.conftest import make_world
from tests.billing.test_ledger import MARCH, _march
from tests.browser.scenarios import PASSWORD, occupy, research_pool
from tests.browsing import DB_LOCK
from tests.factories import JobFactory, MembershipFactory, UserFactory
from tests.queues.test_wait_study import two_quota_jobs

pytestmark = pytest.mark.django_db(transaction=True)
H = timedelta(hours=1)
CODES = (
    (wc.QUOTA_EXHAUSTED, 5),
    (wc.TOPOLOGY_FRAGMENTED, 2),
    (wc.HEALTH_BLOCKED, 1),
    (wc.CLASS_EXHAUSTED, 1),
    (wc.HIGHER_PRIORITY_AHEAD, 1),
)


def login(page: Page, username: str, password: str = PASSWORD) -> None:
    page.goto("/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)


def _waiting_history(pool, *, weeks: int = 8, seed: int = 3) -> None:
    """Eight weeks of vision's jobs, each waiting for one to three reasons before it ran (a few still waiting)."""
    rng = random.Random(seed)
    now = timezone.now()
    codes = [c for c, weight in CODES for _ in range(weight)]
    for n in range(60):
        submitted = now - timedelta(days=rng.uniform(0.5, weeks * 7 - 1))
        job = JobFactory(
            team=pool.team, owner=pool.user, cluster=pool.cluster, resource_class=pool.rc, name=f"train-{n:02d}",
            devices_per_pod=rng.choice((1, 2, 4, 8)), submitted_at=submitted, priority_class=pool.normal,
        )  # fmt: skip
        job_services.record_event(job, JobEvent.Kind.SUBMITTED, "Submitted.", at=submitted)
        at = submitted
        for _ in range(rng.randint(1, 3)):
            at += timedelta(minutes=rng.uniform(1, 600))
            if at >= now:
                break
            JobEvent.objects.create(
                job=job, at=at, kind=JobEvent.Kind.WAIT_REASON, message="", details={"code": rng.choice(codes)}
            )
        admitted = at + timedelta(minutes=rng.uniform(5, 600))
        if admitted < now and n % 10:
            JobEvent.objects.create(job=job, at=admitted, kind=JobEvent.Kind.ADMITTED, message="Admitted.")
            Job.objects.filter(pk=job.pk).update(state=Job.State.SUCCEEDED)
    rollup.wait_attribution_sync(now=now)


def test_team_lead_reads_where_the_waiting_went(page, shots, settings):
    settings.BILLING_TIME_ZONE = "UTC"
    pool = research_pool()
    carol = UserFactory(username="carol", first_name="Carol", last_name="Lead")
    MembershipFactory(team=pool.team, user=carol, role=Membership.Role.LEAD)
    with DB_LOCK:
        _waiting_history(pool)
    login(page, "carol")
    page.goto("/waiting/")
    expect(page.locator("h1")).to_have_text("Where the waiting went")
    sentence = page.locator("#queues-waiting-sentence")
    expect(sentence).to_contain_text(re.compile(r"^Vision waited [\d.,]+ GPU-hours this week: \d+ % "))
    # the trend is drawn by the locally served plotly.js, one bar trace per cause with waiting
    chart = page.locator("[data-plotly-figure=queues-fig-waiting]")
    expect(chart.locator(".main-svg").first).to_be_visible()
    traces = page.evaluate(
        "() => document.querySelector('[data-plotly-figure=queues-fig-waiting]').data.map(t => t.meta)"
    )
    assert "quota" in traces
    weeks = page.locator("#queues-waiting-weeks tbody tr")
    expect(weeks).to_have_count(12)
    page.screenshot(path=str(shots / "waiting.png"), full_page=True)

    # the CSV has the page's total
    total = page.locator("#queues-waiting-weeks tfoot td").last.inner_text()
    with page.expect_download() as download:
        page.click("text=Export CSV")
    rows = list(csv.DictReader(io.StringIO(_read(download.value.path()))))
    assert f"{sum(Decimal(r['gpu_hours']) for r in rows):,.1f}" == total

    # a figure opens the jobs behind it
    link = page.locator("#queues-waiting-weeks a[data-cause=quota]").first
    link.click()
    expect(page.locator("h1")).to_have_text("Jobs behind the waiting")
    expect(page.locator("#queues-waiting-jobs tbody tr").first.locator("a")).to_have_attribute(
        "href", re.compile(r"^/jobs/\d+/$")
    )
    page.screenshot(path=str(shots / "waiting-jobs.png"), full_page=True)

    # a filter through htmx keeps the page and swaps the report
    page.goto("/waiting/")
    page.select_option("#id_resource_class", "h100")
    page.click("form.filters button[type=submit]")
    expect(page).to_have_url(re.compile(r"resource_class=h100"))
    expect(page.locator("#queues-waiting-report")).to_contain_text("class H100 80GB")


def _read(path) -> str:
    """A downloaded file's text."""
    return Path(path).read_text(encoding="utf-8")


def test_an_admin_estimates_what_would_have_helped(page, shots, settings):
    settings.BILLING_TIME_ZONE = "UTC"
    pool = research_pool(racks={"rack-a": [8]}, nominal="4")
    UserFactory(username="root", is_staff=True, is_superuser=True)
    now = timezone.now().replace(microsecond=0)
    start = now - 5 * H
    with DB_LOCK:
        two_quota_jobs(pool, start)
        rollup.wait_attribution_sync(now=now)
    login(page, "root")
    page.goto(f"/waiting/?team=vision&start={monday(now.date() - timedelta(days=7))}")
    panel = page.locator("#queues-waiting-study")
    expect(panel).to_contain_text("What would have helped")
    panel.locator("#study-days").fill("1")
    panel.locator("button[type=submit]").click()  # queued after commit; the worker (eager here) replays
    row = page.locator("#queues-waiting-study tr[data-cause=quota]")
    expect(row).to_contain_text("4 more GPU(s) of nominal quota for Vision", timeout=60_000)
    expect(row.locator("td").last).to_have_text("8.0")
    page.screenshot(path=str(shots / "waiting-study.png"), full_page=True)


def test_team_lead_reads_the_monthly_statement(page, shots, settings):
    settings.BILLING_TIME_ZONE = "UTC"
    settings.BILLING_CURRENCY = "EUR"
    with DB_LOCK:
        world = make_world()
        _march(world)
        CohortSettlement.objects.create(cohort=world.cohort, effective_from=MARCH, share_percent=Decimal("50"))
    login(page, "lead")
    page.goto("/cost/ledger/?team=vision&month=2026-03")
    expect(page.locator("#billing-ledger-title")).to_have_text("Vision — March 2026")
    borrowed = page.locator("#billing-ledger-borrowed")
    expect(borrowed.locator("tbody tr").first).to_contain_text("NLP")
    expect(borrowed.locator("tbody tr").first).to_contain_text("16.00 EUR")
    expect(borrowed.locator("tfoot")).to_contain_text("8.00 EUR")  # paid to NLP at 50 %
    expect(page.locator("#billing-ledger-reclaims tbody tr")).to_have_count(1)
    expect(page.locator("#billing-ledger-reclaims")).to_contain_text("InCohortReclamation")
    expect(page.locator("#billing-ledger-charge tfoot")).to_contain_text("5,960.00 EUR")
    page.screenshot(path=str(shots / "ledger-statement.png"), full_page=True)
    # the month is a month picker; a new month swaps the statement in place
    page.fill("#id_month", "2026-02")
    page.click("form.filters button[type=submit]")
    expect(page.locator("#billing-ledger-title")).to_have_text("Vision — February 2026")
    expect(page.locator("#billing-ledger-borrowed")).to_contain_text("The team borrowed nothing")


def test_a_waiting_job_says_its_team_used_more_than_its_share(page, shots):
    """Vision held all 8 H100s of the cohort (4 of them borrowed from Speech) for the last week: recent usage 8 on a
    nominal quota of 4, twice its share. Now both teams run 4 GPUs and Vision asks for 4 more: it waits, and says
    why its recent usage matters."""
    pool = research_pool(racks={"rack-a": [8]}, nominal="4", other_nominal="4")
    now = timezone.now()
    with DB_LOCK:
        cohort = Cohort.objects.create(name="research", usage_half_life=timedelta(days=3, hours=12))
        TeamQuota.objects.filter(cluster=pool.cluster).update(cohort=cohort)
        past = JobFactory(
            team=pool.team, owner=pool.user, cluster=pool.cluster, resource_class=pool.rc, name="last-week",
            devices_per_pod=8, state=Job.State.SUCCEEDED, submitted_at=now - timedelta(days=7),
        )  # fmt: skip
        node = pool.nodes[0]
        for device in pool.devices(node):
            Allocation.objects.create(
                job=past, device=device, started_at=now - timedelta(days=7), ended_at=now - timedelta(minutes=10)
            )
        occupy(pool, node=node, count=4, team=pool.team, name="ours", started=now - timedelta(minutes=5))
        occupy(pool, node=node, count=4, team=pool.other_team, name="theirs", started=now - timedelta(minutes=5))
        job = job_services.job_submit(
            owner=pool.user, team=pool.team, spec=_spec(pool, "more"), now=now, notify_backend=False
        )
        simulated_cluster_tick_run(cluster_id=pool.cluster.pk, now=now + timedelta(seconds=1))
    job.refresh_from_db()
    assert job.wait_reason == wc.QUOTA_EXHAUSTED, job.wait_message
    assert "Your team used 2.0× its share over the last 7 days" in job.wait_message
    login(page, "alice")
    page.goto(f"/jobs/{job.pk}/")
    expect(page.locator(f"#queues-job-wait-{job.pk}")).to_contain_text(
        "Your team used 2.0× its share over the last 7 days"
    )
    page.screenshot(path=str(shots / "job-recent-usage.png"), full_page=True)


def _spec(pool, name: str) -> JobSpec:
    return JobSpec(
        name=name, image="registry.example.org/vision/train:1.2", resource_class=pool.rc, devices_per_pod=4,
        pod_count=1, command=("python", "train.py"), sim_runtime_seconds=3600,
    )  # fmt: skip
