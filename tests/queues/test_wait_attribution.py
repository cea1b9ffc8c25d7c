"""Wait attribution: a job's wait reasons as GPU-hours per week and cause, rolled up incrementally.

Hand-worked figures: the job of ``_three_changes`` asks for 2 pods × 2 GPUs = 4 GPUs and waits from Sunday 20:00
to Tuesday 02:00 (30 h), its reason changing three times:

    Sun 08 Mar 20:00  submitted                 (the first reason, 30 s later, counts from here)
    Sun 20:00:30      quota_exhausted    ─┐ 12 h: 4 h in the week of Mon 02 Mar, 8 h in the week of Mon 09 Mar
    Mon 09 Mar 08:00  topology_fragmented ┤  6 h
    Mon 14:00         health_blocked      ┤  6 h
    Mon 20:00         quota_exhausted     ┤  6 h
    Tue 10 Mar 02:00  admitted           ─┘

    × 4 GPUs → week of 02 Mar: quota 16 GPU-h; week of 09 Mar: quota (8 + 6) × 4 = 56, fragmentation 24, health 24
    (104 in that week, 120 in all = 30 h × 4).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from queues import services as job_services
from queues.engine import wait_codes as wc
from queues.models import JobEvent, WaitOpen, WaitTally, WaitWeekly
from queues.waiting import rollup
from queues.waiting.causes import CAUSES, cause_of
from queues.waiting.selectors import hours, wait_jobs, wait_report, wait_sentence
from queues.waiting.spans import Span, wait_spans
from tests.factories import (
    ClusterFactory,
    DeviceFactory,
    JobFactory,
    NodeFactory,
    ResourceClassFactory,
    ResourceFlavorFactory,
    TeamFactory,
)

SUN_20 = datetime(2026, 3, 8, 20, 0, tzinfo=UTC)
H = timedelta(hours=1)
WEEK_1, WEEK_2 = date(2026, 3, 2), date(2026, 3, 9)
US_H = 3_600_000_000


@pytest.fixture(autouse=True)
def _utc_weeks(settings):
    settings.BILLING_TIME_ZONE = "UTC"


@pytest.fixture
def pool(db):
    cluster = ClusterFactory(name="sim")
    flavor = ResourceFlavorFactory(name="h100")
    node = NodeFactory(cluster=cluster, flavor=flavor, name="gpu-a")
    devices = [DeviceFactory(node=node, index=i) for i in range(8)]
    rc = ResourceClassFactory(slug="h100", name="H100 80GB", flavors=[flavor])
    team = TeamFactory(slug="vision", name="Computer Vision")
    return {"cluster": cluster, "flavor": flavor, "devices": devices, "rc": rc, "team": team}


def _reason(job, code: str, at: datetime) -> None:
    job_services.job_set_wait_reason(job, code=code, message=f"waiting: {code}", now=at)


def _submit(pool, *, at: datetime, pods: int = 2, per_pod: int = 2):
    job = JobFactory(
        team=pool["team"], cluster=pool["cluster"], resource_class=pool["rc"], devices_per_pod=per_pod,
        pod_count=pods, submitted_at=at,
    )  # fmt: skip
    job_services.record_event(job, JobEvent.Kind.SUBMITTED, "Submitted.", at=at)
    return job


def _admit(pool, job, at: datetime) -> None:
    devices = pool["devices"][: job.total_devices]
    job_services.job_admit(
        job,
        now=at,
        cluster_queue="vision",
        pod_sets=[{"name": "main", "count": job.pod_count, "flavors": {"nvidia.com/gpu": "h100"}, "nodes": ["gpu-a"]}],
        borrowing=False,
        devices=[devices[i : i + job.devices_per_pod] for i in range(0, len(devices), job.devices_per_pod)],
    )


def _three_changes(pool, *, sync=None):
    """The job of the module docstring; ``sync(now)`` is called after each step when given."""
    step = sync or (lambda now: None)
    job = _submit(pool, at=SUN_20)
    step(SUN_20 + timedelta(seconds=10))
    _reason(job, wc.QUOTA_EXHAUSTED, SUN_20 + timedelta(seconds=30))
    step(SUN_20 + H)
    _reason(job, wc.TOPOLOGY_FRAGMENTED, SUN_20 + 12 * H)
    step(SUN_20 + 13 * H)
    _reason(job, wc.HEALTH_BLOCKED, SUN_20 + 18 * H)
    step(SUN_20 + 19 * H)
    _reason(job, wc.QUOTA_EXHAUSTED, SUN_20 + 24 * H)
    step(SUN_20 + 25 * H)
    _admit(pool, job, SUN_20 + 30 * H)
    step(SUN_20 + 31 * H)
    return job


def _tallies(job) -> dict[tuple[date, str], float]:
    return {(t.week, t.cause): t.device_us / US_H for t in WaitTally.objects.filter(job=job)}


def test_every_wait_code_has_a_cause():
    """No wait code falls through to "no reason recorded": each names what its waiting is attributed to."""
    for code in wc.WAIT_CODES:
        assert cause_of(code) != "unknown" or code == wc.CLUSTER_UNREACHABLE, code
    assert cause_of("quota_lent_out") == "lent_out"  # issue 32's lent-out code
    assert cause_of(wc.CAPACITY_RESERVED) == "reservation"  # issue 37's reservations
    assert cause_of("") == "unknown"
    assert {"quota", "borrow_limit", "lent_out", "no_hardware", "class_full", "fragmentation", "health"} <= set(CAUSES)
    assert {"priority", "reservation", "provisioning"} <= set(CAUSES)


def test_spans_backfill_the_first_reason_and_close_at_admission():
    t = SUN_20
    events = [
        ("submitted", t, ""),
        ("wait_reason", t + timedelta(seconds=30), "quota_exhausted"),
        ("wait_reason", t + 12 * H, "topology_fragmented"),
        ("wait_reason", t + 12 * H, "topology_fragmented"),  # the same code again: no new span
        ("admitted", t + 18 * H, ""),
        ("requeued", t + 20 * H, ""),
        ("cancelled", t + 21 * H, ""),  # requeued and cancelled before any reason: "no reason recorded"
        ("submitted", t + 22 * H, ""),  # a later start of a job that ended starts a new wait
    ]
    assert wait_spans(events) == [
        Span("quota_exhausted", t, t + 12 * H),
        Span("topology_fragmented", t + 12 * H, t + 18 * H),
        Span("", t + 20 * H, t + 21 * H),
        Span("", t + 22 * H, None),
    ]


def test_a_job_whose_reason_changed_three_times(pool):
    job = _three_changes(pool)
    rollup.wait_attribution_sync(now=SUN_20 + 31 * H)
    assert _tallies(job) == {
        (WEEK_1, "quota"): 16.0,
        (WEEK_2, "quota"): 56.0,
        (WEEK_2, "fragmentation"): 24.0,
        (WEEK_2, "health"): 24.0,
    }
    assert not WaitOpen.objects.exists()
    weekly = {(w.week, w.cause): (w.device_us / US_H, w.wait_us / US_H, w.jobs) for w in WaitWeekly.objects.all()}
    assert weekly == {
        (WEEK_1, "quota"): (16.0, 4.0, 1),
        (WEEK_2, "quota"): (56.0, 14.0, 1),
        (WEEK_2, "fragmentation"): (24.0, 6.0, 1),
        (WEEK_2, "health"): (24.0, 6.0, 1),
    }
    report = wait_report(teams=[pool["team"]], first_week=WEEK_1, last_week=WEEK_2, now=SUN_20 + 31 * H)
    assert report.total == {"quota": 72 * US_H, "fragmentation": 24 * US_H, "health": 24 * US_H}
    assert hours(report.total_us) == 120
    sentence = wait_sentence(report, who="Computer Vision", week=WEEK_2, this_week=WEEK_2)
    assert sentence == (
        "Computer Vision waited 104 GPU-hours this week: 54 % own quota used up, 23 % fragmentation (H100 80GB), "
        "23 % unhealthy devices (H100 80GB)."
    )


def test_incremental_runs_after_every_step_give_the_same_rows(pool):
    """A run after each event of the timeline (open spans, moving sums) ends exactly where one run at the end does."""
    opened = []

    def sync(now):
        rollup.wait_attribution_sync(now=now)
        opened.append(list(WaitOpen.objects.values_list("cause", "since")))

    job = _three_changes(pool, sync=sync)
    assert opened[0] == [("unknown", SUN_20)]  # submitted, not yet diagnosed
    assert opened[1] == [("quota", SUN_20)]  # the first reason counts from the submission
    assert opened[2] == [("fragmentation", SUN_20 + 12 * H)]
    assert opened[-1] == []  # admitted
    incremental = _tallies(job)
    weekly = sorted(WaitWeekly.objects.values_list("week", "cause", "device_us", "wait_us", "jobs"))
    rollup.wait_attribution_rebuild(now=SUN_20 + 32 * H)
    assert _tallies(job) == incremental
    assert sorted(WaitWeekly.objects.values_list("week", "cause", "device_us", "wait_us", "jobs")) == weekly


def test_a_second_run_changes_nothing_and_reads_only_new_events(pool, django_assert_max_num_queries):
    _three_changes(pool)
    first = rollup.wait_attribution_sync(now=SUN_20 + 31 * H)
    assert first.jobs == 1
    rows = sorted(WaitWeekly.objects.values_list("week", "cause", "device_us", "jobs"))
    # within the lag (10 minutes) the same events are read again, and change nothing
    again = rollup.wait_attribution_sync(now=SUN_20 + 31 * H + timedelta(minutes=5))
    assert sorted(WaitWeekly.objects.values_list("week", "cause", "device_us", "jobs")) == rows
    assert again.jobs == 1
    with django_assert_max_num_queries(8):  # past the lag: the cursor has moved past them
        quiet = rollup.wait_attribution_sync(now=SUN_20 + 31 * H + timedelta(minutes=20))
    assert quiet.jobs == 0
    assert sorted(WaitWeekly.objects.values_list("week", "cause", "device_us", "jobs")) == rows


def test_open_spans_count_up_to_now_in_each_week(pool):
    """A 1-GPU job waiting since Monday 10:00 for a full class, read on Wednesday 10:00 and on the next Tuesday."""
    job = _submit(pool, at=SUN_20 + 14 * H, pods=1, per_pod=1)  # Mon 09 Mar 10:00
    _reason(job, wc.CLASS_EXHAUSTED, SUN_20 + 14 * H + timedelta(seconds=10))
    rollup.wait_attribution_sync(now=SUN_20 + 15 * H)
    wednesday = SUN_20 + 62 * H
    report = wait_report(teams=[pool["team"]], first_week=WEEK_2, last_week=WEEK_2, now=wednesday)
    assert report.by_week[WEEK_2] == {"class_full": 48 * US_H}
    assert report.waiting_jobs == 1
    next_tuesday = datetime(2026, 3, 17, 10, tzinfo=UTC)
    later = wait_report(teams=[pool["team"]], first_week=WEEK_2, last_week=date(2026, 3, 16), now=next_tuesday)
    assert later.by_week[WEEK_2] == {"class_full": 158 * US_H}  # Mon 10:00 → Mon 16 Mar 00:00: 14 h + 6 days
    assert later.by_week[date(2026, 3, 16)] == {"class_full": 34 * US_H}
    drill = wait_jobs(teams=[pool["team"]], week=WEEK_2, cause="class_full", now=next_tuesday)
    assert [(r.job.pk, r.device_hours, r.still_waiting) for r in drill.rows] == [(job.pk, 158, True)]


def test_drill_down_lists_the_jobs_of_a_week_and_cause(pool):
    big = _three_changes(pool)
    small = _submit(pool, at=SUN_20 + 12 * H, pods=1, per_pod=1)
    _reason(small, wc.TOPOLOGY_FRAGMENTED, SUN_20 + 12 * H)
    job_services.job_finish(small, state="cancelled", now=SUN_20 + 14 * H, message="cancelled")
    rollup.wait_attribution_sync(now=SUN_20 + 31 * H)
    drill = wait_jobs(teams=[pool["team"]], week=WEEK_2 + timedelta(days=2), cause="fragmentation", now=SUN_20 + 31 * H)
    assert drill.week == WEEK_2
    assert [(r.job.pk, r.device_hours, r.wait_hours) for r in drill.rows] == [(big.pk, 24, 6), (small.pk, 2, 2)]
    assert drill.count == 2
    assert hours(drill.total_us) == 26


def test_the_pages_sums_grouped_in_sql_equal_the_csvs_cells(pool):
    """The page reads its sums grouped in SQL; the CSV reads every week × team × class × cause: the same totals, for
    one team and for several (another team's 1-GPU job still waiting for a full class since Monday 10:00)."""
    _three_changes(pool)
    speech = TeamFactory(slug="speech", name="Speech")
    other = _submit({**pool, "team": speech}, at=SUN_20 + 14 * H, pods=1, per_pod=1)
    _reason(other, wc.CLASS_EXHAUSTED, SUN_20 + 14 * H + timedelta(seconds=10))
    rollup.wait_attribution_sync(now=SUN_20 + 31 * H)
    now = SUN_20 + 40 * H
    for teams in ([pool["team"]], [pool["team"], speech], None):
        args = {"teams": teams, "first_week": WEEK_1, "last_week": WEEK_2, "now": now}
        grouped, cells = wait_report(**args), wait_report(**args, cells=True)
        assert (grouped.by_week, grouped.by_class, grouped.by_team, grouped.waiting_jobs) == (
            cells.by_week, cells.by_class, cells.by_team, cells.waiting_jobs
        )  # fmt: skip
        assert grouped.cells == {}
        assert sum(cells.cells.values()) == cells.total_us
    assert cells.by_team[speech.pk] == {"class_full": 26 * US_H}  # Mon 10:00 → Tue 12:00
    assert hours(cells.by_team[pool["team"].pk]["quota"]) == 72
