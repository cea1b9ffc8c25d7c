"""The webhook speaks incoming-webhook JSON to a real HTTP server; the email and webhook of one digest agree."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from notify import tasks
from notify.models import Delivery, Digest, Preference
from queues import services
from queues.models import Job
from tests.factories import UserFactory
from tests.notify.conftest import run, submit
from tests.notify.receiver import Receiver

pytestmark = pytest.mark.django_db


def test_a_job_failing_reaches_the_webhook_as_text_json_and_the_mailbox(world):
    ada = UserFactory(username="ada")
    now = timezone.now()
    with Receiver() as hook:
        Preference.objects.create(user=ada, email=True, webhook_url=hook.url)
        job = submit(world, ada, name="resnet", now=now)
        run(world, job, now=now)
        services.job_finish(job, state=Job.State.FAILED, now=now + timedelta(minutes=3), message="Pod exited 137.")
        tasks.deliver_pending()
        [(key, body)] = hook.posts
    digest = Digest.objects.get()
    assert key == str(digest.key)
    assert set(body) == {"text"}  # Slack / Teams / Mattermost incoming-webhook shape
    text = body["text"]
    assert text.startswith("*[GPU Pool Portal] 3 updates on your jobs*\n3 updates: 2 × job admitted or started")
    assert f"• {world.team.slug}/resnet: failed: Pod exited 137." in text
    [message] = mail.outbox
    assert message.body in text  # the same digest on both channels
    assert set(Delivery.objects.values_list("channel", "state")) == {("email", "sent"), ("webhook", "sent")}


def test_an_unreachable_webhook_does_not_hold_back_the_email(world, settings):
    settings.NOTIFY_WEBHOOK_TIMEOUT_SECONDS = 2
    ada = UserFactory(username="ada")
    with Receiver() as hook:
        url = hook.url  # the server is gone once the block ends: nothing listens there
    Preference.objects.create(user=ada, email=True, webhook_url=url)
    job = submit(world, ada, now=timezone.now())
    run(world, job, now=timezone.now())
    tasks.deliver_pending()
    assert len(mail.outbox) == 1
    webhook = Delivery.objects.get(channel="webhook")
    assert (webhook.state, webhook.attempts) == (Delivery.State.SENDING, 1)  # retried by the next sweep
    assert "webhook unreachable" in webhook.last_error
