"""Heartbeats and periodic-task records: what the worker and beat write (one or two statements each)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from liveness import services
from liveness.models import PeriodicTaskState, ProcessHeartbeat

pytestmark = pytest.mark.django_db


def test_heartbeat_record_creates_the_process_then_moves_its_last_seen():
    start = timezone.now()
    key = {"kind": "worker", "hostname": "celery@a", "pid": 10, "started_at": start}
    services.heartbeat_record(**key, now=start)
    services.heartbeat_record(**key, now=start + timedelta(seconds=15))
    row = ProcessHeartbeat.objects.get()
    assert row.last_seen_at == start + timedelta(seconds=15)
    assert row.stopped_at is None


def test_a_restarted_process_is_a_new_row_and_a_clean_stop_is_recorded():
    start = timezone.now()
    first = {"kind": "worker", "hostname": "celery@a", "pid": 10, "started_at": start}
    services.heartbeat_record(**first, now=start)
    services.heartbeat_stopped(**first, now=start + timedelta(seconds=5))
    services.heartbeat_record(
        kind="worker", hostname="celery@a", pid=11, started_at=start + timedelta(seconds=6), now=start
    )
    assert ProcessHeartbeat.objects.count() == 2
    assert ProcessHeartbeat.objects.get(pid=10).stopped_at == start + timedelta(seconds=5)


def test_heartbeats_prune_forgets_processes_gone_for_a_week():
    now = timezone.now()
    for pid, age in ((1, timedelta(days=8)), (2, timedelta(days=6))):
        services.heartbeat_record(kind="beat", hostname="h", pid=pid, started_at=now - age, now=now - age)
    assert services.heartbeats_prune(now=now) == 1
    assert list(ProcessHeartbeat.objects.values_list("pid", flat=True)) == [2]


def test_a_periodic_run_counts_its_send_start_lag_and_end(settings):
    settings.PERIODIC_TASK_LATE_SECONDS = 60
    now = timezone.now()
    services.periodic_sent(entry="tick", task="clusters.tick", interval_seconds=5.0, now=now)
    lag = services.periodic_started(
        entry="tick", task="clusters.tick", sent_at=now, interval_seconds=5.0, now=now + timedelta(seconds=2)
    )
    services.periodic_finished(entry="tick", task="clusters.tick", error=None, now=now + timedelta(seconds=3))
    row = PeriodicTaskState.objects.get(entry="tick")
    assert lag == 2.0
    assert (row.sent, row.runs, row.late, row.failures) == (1, 1, 0, 0)
    assert row.interval_seconds == 5.0
    assert row.last_lag_seconds == 2.0
    assert row.last_succeeded_at == now + timedelta(seconds=3)


def test_a_run_started_past_the_margin_is_late_and_a_failure_keeps_its_error(settings):
    settings.PERIODIC_TASK_LATE_SECONDS = 60
    now = timezone.now()
    services.periodic_started(entry="e", task="t", sent_at=now, interval_seconds=None, now=now + timedelta(minutes=2))
    services.periodic_finished(entry="e", task="t", error=ValueError("boom"), now=now + timedelta(minutes=3))
    services.periodic_expired(entry="e", task="t", now=now)
    row = PeriodicTaskState.objects.get(entry="e")
    assert (row.runs, row.late, row.failures) == (1, 2, 1)
    assert row.last_error == "ValueError: boom"
    assert row.last_failed_at == now + timedelta(minutes=3)
