"""The state of each component and the one predicate of the pages' live note (liveness.selectors)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from celery.schedules import crontab
from django.utils import timezone

from liveness import services
from liveness.selectors import live_data_status, liveness_status, periodic_status, process_component

pytestmark = pytest.mark.django_db

SCHEDULE = {
    "simulated-clusters-tick": {"task": "clusters.simulated_clusters_tick", "schedule": 5.0},
    "kube-sync-clusters": {"task": "clusters.kube_sync_clusters", "schedule": 60.0},
    "daily": {"task": "billing.usage_rollup_day", "schedule": crontab(hour=0, minute=30)},
}


@pytest.fixture
def knobs(settings, tmp_path):
    settings.HEARTBEAT_STALE_SECONDS = 60
    settings.PERIODIC_TASK_LATE_SECONDS = 60
    settings.CELERY_BEAT_SCHEDULE = SCHEDULE
    # an embedded broker whose file exists: the broker check answers ok
    broker = tmp_path / "broker.sqlite3"
    broker.write_bytes(b"")
    settings.CELERY_BROKER_URL = f"sqla+sqlite:///{broker}"
    return settings


def clock_text(when) -> str:
    """How the live note says a time: the hour, and the day too when it is not today (a test run just after
    midnight sees 23:58 as yesterday)."""
    local = timezone.localtime(when)
    return f"{local:%H:%M}" if local.date() == timezone.localdate() else f"{local:%Y-%m-%d %H:%M}"


def beat(kind: str, *, seen, pid: int = 1, started=None):
    services.heartbeat_record(kind=kind, hostname="h", pid=pid, started_at=started or seen, now=seen)


def ran(entry: str, task: str, at, *, ok: bool = True):
    services.periodic_started(entry=entry, task=task, sent_at=at, interval_seconds=5.0, now=at)
    services.periodic_finished(entry=entry, task=task, error=None if ok else RuntimeError("x"), now=at)


def test_a_process_is_ok_while_heard_from_within_the_threshold(knobs):
    now = timezone.now()
    assert process_component("worker", now=now).ok is False  # never ran
    beat("worker", seen=now - timedelta(seconds=59))
    assert process_component("worker", now=now).ok is True
    later = now + timedelta(seconds=2)
    stale = process_component("worker", now=later)
    assert stale.ok is False
    assert stale.last_seen == now - timedelta(seconds=59)


def test_a_cleanly_stopped_process_is_down_at_once(knobs):
    now = timezone.now()
    beat("beat", seen=now)
    services.heartbeat_stopped(kind="beat", hostname="h", pid=1, started_at=now, now=now)
    component = process_component("beat", now=now)
    assert (component.ok, component.detail) == (False, "the scheduler (beat) was stopped")


def test_the_newest_process_counts_after_a_restart(knobs):
    now = timezone.now()
    beat("worker", seen=now - timedelta(minutes=10), pid=1)
    beat("worker", seen=now, pid=2, started=now - timedelta(seconds=5))
    assert process_component("worker", now=now).ok is True


def test_an_interval_entry_is_overdue_after_two_periods_and_the_margin(knobs):
    now = datetime(2026, 12, 7, 15, 0, tzinfo=UTC)  # a fixed clock: the daily entry's next 00:30 is hours away
    beat("beat", seen=now, started=now - timedelta(hours=1))
    ran("simulated-clusters-tick", "clusters.simulated_clusters_tick", now - timedelta(seconds=69))
    ran("kube-sync-clusters", "clusters.kube_sync_clusters", now - timedelta(seconds=181))
    by_name = {e.entry: e for e in periodic_status(now=now)}
    assert by_name["simulated-clusters-tick"].overdue is False  # 69 s < 2 × 5 + 60
    assert by_name["kube-sync-clusters"].overdue is True  # 181 s > 2 × 60 + 60
    assert by_name["daily"].overdue is False  # never ran: due at 00:30 next
    assert by_name["daily"].last_run is None


def test_an_entry_never_run_is_overdue_counted_from_when_beat_started(knobs):
    now = timezone.now()
    beat("beat", seen=now, started=now - timedelta(seconds=71))
    by_name = {e.entry: e for e in periodic_status(now=now)}
    assert by_name["simulated-clusters-tick"].overdue is True


def test_a_crontab_entry_is_overdue_past_its_next_due_time_and_the_margin(knobs):
    now = timezone.now()
    ran("daily", "billing.usage_rollup_day", now - timedelta(days=1, hours=2))
    by_name = {e.entry: e for e in periodic_status(now=now)}
    assert by_name["daily"].overdue is True


@pytest.mark.parametrize(
    ("clock", "overdue"),
    [
        ("23:50", False),  # beat up since 22:50, the daily entry due at 00:30: not yet
        ("00:29", False),
        ("00:31", False),  # within the margin (60 s)
        ("00:32", True),
    ],
)
def test_a_crontab_entry_never_run_is_due_at_its_next_time_after_beat_started_whatever_the_clock(knobs, clock, overdue):
    """The next due time is counted from when beat started, not from the wall clock: at 23:50 an entry due at 00:30
    is not overdue (it was reported overdue from 23:31 on: Celery's remaining_estimate is relative to now)."""
    started = datetime(2026, 12, 7, 22, 50, tzinfo=UTC)
    hour, minute = (int(part) for part in clock.split(":"))
    now = datetime(2026, 12, 7 if hour >= 12 else 8, hour, minute, tzinfo=UTC)
    beat("beat", seen=now, started=started)
    assert {e.entry: e for e in periodic_status(now=now)}["daily"].overdue is overdue


def test_an_entry_fails_until_a_later_success_and_sent_tasks_are_listed(knobs):
    now = timezone.now()
    ran("simulated-clusters-tick", "t", now - timedelta(seconds=10), ok=False)
    ran("simulated-clusters-tick › clusters.simulated_cluster_tick", "clusters.simulated_cluster_tick", now, ok=False)
    entries = {e.entry: e for e in periodic_status(now=now)}
    assert entries["simulated-clusters-tick"].failing is True
    child = entries["simulated-clusters-tick › clusters.simulated_cluster_tick"]
    assert (child.is_child, child.failing, child.overdue) == (True, True, False)
    ran("simulated-clusters-tick", "t", now + timedelta(seconds=1))
    assert {e.entry: e for e in periodic_status(now=now)}["simulated-clusters-tick"].failing is False


def test_liveness_is_ok_when_every_component_is(knobs):
    now = timezone.now()
    beat("worker", seen=now)
    beat("beat", seen=now, started=now - timedelta(seconds=30))
    status = liveness_status(now=now)
    assert [status.database.ok, status.broker.ok, status.worker.ok, status.beat.ok] == [True] * 4
    assert status.tasks.ok  # nothing overdue yet (beat started 30 s ago)
    assert status.ok


def test_an_unreachable_broker_is_not_ok(knobs, tmp_path):
    knobs.CELERY_BROKER_URL = f"sqla+sqlite:///{tmp_path / 'missing' / 'broker.sqlite3'}"
    status = liveness_status()
    assert status.broker.ok is False
    assert "cannot be read" in status.broker.detail
    assert status.ok is False


def test_live_data_is_paused_since_the_workers_last_heartbeat(knobs):
    now = timezone.now()
    last = now - timedelta(minutes=5)
    beat("worker", seen=last)
    beat("beat", seen=now)
    live = live_data_status(now=now)
    assert (live.live, live.since) == (False, last)
    assert live.message == (
        f"Live data paused since {clock_text(last)}: the background worker is not running. Job states are as of then."
    )


def test_a_pause_since_another_day_says_the_day(knobs):
    now = timezone.now()
    last = now - timedelta(days=2)
    beat("worker", seen=last)
    beat("beat", seen=now)
    message = live_data_status(now=now).message
    assert message.startswith(f"Live data paused since {timezone.localtime(last):%Y-%m-%d %H:%M}: "), message


def test_live_data_is_paused_while_beat_is_down(knobs):
    now = timezone.now()
    beat("worker", seen=now)
    live = live_data_status(now=now)
    assert live.live is False
    assert "the scheduler (Celery beat) is not running" in live.message


def test_live_data_is_paused_while_a_tick_of_a_cluster_fails(knobs):
    now = timezone.now()
    beat("worker", seen=now)
    beat("beat", seen=now, started=now - timedelta(minutes=1))
    ran("simulated-clusters-tick", "t", now)
    ran("kube-sync-clusters", "k", now)
    child = "simulated-clusters-tick › clusters.simulated_cluster_tick"
    ran(child, "clusters.simulated_cluster_tick", now - timedelta(seconds=30))
    services.periodic_finished(entry=child, task="c", error=OSError("database is locked"), now=now)
    live = live_data_status(now=now)
    assert live.live is False
    assert live.since == now - timedelta(seconds=30)
    assert f"the background task {child} fails (OSError)" in live.message


def test_live_data_is_live_when_worker_beat_and_the_ticks_run(knobs):
    now = timezone.now()
    beat("worker", seen=now)
    beat("beat", seen=now, started=now - timedelta(minutes=1))
    ran("simulated-clusters-tick", "t", now)
    ran("kube-sync-clusters", "k", now)
    assert live_data_status(now=now).live is True


def test_an_overdue_tick_with_the_broker_down_names_the_broker(knobs, tmp_path):
    knobs.CELERY_BROKER_URL = f"sqla+sqlite:///{tmp_path / 'gone' / 'b.sqlite3'}"
    now = timezone.now()
    beat("worker", seen=now)
    beat("beat", seen=now, started=now - timedelta(hours=1))
    ran("simulated-clusters-tick", "t", now - timedelta(minutes=5))
    live = live_data_status(now=now)
    assert live.live is False
    assert "the background worker cannot reach its message broker" in live.message
