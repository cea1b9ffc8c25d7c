"""Browser test of the cost page: Playwright (sync API) driving Debian's /usr/bin/chromium headless.

A team lead opens the cost page and sees numbers that add up to the jobs, the charts drawn by plotly.js served
locally, a filter applied through HTMX, and a CSV with the same totals. Screenshots go to docs/screenshots/
when SAVE_SCREENSHOTS=1, else to a temp folder.
"""

from __future__ import annotations

import csv
import io
import re
from datetime import datetime, time, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from billing import services
from billing.pricing import local_day
from billing.services.common import billing_tz
from tests.billing.conftest import make_world, run_job
from tests.factories import PASSWORD

pytestmark = pytest.mark.django_db(transaction=True)

H = timedelta(hours=1)


@pytest.fixture
def usage(settings):
    """Two days ago: alice 2 GPUs × 3 h, bob 1 GPU × 1 h (vision); carol 6 GPUs × 1 h (nlp, 2 borrowed)."""
    settings.BILLING_TIME_ZONE = "UTC"
    world = make_world()
    now = timezone.now()
    tz = billing_tz()
    day = local_day(now, tz) - timedelta(days=2)
    start = datetime.combine(day, time(8), tzinfo=tz)
    run_job(world, devices=2, start=start, end=start + 3 * H)
    run_job(world, owner=world.bob, devices=1, start=start + H, end=start + 2 * H)
    run_job(world, team=world.other, owner=world.carol, devices=6, start=start, end=start + H, borrowing=True)
    services.metering_sync(now=now)
    services.usage_rollup_range(start=day - timedelta(days=1), end=local_day(now, tz), now=now)
    return world


