"""A real Celery worker (on an in-memory broker) records beat-marked runs, the tasks they send, failures and its
heartbeat; the beat scheduler marks what it sends and writes its own heartbeat."""

from __future__ import annotations

import time

import pytest
from celery.beat import ScheduleEntry
from celery.contrib.testing.worker import start_worker
from kombu import pools as kombu_pools

from liveness import celery_hooks
from liveness.beat import HeartbeatScheduler
from liveness.celery_hooks import ENTRY_HEADER, INTERVAL_HEADER, SENT_HEADER
from liveness.models import PeriodicTaskState, ProcessHeartbeat
from portal.celery import app

pytestmark = pytest.mark.django_db(transaction=True)


@app.task(name="tests.liveness.leaf", ignore_result=True)
def leaf() -> None:
    """Does nothing."""


@app.task(name="tests.liveness.fan_out", ignore_result=True)
def fan_out() -> None:
    """Sends one leaf, as the simulated clusters' tick sends one tick per cluster."""
    leaf.delay()


@app.task(name="tests.liveness.boom", ignore_result=True)
def boom() -> None:
    """Fails."""
    raise ValueError("boom")


def _reset_pools() -> None:
    kombu_pools.reset()
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def memory_worker(settings):
    """A worker thread on kombu's in-memory broker, tasks sent to it (not run eagerly)."""
    saved = {key: app.conf[key] for key in ("broker_url", "task_always_eager")}
    app.conf.update(broker_url="memory://", task_always_eager=False)
    settings.CELERY_TASK_ALWAYS_EAGER = False
    settings.HEARTBEAT_SECONDS = 0.2
    _reset_pools()
    try:
        with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
            yield
    finally:
        celery_hooks.on_worker_shutdown()
        app.conf.update(saved)
        _reset_pools()


def _wait_for(check, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("gave up waiting")


def test_a_marked_run_its_lag_and_the_task_it_sends_are_recorded(memory_worker):
    sent = time.time() - 1.5
    fan_out.apply_async(headers={ENTRY_HEADER: "fan", SENT_HEADER: sent, INTERVAL_HEADER: 5.0})
    child = "fan › tests.liveness.leaf"
    rows = _wait_for(
        lambda: (
            {r.entry: r for r in PeriodicTaskState.objects.filter(last_succeeded_at__isnull=False)}
            if PeriodicTaskState.objects.filter(entry=child, last_succeeded_at__isnull=False).exists()
            else None
        )
    )
    parent = rows["fan"]
    assert (parent.task, parent.runs, parent.failures, parent.interval_seconds) == ("tests.liveness.fan_out", 1, 0, 5.0)
    assert parent.last_lag_seconds >= 1.5
    assert (rows[child].task, rows[child].runs, rows[child].interval_seconds) == ("tests.liveness.leaf", 1, 5.0)


def test_an_unmarked_run_is_not_recorded_and_a_failing_marked_one_is(memory_worker):
    leaf.delay()
    boom.apply_async(headers={ENTRY_HEADER: "boom", SENT_HEADER: time.time()})
    row = _wait_for(lambda: PeriodicTaskState.objects.filter(entry="boom", failures=1).first())
    assert row.last_error == "ValueError: boom"
    assert list(PeriodicTaskState.objects.values_list("entry", flat=True)) == ["boom"]


def test_the_heartbeat_thread_beats_until_stopped_and_records_the_clean_stop(settings):
    # (the worker starts it on worker_ready, which Celery's test worker does not send: the system tests cover that)
    settings.HEARTBEAT_SECONDS = 0.2
    heartbeat = celery_hooks.Heartbeat(kind="worker", hostname="celery@test")
    heartbeat.start()
    try:
        row = _wait_for(lambda: ProcessHeartbeat.objects.filter(kind="worker").first())
        _wait_for(lambda: ProcessHeartbeat.objects.get(pk=row.pk).last_seen_at > row.last_seen_at)
    finally:
        heartbeat.stop()
    row.refresh_from_db()
    assert (row.hostname, row.stopped_at is not None) == ("celery@test", True)


def test_beat_marks_each_send_and_writes_its_heartbeat(settings, tmp_path):
    saved = app.conf.broker_url
    app.conf.update(broker_url="memory://")
    _reset_pools()
    try:
        scheduler = HeartbeatScheduler(app=app, schedule_filename=str(tmp_path / "schedule"), lazy=False)
        entry = ScheduleEntry(name="leafy", task="tests.liveness.leaf", schedule=5.0, app=app)
        scheduler.apply_async(entry, advance=False)
        headers = entry.options["headers"]
        assert headers[ENTRY_HEADER] == "leafy"
        assert headers[INTERVAL_HEADER] == 5.0
        assert abs(headers[SENT_HEADER] - time.time()) < 30
        row = PeriodicTaskState.objects.get(entry="leafy")
        assert (row.sent, row.task, row.interval_seconds) == (1, "tests.liveness.leaf", 5.0)
        scheduler.tick()
        beat = ProcessHeartbeat.objects.get(kind="beat")
        assert beat.stopped_at is None
        scheduler.close()
    finally:
        app.conf.update(broker_url=saved)
        _reset_pools()
