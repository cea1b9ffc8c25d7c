"""Celery tasks of notify: deliver the outbox (beat) and send one delivery (``notify.*`` task names)."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from kernel.tasks import DB_RETRY
from notify.delivery import delivery_send, outbox_deliver, outbox_prune
from notify.scans import first_in_line_scan, idle_scan


@shared_task(name="notify.deliver_pending", ignore_result=True, **DB_RETRY)
def deliver_pending() -> None:
    """Beat entry: gather pending events into digests and send each due delivery (also those a dead worker left)."""
    for delivery_id in outbox_deliver(now=timezone.now()):
        send_delivery.delay(delivery_id)


# acks_late + reject_on_worker_lost: a worker that dies mid-send hands the message back; the body is idempotent
# (a delivery already sent, or being sent by another worker within its lease, is left alone).
@shared_task(name="notify.send_delivery", ignore_result=True, acks_late=True, reject_on_worker_lost=True, **DB_RETRY)
def send_delivery(delivery_id: int) -> None:
    """Send one digest on one channel, if it is due."""
    delivery_send(delivery_id=delivery_id, now=timezone.now())


@shared_task(name="notify.scan", ignore_result=True, **DB_RETRY)
def scan() -> None:
    """Beat entry: record "first in line" and "idle GPUs" notifications; forget what is past ``NOTIFY_KEEP_DAYS``."""
    now = timezone.now()
    first_in_line_scan(now=now)
    idle_scan(now=now)
    outbox_prune(now=now)