def login(page: Page, username: str) -> None:
    page.goto("/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)


def kpi(page: Page, name: str):
    return page.locator(".kpi", has=page.locator("dt", has_text=re.compile(f"^{re.escape(name)}$", re.I))).locator("dd")


def test_team_lead_cost_page_adds_up_to_the_jobs(page, usage, shots):
    login(page, "lead")
    page.goto("/cost/")
    expect(page.locator("h1")).to_have_text("Cost")
    # 7 device-hours at 2.00 EUR: 6 owned by alice, 1 by bob; nothing borrowed by vision.
    expect(kpi(page, "Owned GPU-h")).to_have_text("7.0")
    expect(kpi(page, "Borrowed GPU-h")).to_have_text("0.0")
    expect(kpi(page, "Lent GPU-h (credited)")).to_have_text("2.0")
    jobs = page.locator("#billing-cost-jobs")
    expect(jobs.locator("tbody tr")).to_have_count(2)
    expect(jobs.locator("tfoot [data-total=owned]")).to_have_text("7.0")
    expect(jobs.locator("tfoot [data-total=cost]")).to_have_text("14.00 EUR")
    per_user = page.locator(".panel", has=page.locator("h2", has_text="Per user")).locator("table")
    expect(per_user.locator("tbody tr")).to_have_count(2)
    # The charts are drawn by the locally served plotly.js: four stacked series of hours, two bars per user.
    hours = page.locator("[data-plotly-figure=billing-fig-hours]")
    expect(hours.locator(".main-svg").first).to_be_visible()
    traces = page.evaluate(
        "() => document.querySelector('[data-plotly-figure=billing-fig-hours]').data.map(t => [t.name, t.stackgroup])"
    )
    assert [name for name, _ in traces] == [
        "Owned (within quota)",
        "Borrowed",
        "Idle reserved",
        "Lost (preemption, hardware)",
    ]
    assert {group for _, group in traces} == {"hours"}
    owned = page.evaluate(
        "() => document.querySelector('[data-plotly-figure=billing-fig-hours]').data[0].y.reduce((a, b) => a + b, 0)"
    )
    assert owned == pytest.approx(7.0)
    expect(page.locator("[data-plotly-figure=billing-fig-users] .main-svg").first).to_be_visible()
    page.screenshot(path=str(shots / "cost-report-test.png"), full_page=True)

    # Filter on bob through HTMX: the report fragment is swapped and the URL follows.
    page.select_option("#id_user", str(usage.bob.pk))
    page.get_by_role("button", name="Apply").click()
    expect(jobs.locator("tfoot [data-total=cost]")).to_have_text("2.00 EUR")
    expect(kpi(page, "Owned GPU-h")).to_have_text("1.0")
    assert f"user={usage.bob.pk}" in page.url
    # The swapped-in charts are drawn once htmx has settled the fragment.
    page.wait_for_function("() => document.querySelector('[data-plotly-figure=billing-fig-hours]').data")
    bob_owned = page.evaluate(
        "() => document.querySelector('[data-plotly-figure=billing-fig-hours]').data[0].y.reduce((a, b) => a + b, 0)"
    )
    assert bob_owned == pytest.approx(1.0)

    # The CSV export takes the same filters and has the same numbers.
    with page.expect_download() as download:
        page.click("text=Export CSV")
    rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    total = next(r for r in rows if r["section"] == "total")
    assert Decimal(total["used_hours"]) == 1
    assert Decimal(total["cost_EUR"]) == Decimal("2.00")


def test_another_teams_lead_cannot_see_the_team(page, usage):
    login(page, "carol")  # leads nlp, not vision
    page.goto("/cost/")
    expect(page.locator("#id_team option")).to_have_count(1)
    # 6 GPUs for an hour above a nominal quota of 4: 4 owned, 2 borrowed.
    expect(page.locator("#billing-cost-jobs tfoot [data-total=owned]")).to_have_text("4.0")
    expect(page.locator("#billing-cost-jobs tfoot [data-total=borrowed]")).to_have_text("2.0")
    response = page.goto("/cost/?team=vision")
    assert response.status == 404


IDLE_VISIBLE = """() => ['billing-fig-hours', 'billing-fig-cost'].map(id => {
    const el = document.querySelector(`[data-plotly-figure=${id}]`);
    return el.data.filter(t => t.meta === 'idle').map(t => t.visible !== false);
})"""
Y_MAX = "id => document.querySelector(`[data-plotly-figure=${id}]`)._fullLayout.yaxis.range[1]"


def test_lead_hides_the_idle_reservation_and_reads_what_the_charge_is_made_of(page, usage):
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    login(page, "lead")
    page.goto("/cost/")
    # Only the partial bundle (scatter, bar, pie) is loaded: it draws every chart of the page.
    scripts = page.evaluate("() => [...document.scripts].map(s => s.src).filter(s => s.includes('plotly'))")
    assert [s.rsplit("/", 1)[1] for s in scripts] == ["plotly-basic.min.js"]
    expect(page.locator("[data-plotly-figure=billing-fig-cost] .main-svg").first).to_be_visible()
    breakdown = page.locator("#billing-charge-breakdown")
    expect(breakdown.locator("tr[data-part=idle] th")).to_contain_text("Idle reservation")
    idle_share = breakdown.locator("tr[data-part=idle] td").nth(1).inner_text()
    assert idle_share.endswith(" %")
    assert page.evaluate(IDLE_VISIBLE) == [[True], [True]]
    cost_max = page.evaluate(Y_MAX, "billing-fig-cost")

    page.check("#billing-hide-idle")
    assert page.evaluate(IDLE_VISIBLE) == [[False], [False]]
    expect(page.locator("#billing-hide-idle-note")).to_be_visible()
    # Without the idle series the cost axis is no longer flattened by it.
    assert page.evaluate(Y_MAX, "billing-fig-cost") < cost_max
    # The choice holds across an HTMX filter change and a reload.
    page.select_option("#id_bucket", "week")
    page.get_by_role("button", name="Apply").click()
    expect(page.locator("#billing-cost-report h2", has_text="Per week")).to_be_visible()
    expect(page.locator("[data-plotly-figure=billing-fig-cost] .main-svg").first).to_be_visible()
    page.wait_for_function("() => document.querySelector('[data-plotly-figure=billing-fig-cost]').data")
    assert page.evaluate(IDLE_VISIBLE) == [[False], [False]]
    page.reload()
    expect(page.locator("#billing-hide-idle")).to_be_checked()
    page.wait_for_function("() => document.querySelector('[data-plotly-figure=billing-fig-cost]').data")
    assert page.evaluate(IDLE_VISIBLE) == [[False], [False]]
    page.uncheck("#billing-hide-idle")
    assert page.evaluate(IDLE_VISIBLE) == [[True], [True]]

    # One row per job in the second CSV: job, user, class, GPU-hours, cost.
    with page.expect_download() as download:
        page.click("text=CSV per job")
    rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    assert sorted((r["user"], r["gpu_hours"], r["cost_EUR"]) for r in rows) == [
        ("alice", "6.000", "12.00"),
        ("bob", "1.000", "2.00"),
    ]
    assert errors == []
