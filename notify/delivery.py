"""Delivering the outbox: claim a recipient's pending events into one digest, send it per channel, mark it sent.

The steps, each its own short transaction, and what a worker killed between them leaves:

1. **claim** (:func:`digest_claim`): the recipient's pending events (locked with ``SKIP LOCKED`` on PostgreSQL,
   and taken with a conditional ``UPDATE`` everywhere, so two workers never claim the same row, SQLite included)
   become one :class:`Digest` with its text fixed, and one :class:`Delivery` per channel, ``sending``.
   Killed before the commit: nothing happened, the events are still pending.
2. **send** (:func:`delivery_send`): the attempt is stamped (``attempted_at``), committed, then the digest is sent.
   Killed during or after the send: the delivery stays ``sending``; once ``NOTIFY_LEASE_SECONDS`` have passed the
   sweep sends the *same* digest again, with the same key — no event is lost, and a receiver that keys on it
   (``Idempotency-Key`` / ``Message-ID``) counts it once. That is at-least-once delivery, exactly-once for a
   receiver that drops repeats (docs/operations.md says what that means for Slack and mail).
3. **mark**: ``sent`` (only from ``sending``: a late duplicate of the task changes nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import OperationalError, connection, transaction
from django.db.models import Min, Q

from notify.channels import SendFailed, SendRefused, channel_send
from notify.digest import digest_compose
from notify.kinds import Kind
from notify.models import Delivery, Digest, Event, Preference
from queues.privacy import may_need_redaction, redactors_for

log = logging.getLogger(__name__)


class ClaimRaced(Exception):
    """Another worker took some of the rows this claim read (rolled back; they are in its digest)."""


def recipients_due(*, now: datetime, limit: int = 500) -> list[int]:
    """Users with pending events, the oldest of them recorded at least ``NOTIFY_BATCH_SECONDS`` ago (a burst
    of events is gathered into one digest instead of sent as it arrives)."""
    cutoff = now - timedelta(seconds=settings.NOTIFY_BATCH_SECONDS)
    rows = (
        Event.objects.filter(state=Event.State.PENDING)
        .values("recipient_id")
        .annotate(first=Min("recorded_at"))
        .filter(first__lte=cutoff)
        .order_by("first")
        .values_list("recipient_id", flat=True)[:limit]
    )
    return list(rows)


def _channels(user, preference: Preference | None) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """(channel, target) pairs the user receives on."""
    email = preference.email if preference is not None else True
    webhook = preference.webhook_url if preference is not None else ""
    out = []
    if email and user.email:
        out.append((Delivery.Channel.EMAIL, user.email))
    if webhook:
        out.append((Delivery.Channel.WEBHOOK, webhook))
    return out


def _wanted(event: Event, *, preference: Preference | None, stale_before: datetime) -> bool:
    """Whether the user asked for this kind, and the change is recent enough to be worth telling."""
    kinds = preference.kinds if preference is not None else None
    chosen = kinds is None or event.kind in kinds or event.kind == Kind.TEST
    return chosen and event.created_at >= stale_before


def _lock_pending(recipient_id: int, limit: int) -> list[Event]:
    """The recipient's oldest pending events, those another transaction holds skipped (PostgreSQL)."""
    pending = Event.objects.filter(recipient_id=recipient_id, state=Event.State.PENDING).order_by("id")
    if connection.features.has_select_for_update_skip_locked:
        pending = pending.select_for_update(skip_locked=True)
    return list(pending[:limit])


def _take(ids: Sequence[int], **values) -> None:  # type: ignore[no-untyped-def]
    """Move pending rows on, all or none (a conditional UPDATE: a row another worker took is not taken again)."""
    if ids and Event.objects.filter(pk__in=ids, state=Event.State.PENDING).update(**values) != len(ids):
        raise ClaimRaced


def digest_claim(*, recipient_id: int, now: datetime) -> Digest | None:
    """Gather the recipient's pending events into one digest with a delivery per channel (``sending``); events of
    kinds they switched off, too old (``NOTIFY_STALE_SECONDS``) or with no channel to go to are marked skipped.
    Returns the digest, or None when nothing was left to send, or another worker is gathering this recipient's.

    On PostgreSQL the recipient's user row is the claim (``SKIP LOCKED``): one worker at a time gathers a person's
    events, all of them, so concurrent workers never split one person's burst into several digests.
    """
    try:
        with transaction.atomic():
            users = get_user_model().objects.filter(pk=recipient_id)
            if connection.features.has_select_for_update_skip_locked:
                users = users.select_for_update(skip_locked=True)
            user = users.first()
            if user is None:
                return None
            events = _lock_pending(recipient_id, settings.NOTIFY_DIGEST_MAX_EVENTS)
            if not events:
                return None
            preference = Preference.objects.filter(user_id=recipient_id).first()
            channels = _channels(user, preference) if user.is_active else []
            stale = now - timedelta(seconds=settings.NOTIFY_STALE_SECONDS)
            wanted = [e for e in events if channels and _wanted(e, preference=preference, stale_before=stale)]
            wanted_ids = {e.pk for e in wanted}
            _take([e.pk for e in events if e.pk not in wanted_ids], state=Event.State.SKIPPED)
            if not wanted:
                return None
            subject, text = digest_compose(wanted, now=now, redact=_redaction_for(recipient_id, wanted))
            digest = Digest.objects.create(
                recipient_id=recipient_id, subject=subject, text=text, event_count=len(wanted), created_at=now
            )
            _take(sorted(wanted_ids), state=Event.State.DIGESTED, digest=digest)
            Delivery.objects.bulk_create(Delivery(digest=digest, channel=c, target=t) for c, t in channels)
            return digest
    except ClaimRaced:
        log.info("events of user %s were claimed by another worker", recipient_id)
        return None
    except OperationalError:
        # SQLite: a deferred transaction whose snapshot another writer outdated cannot write ("database is
        # locked"); it rolled back whole, and the next run claims the events
        if connection.vendor != "sqlite":
            raise
        log.info("claim for user %s met a concurrent SQLite writer; retried next run", recipient_id)
        return None


