"""Several workers deliver the same outbox at once: each event lands in one digest, each digest is sent once
(PostgreSQL: SKIP LOCKED claims and row-locked send attempts)."""

from __future__ import annotations

import threading

import pytest
from django.core import mail
from django.db import connection
from django.utils import timezone

from notify import delivery
from notify.kinds import Kind
from notify.models import Delivery, Digest, Event
from notify.record import Pending, events_record
from tests.factories import UserFactory

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

WORKERS = 6


def in_threads(target, n: int) -> list[BaseException]:
    """Run ``target`` in ``n`` threads (each its own connection) started at the same instant; their errors."""
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            barrier.wait()
            target()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return errors


def test_concurrent_deliveries_put_each_event_in_one_digest_and_send_each_once():
    users = [UserFactory(username=f"u{i}") for i in range(5)]
    now = timezone.now()
    events_record(
        Pending(u.pk, Kind.FINISHED, f"c:{u.pk}:{i}", f"job-{i}: finished", "Done.", now)
        for u in users
        for i in range(60)
    )

    def worker() -> None:
        for delivery_id in delivery.outbox_deliver(now=timezone.now()):
            delivery.delivery_send(delivery_id=delivery_id, now=timezone.now())

    assert in_threads(worker, WORKERS) == []
    worker()  # what a later beat run finds: whatever a worker skipped while another held it
    assert not Event.objects.filter(state=Event.State.PENDING).exists()
    assert Event.objects.filter(digest__isnull=False).count() == 300
    digests = Digest.objects.all()
    assert sorted(digests.values_list("recipient__username", flat=True)) == [u.username for u in users]  # one each
    assert sum(d.event_count for d in digests) == 300  # no event in two digests
    assert Delivery.objects.filter(state=Delivery.State.SENT).count() == digests.count()
    assert len(mail.outbox) == digests.count()  # each digest mailed once
    assert len({m.extra_headers["Message-ID"] for m in mail.outbox}) == len(mail.outbox)
