"""Browser test: a failed job's page shows its pod log, events and GPU utilisation (loaded by htmx once), and the
researcher's My usage page (the navigation's link for a non-lead) shows their GPU-hours and cost.

Screenshots (docs/screenshots/ with SAVE_SCREENSHOTS=1): failed-job-log.png, researcher-usage.png.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from billing import services as billing
from billing.pricing import local_day
from billing.services.common import billing_tz
from clusters.backends.simulated import simulated_cluster_tick_run
from clusters.port import CeleryClusterPort
from pools.health.ingest import health_ingest_scrape
from pools.models import Allocation
from queues import services
from queues.models import Job
from queues.services import JobSpec
from tests.browser.scenarios import PASSWORD, research_pool
from tests.browsing import DB_LOCK
from tests.health.scrapes import exposition, gpu

pytestmark = pytest.mark.django_db(transaction=True)


def failed_job(pool, monkeypatch) -> Job:
    """A 2-GPU job that ran 30 minutes two hours ago and failed; DCGM scraped its cards twice; metered, rolled.

    The test drives the simulated clock from two hours ago: the after-commit tick at submission (which would run
    at the real now) is left out.
    """
    monkeypatch.setattr(CeleryClusterPort, "job_submitted", lambda self, *, job_id: None)
    billing.rate_set(flavor=pool.flavor, price_per_hour="2.50", effective_from=datetime(2025, 1, 1, tzinfo=UTC))
    t0 = timezone.now() - timedelta(hours=2)
    spec = JobSpec(
        name="resnet-sweep",
        image="registry.example.org/vision/train:1.2",
        resource_class=pool.rc,
        devices_per_pod=2,
        pod_count=1,
        command=["python", "train.py"],
        args=["--epochs", "3"],
        sim_runtime_seconds=1800,
        sim_fails=True,
    )
    job = services.job_submit(owner=pool.user, team=pool.team, spec=spec, now=t0)
    simulated_cluster_tick_run(cluster_id=pool.cluster.pk, now=t0)
    simulated_cluster_tick_run(cluster_id=pool.cluster.pk, now=t0 + timedelta(seconds=1))
    job.refresh_from_db()
    cards = [a.device for a in Allocation.objects.filter(job=job).select_related("device__node")]
    for minutes, (a, b) in ((10, (93, 88)), (20, (12, 9))):
        text = exposition([gpu(cards[0], DCGM_FI_DEV_GPU_UTIL=a), gpu(cards[1], DCGM_FI_DEV_GPU_UTIL=b)])
        health_ingest_scrape(text=text, now=job.started_at + timedelta(minutes=minutes))
    simulated_cluster_tick_run(cluster_id=pool.cluster.pk, now=t0 + timedelta(minutes=35))
    job.refresh_from_db()
    assert job.state == Job.State.FAILED
    now = timezone.now()
    billing.metering_sync(now=now)
    today = local_day(now, billing_tz())
    billing.usage_rollup_range(start=local_day(t0, billing_tz()), end=today, now=now)
    return job


def test_failed_job_log_and_my_usage(page, live_server, shots, monkeypatch):
    pool = research_pool(racks={"rack-a": [4]})
    with DB_LOCK:
        job = failed_job(pool, monkeypatch)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto("/accounts/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url("**/classes/")

    page.goto(f"/jobs/{job.pk}/")
    expect(page.locator(".job-head [data-state]")).to_have_attribute("data-state", "failed")
    log = page.locator(f"#queues-job-run-{job.pk} pre.log")
    expect(log).to_contain_text("Container main terminated: exit code 1 (Error)")  # loaded by htmx
    expect(log).to_contain_text("$ python train.py --epochs 3")
    expect(page.locator(f"#queues-job-events-{job.pk}")).to_contain_text("BackoffLimitExceeded")
    expect(page.locator("[data-util=average]")).to_contain_text("51 %")  # (93 + 88 + 12 + 9) / 4 = 50.5
    expect(page.locator('[data-cost="hours"]')).to_contain_text("1.00 h")  # 2 GPUs × 30 min
    expect(page.locator('[data-cost="cost"]')).to_contain_text("2.50 EUR")
    page.screenshot(path=str(shots / "failed-job-log.png"), full_page=True)

    page.get_by_role("link", name="My usage").click()
    page.wait_for_url("**/cost/mine/")
    expect(page.locator('[data-total="hours"]')).to_contain_text("1.0")
    expect(page.locator('[data-total="cost"]')).to_contain_text("2.50 EUR")
    expect(page.locator("#billing-usage-classes")).to_contain_text("H100 80GB")
    expect(page.get_by_role("link", name="Cost", exact=True)).to_have_count(0)
    page.screenshot(path=str(shots / "researcher-usage.png"), full_page=True)
    assert errors == []