def _redaction_for(recipient_id: int, events: Sequence[Event]) -> Callable[[str], str]:
    """The recipient's privacy rule for a digest's lines (queues.privacy); nothing to build when no line could name
    another team's job."""
    if not any(may_need_redaction(e.title) or may_need_redaction(e.message) for e in events):
        return lambda text: text
    return redactors_for([recipient_id])[recipient_id].text


def _retry_after(attempts: int) -> timedelta:
    """How long a ``sending`` delivery is left alone after its last attempt began (doubling, capped)."""
    lease = settings.NOTIFY_LEASE_SECONDS
    return timedelta(seconds=min(lease * 2 ** max(attempts - 1, 0), 3600))


def _begin(delivery_id: int, now: datetime) -> Delivery | None:
    """Stamp an attempt on a delivery that is due (committed before anything is sent); None when it is not."""
    with transaction.atomic():
        delivery = Delivery.objects.select_for_update().select_related("digest").filter(pk=delivery_id).first()
        if delivery is None or delivery.state != Delivery.State.SENDING:
            return None
        if delivery.attempted_at is not None and now < delivery.attempted_at + _retry_after(delivery.attempts):
            return None  # another worker is sending it, or its backoff has not passed
        delivery.attempts += 1
        delivery.attempted_at = now
        delivery.save(update_fields=["attempts", "attempted_at"])
        return delivery


def delivery_send(*, delivery_id: int, now: datetime) -> str:
    """Send one delivery if it is due; returns its state afterwards ("" when it was not due or is gone)."""
    delivery = _begin(delivery_id, now)
    if delivery is None:
        return ""
    try:
        channel_send(delivery)
    except SendFailed as exc:
        gave_up = isinstance(exc, SendRefused) or delivery.attempts >= settings.NOTIFY_MAX_ATTEMPTS
        state = Delivery.State.FAILED if gave_up else Delivery.State.SENDING
        Delivery.objects.filter(pk=delivery.pk, state=Delivery.State.SENDING).update(state=state, last_error=str(exc))
        log.warning("notification delivery %s (attempt %s) failed: %s", delivery.pk, delivery.attempts, exc)
        return state
    Delivery.objects.filter(pk=delivery.pk, state=Delivery.State.SENDING).update(
        state=Delivery.State.SENT, sent_at=now, last_error=""
    )
    return Delivery.State.SENT


def deliveries_due(*, now: datetime, limit: int = 1000) -> list[int]:
    """Deliveries to send now: never attempted, or whose last attempt's lease (and backoff) ran out — a worker
    that died mid-send left them ``sending``."""
    candidates = Delivery.objects.filter(state=Delivery.State.SENDING).filter(
        Q(attempted_at__isnull=True) | Q(attempted_at__lte=now - timedelta(seconds=settings.NOTIFY_LEASE_SECONDS))
    )
    rows = candidates.order_by("id").values_list("id", "attempts", "attempted_at")[:limit]
    return [pk for pk, attempts, at in rows if at is None or now >= at + _retry_after(attempts)]


def outbox_deliver(*, now: datetime) -> list[int]:
    """Claim a digest for every recipient that is due; returns the deliveries to send now (new and stale ones)."""
    for recipient_id in recipients_due(now=now):
        digest_claim(recipient_id=recipient_id, now=now)
    return deliveries_due(now=now)


def outbox_prune(*, now: datetime) -> int:
    """Forget digests (with their deliveries and events) and skipped events older than ``NOTIFY_KEEP_DAYS``;
    pending events are never pruned. Returns how many events went."""
    cutoff = now - timedelta(days=settings.NOTIFY_KEEP_DAYS)
    old = Event.objects.filter(recorded_at__lt=cutoff).exclude(state=Event.State.PENDING)
    events, _ = old.filter(Q(digest__isnull=True) | Q(digest__created_at__lt=cutoff)).delete()
    Digest.objects.filter(created_at__lt=cutoff, events__isnull=True).delete()
    return events
