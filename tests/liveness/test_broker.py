"""The embedded broker as the portal uses it: kombu's SQLAlchemy transport on a SQLite file (a message is a row,
taken whole), its check, and the prune of messages workers took long ago."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from kombu import Connection

from liveness.broker import broker_check, embedded_broker_prune


def test_a_message_is_taken_whole_and_the_taken_ones_are_pruned_after_an_hour(tmp_path):
    url = f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}"
    with Connection(url, transport_options={"connect_args": {"timeout": 30}}) as conn:
        queue = conn.SimpleQueue("celery")
        queue.put({"task": "a", "payload": "x" * 100_000})
        queue.put({"task": "b"})
        message = queue.get(timeout=5)
        assert message.payload == {"task": "a", "payload": "x" * 100_000}
        message.ack()
        queue.close()
    assert broker_check(url) == (True, "")
    assert embedded_broker_prune(now=timezone.now(), url=url) == 0  # taken just now: kept
    assert embedded_broker_prune(now=timezone.now() + timedelta(hours=2), url=url) == 1  # the one taken, not "b"


def test_the_check_says_when_the_embedded_brokers_file_cannot_be_read(tmp_path):
    ok, detail = broker_check(f"sqla+sqlite:///{tmp_path / 'missing' / 'broker.sqlite3'}")
    assert ok is False
    assert "cannot be read" in detail


def test_prune_does_nothing_for_another_broker():
    assert embedded_broker_prune(now=timezone.now(), url="redis://127.0.0.1:6379/0") == 0
