"""Delivering the outbox: one digest per person for a burst, preferences obeyed, retries without duplicates."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.db import transaction
from django.utils import timezone

from notify import delivery, tasks
from notify.kinds import Kind
from notify.models import Delivery, Digest, Event, Preference
from notify.record import Pending, events_record
from queues import services
from queues.models import Job
from tests.factories import ClusterFactory, JobFactory, UserFactory
from tests.notify.receiver import Receiver

pytestmark = pytest.mark.django_db


def record(user, n: int = 1, *, kind: str = Kind.FINISHED, at=None, tag: str = "") -> None:
    at = at or timezone.now()
    events_record(
        Pending(user.pk, kind, f"test:{user.pk}:{kind}:{tag}{i}", f"job {i}: done", "Done.", at) for i in range(n)
    )


def test_a_burst_of_500_preemptions_is_one_digest_per_person(world):
    owners = [UserFactory(username=name) for name in ("ada", "bob", "cy")]
    Preference.objects.create(user=owners[2], email=False, webhook_url="")  # cy hears nothing
    cluster = ClusterFactory(name="burst")
    jobs = [
        JobFactory(running=True, team=world.team, cluster=cluster, owner=owners[i % 3], resource_class=world.rc)
        for i in range(500)
    ]
    now = timezone.now()
    with transaction.atomic():  # one scheduling cycle preempts them all
        for job in Job.objects.filter(pk__in=[j.pk for j in jobs]).select_related("team").order_by("pk"):
            services.job_preempt(job, now=now, preemptor=None, reason="InClusterQueue", message="m")
    assert Event.objects.filter(kind=Kind.PREEMPTED, state=Event.State.PENDING).count() == 500
    tasks.deliver_pending()
    assert Digest.objects.count() == 2  # ada and bob; cy switched everything off
    assert sorted(m.to[0] for m in mail.outbox) == ["ada@example.org", "bob@example.org"]
    for message in mail.outbox:  # 500 jobs owned in turn by ada, bob, cy: 167, 167, 166
        count = 167
        assert message.subject == f"[GPU Pool Portal] {count} updates on your jobs"
        assert f"{count} updates: {count} × job preempted or evicted (and work lost)." in message.body
        assert f"… and {count - 25} more." in message.body
    assert Event.objects.filter(recipient=owners[2], state=Event.State.SKIPPED).count() == 166
    assert not Event.objects.filter(state=Event.State.PENDING).exists()
    tasks.deliver_pending()  # nothing left: nothing sent again
    assert len(mail.outbox) == 2


def test_events_arriving_within_the_batch_window_wait_for_one_digest(settings):
    settings.NOTIFY_BATCH_SECONDS = 60
    ada = UserFactory(username="ada")
    record(ada, 2)
    assert delivery.outbox_deliver(now=timezone.now()) == []  # the first arrived just now: wait for more
    record(ada, 1, kind=Kind.FAILED)
    ids = delivery.outbox_deliver(now=timezone.now() + timedelta(seconds=61))
    [digest] = Digest.objects.all()
    assert digest.event_count == 3
    assert len(ids) == 1


def test_switched_off_kinds_and_old_events_are_skipped(settings):
    ada = UserFactory(username="ada")
    Preference.objects.create(user=ada, email=True, kinds=[Kind.FAILED])
    record(ada, 2, kind=Kind.FINISHED)
    record(ada, 1, kind=Kind.FAILED)
    record(ada, 1, kind=Kind.FAILED, at=timezone.now() - timedelta(days=3), tag="old")  # a cluster caught up days late
    tasks.deliver_pending()
    [message] = mail.outbox
    assert message.subject == "[GPU Pool Portal] job 0: done"
    assert Event.objects.filter(state=Event.State.SKIPPED).count() == 3


def test_a_claim_that_lost_a_race_makes_no_second_digest(monkeypatch):
    ada = UserFactory(username="ada")
    record(ada, 3)
    read_before = list(Event.objects.all())  # what a second worker read before the first one's claim committed
    first = delivery.digest_claim(recipient_id=ada.pk, now=timezone.now())
    monkeypatch.setattr(delivery, "_lock_pending", lambda recipient_id, limit: read_before)
    assert delivery.digest_claim(recipient_id=ada.pk, now=timezone.now()) is None
    assert list(Digest.objects.all()) == [first]
    assert set(Event.objects.values_list("digest_id", flat=True)) == {first.pk}


def test_a_delivery_is_sent_once_however_often_its_task_runs():
    ada = UserFactory(username="ada")
    record(ada)
    [delivery_id] = delivery.outbox_deliver(now=timezone.now())
    for _ in range(3):  # a redelivered task message, the sweep, a second worker
        tasks.send_delivery(delivery_id)
    assert len(mail.outbox) == 1
    sent = Delivery.objects.get()
    assert (sent.state, sent.attempts) == (Delivery.State.SENT, 1)
    digest = sent.digest
    assert mail.outbox[0].extra_headers["Message-ID"] == f"<digest-{digest.key}@gpu-pool-portal>"


def test_a_failing_webhook_is_retried_with_backoff_then_given_up(settings):
    settings.NOTIFY_LEASE_SECONDS, settings.NOTIFY_MAX_ATTEMPTS = 10, 3
    ada = UserFactory(username="ada", email="")
    with Receiver(fail_first=10) as hook:
        Preference.objects.create(user=ada, email=True, webhook_url=hook.url)
        record(ada)
        t = timezone.now()
        [delivery_id] = delivery.outbox_deliver(now=t)
        assert delivery.delivery_send(delivery_id=delivery_id, now=t) == Delivery.State.SENDING
        assert delivery.deliveries_due(now=t + timedelta(seconds=5)) == []  # within its lease
        assert delivery.deliveries_due(now=t + timedelta(seconds=10)) == [delivery_id]
        assert delivery.delivery_send(delivery_id=delivery_id, now=t + timedelta(seconds=10)) == "sending"
        assert delivery.deliveries_due(now=t + timedelta(seconds=25)) == []  # backoff doubled: 20 s
        assert delivery.delivery_send(delivery_id=delivery_id, now=t + timedelta(seconds=30)) == "failed"
        assert len(hook.posts) == 3
        assert len(hook.unique()) == 1  # every retry carried the same key
    failed = Delivery.objects.get()
    assert failed.attempts == 3
    assert "webhook answered 5xx" in failed.last_error
    assert mail.outbox == []  # ada has no address: the webhook was her only channel


def test_prune_forgets_old_digests_and_skipped_events_never_pending_ones(settings):
    settings.NOTIFY_KEEP_DAYS = 90
    ada = UserFactory(username="ada")
    record(ada, 2)
    tasks.deliver_pending()
    record(ada, 1, tag="waiting")
    later = timezone.now() + timedelta(days=91)
    assert delivery.outbox_prune(now=later) == 2
    assert not Digest.objects.exists()
    assert not Delivery.objects.exists()
    assert list(Event.objects.values_list("state", flat=True)) == [Event.State.PENDING]
