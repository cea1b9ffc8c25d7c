"""A real Celery worker process on the real Redis is killed (SIGKILL) mid-send: after a restart every event arrives,
none twice (PostgreSQL, Redis).

The webhook receiver holds the first digest's POST open, so the worker is killed after it claimed the events, wrote
the deliveries and sent the request — the worst moment: the receiver has the digest, the portal has not recorded
it. The restarted worker's sweep sends that digest again once its lease ran out, with the same Idempotency-Key:
the receiver, keying on it, counts each digest once; no event is left behind or put in two digests.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone
from kombu import pools as kombu_pools

from notify.kinds import Kind
from notify.models import Delivery, Digest, Event, Preference
from notify.record import Pending, events_record
from portal.celery import app
from tests.factories import UserFactory
from tests.notify.receiver import Receiver
from tests.redis_check import redis_answers

REDIS_URL = os.environ.get("NOTIFY_TEST_REDIS_URL", "redis://127.0.0.1:6379/12")
ROOT = Path(__file__).resolve().parents[2]


pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not redis_answers(REDIS_URL), reason=f"no Redis at {REDIS_URL}"),
    pytest.mark.xdist_group("redis"),  # one Celery queue on one Redis database: one xdist worker at a time
]


def _database_url() -> str:
    """The test database (the worker process must see what the test committed)."""
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


class Worker:
    """``celery worker`` in its own process group, logging to a file."""

    def __init__(self, log: Path) -> None:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "DATABASE_URL": _database_url(),
            "CELERY_BROKER_URL": REDIS_URL,
            "NOTIFY_BATCH_SECONDS": "0",
            "NOTIFY_LEASE_SECONDS": "3",
            "NOTIFY_WEBHOOK_TIMEOUT_SECONDS": "60",
            "NOTIFY_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",  # the receiver listens on loopback
        }
        command = [sys.executable, "-m", "celery", "-A", "portal.celery", "worker", "--pool=solo", "-l", "info",
                   "--without-mingle", "--without-gossip", "--without-heartbeat"]  # fmt: skip
        self.log = log.open("ab")
        self.proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)  # fmt: skip

    def kill(self) -> None:
        """SIGKILL the worker's whole process group: no shutdown, no acknowledgement, no clean-up."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        """End it if it still runs (SIGTERM, then SIGKILL)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.log.close()


def _reset_broker_pools() -> None:
    kombu_pools.reset()
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def broker():
    """Send tasks to Redis (not eagerly); purge what an interrupted earlier run left."""
    saved = {key: app.conf[key] for key in ("broker_url", "task_always_eager")}
    app.conf.update(broker_url=REDIS_URL, task_always_eager=False)
    _reset_broker_pools()
    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge(app.conf.task_default_queue)
    yield
    app.conf.update(saved)
    _reset_broker_pools()


def _wait(predicate, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_worker_killed_mid_send_loses_nothing_and_the_receiver_counts_each_digest_once(broker, tmp_path):
    now = timezone.now()
    with Receiver(hold_first=True) as hook:
        users = [UserFactory(username=name, email="") for name in ("ada", "bob")]
        for user in users:
            Preference.objects.create(user=user, email=False, webhook_url=f"{hook.url}/{user.username}")
            events_record(
                Pending(user.pk, Kind.PREEMPTED, f"kill:{user.pk}:{i}", f"job-{i}: preempted", "Preempted.", now)
                for i in range(40)
            )
        first = Worker(tmp_path / "worker.log")
        try:
            app.send_task("notify.deliver_pending")
            assert hook.first_arrived.wait(90), (tmp_path / "worker.log").read_text()
            # claimed and sent, not yet recorded as sent: the worker is waiting for the receiver's answer
            held = Delivery.objects.get(attempts=1)
            assert held.state == Delivery.State.SENDING
            assert Event.objects.filter(state=Event.State.PENDING).count() == 0
            first.kill()
        finally:
            first.stop()
        hook.release.set()
        assert Delivery.objects.get(pk=held.pk).state == Delivery.State.SENDING  # nobody recorded it

        second = Worker(tmp_path / "worker.log")
        try:
            time.sleep(3.5)  # the dead worker's lease runs out
            app.send_task("notify.deliver_pending")  # what beat sends every NOTIFY_DELIVER_SECONDS
            _wait(lambda: not Delivery.objects.exclude(state=Delivery.State.SENT).exists(), 90, "every delivery sent")
        finally:
            second.stop()

    digests = list(Digest.objects.all())
    assert len(digests) == 2  # one per person, made once
    assert {d.event_count for d in digests} == {40}
    # no loss: every event is in a digest that was sent
    assert Event.objects.filter(state=Event.State.DIGESTED, digest__deliveries__state="sent").count() == 80
    # no duplicate for the receiver: each digest's key arrived, and a repeat carried the same key and body
    received = hook.unique()
    assert set(received) == {str(d.key) for d in digests}
    assert len(hook.posts) == 3  # the held digest once more, by the sweep
    repeated = [body for key, body in hook.posts if key == str(held.digest.key)]
    assert len(repeated) == 2
    assert repeated[0] == repeated[1]
    assert Delivery.objects.get(pk=held.pk).attempts == 2
