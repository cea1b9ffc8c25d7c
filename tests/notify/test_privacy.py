"""Notifications cross teams only as "team and amount" (issue 33, finding 2): bob (team speech) is preempted to make
room for vision's job ``secret-run``; what is written for bob — the outbox event, his notifications page, the
digest, the email, the webhook POST — names it "a job of team vision", never its name (queues.privacy, applied
where the text is written for him). One test per channel; the metrics endpoint's labels too."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone

from notify import tasks
from notify.models import Digest, Event, Preference
from notify.record import Pending, events_record
from notify.scans import first_in_line_scan
from pools.models import Cluster
from queues import services
from queues.models import Job
from tests.factories import JobFactory, MembershipFactory, TeamFactory, UserFactory
from tests.notify.conftest import run, submit
from tests.notify.receiver import Receiver

pytestmark = pytest.mark.django_db
SECRET = "secret-run"
PHRASE = "a job of team vision"


@pytest.fixture
def vision_job(world):
    """alice's job in team vision, the preemptor (the world's team is bob's, speech)."""
    vision = TeamFactory(slug="vision", namespace="team-vision")
    alice = MembershipFactory(team=vision, user=UserFactory(username="alice")).user
    return JobFactory(team=vision, owner=alice, cluster=Cluster.objects.get(name="sim"), name=SECRET,
                      resource_class=world.rc)  # fmt: skip


@pytest.fixture
def bob():
    return UserFactory(username="bob", email="bob@example.com")


def _preempt_bob(world, bob, vision_job, *, now) -> Job:
    job = submit(world, bob, name="asr", now=now)
    run(world, job, now=now)
    services.job_preempt(job, now=now + timedelta(minutes=1), preemptor=vision_job, reason="InClusterQueue",
                         message="Preempted to accommodate a workload (UID: 1f2e, JobUID: 9a8b) due to prioritization "
                                 "in the ClusterQueue; preemptor path: /org/vision")  # fmt: skip
    return job


def test_channel_outbox_event(world, bob, vision_job, now):
    _preempt_bob(world, bob, vision_job, now=now)
    event = Event.objects.get(recipient=bob, kind="preempted")
    assert SECRET not in event.message
    assert f"Preempted to make room for {PHRASE}" in event.message
    assert "9a8b" not in event.message
    assert "preemptor path" not in event.message


def test_channel_notifications_page(world, bob, vision_job, now):
    Preference.objects.create(user=bob, email=True)
    _preempt_bob(world, bob, vision_job, now=now)
    tasks.deliver_pending()
    client = Client()
    client.force_login(bob)
    html = client.get("/notifications/").content.decode()
    assert PHRASE in html
    assert SECRET not in html


def test_channel_digest(world, bob, vision_job, now):
    Preference.objects.create(user=bob, email=True)
    _preempt_bob(world, bob, vision_job, now=now)
    tasks.deliver_pending()
    digest = Digest.objects.get(recipient=bob)
    assert PHRASE in digest.text
    assert SECRET not in digest.text + digest.subject


def test_channel_email(world, bob, vision_job, now):
    Preference.objects.create(user=bob, email=True)
    _preempt_bob(world, bob, vision_job, now=now)
    tasks.deliver_pending()
    [message] = mail.outbox
    assert message.to == ["bob@example.com"]
    assert PHRASE in message.body
    assert SECRET not in message.body + message.subject


def test_channel_webhook(world, bob, vision_job, now):
    with Receiver() as hook:
        Preference.objects.create(user=bob, email=False, webhook_url=hook.url)
        _preempt_bob(world, bob, vision_job, now=now)
        tasks.deliver_pending()
        [(_, body)] = hook.posts
    assert PHRASE in body["text"]
    assert SECRET not in body["text"]


def test_channel_first_in_line_scan(world, bob, vision_job, settings):
    """The scan copies the job's wait message, which can name the job ahead of it."""
    settings.NOTIFY_FIRST_IN_LINE_SECONDS = 0
    job = submit(world, bob, name="asr", now=timezone.now() - timedelta(minutes=5))
    Job.objects.filter(pk=job.pk).update(wait_message=f"vision/{SECRET} holds the last H100s.")
    first_in_line_scan(now=timezone.now())
    event = Event.objects.get(recipient=bob, kind="first_in_line")
    assert f"{PHRASE} holds the last H100s" in event.message
    assert SECRET not in event.message


def test_rows_written_before_the_rule_are_redacted_in_the_digest(world, bob, vision_job, now):
    """An event recorded unredacted (before this rule reached the outbox) is still redacted when the digest is made."""
    Preference.objects.create(user=bob, email=True)
    Event.objects.create(recipient=bob, kind="preempted", key="old", title="speech/asr: preempted",
                         message=f"Preempted to make room for vision/{SECRET}.", created_at=now, recorded_at=now)  # fmt: skip
    tasks.deliver_pending()
    digest = Digest.objects.get(recipient=bob)
    assert SECRET not in digest.text
    assert PHRASE in digest.text


def test_the_preemptors_team_and_admins_read_the_name(world, bob, vision_job, now):
    """The rule hides other teams' jobs, not one's own team's, and not from platform admins."""
    admin = UserFactory(username="root", is_staff=True, is_superuser=True)
    lead = vision_job.owner
    speech = world.team.slug
    events_record(
        [
            Pending(who.pk, "test", f"t:{who.pk}", "Test", f"vision/{SECRET} and {speech}/asr", now)
            for who in (admin, lead, bob)
        ]
    )
    messages = dict(Event.objects.values_list("recipient__username", "message"))
    assert messages["root"] == f"vision/{SECRET} and {speech}/asr"
    assert messages["alice"] == f"vision/{SECRET} and a job of team {speech}"
    assert messages["bob"] == f"{PHRASE} and a job of team {speech}"  # bob is in no team yet: not even his


def test_recording_a_burst_builds_the_redactors_in_a_fixed_number_of_queries(
    world, vision_job, now, django_assert_max_num_queries
):
    users = UserFactory.create_batch(30)
    pending = [Pending(u.pk, "test", f"t:{u.pk}", "Test", f"vision/{SECRET} waits", now) for u in users]
    with django_assert_max_num_queries(5):
        events_record(pending)
    assert not Event.objects.filter(message__contains=SECRET).exists()


def test_channel_metrics_labels(world, bob, vision_job, now, client):
    """The scrape is for operators, yet its labels carry teams, classes and codes only: no job, user or message."""
    _preempt_bob(world, bob, vision_job, now=now)
    text = client.get("/metrics").content.decode()
    assert "portal_jobs" in text
    for private in (SECRET, "asr", "bob", "alice", "Preempted to make room"):
        assert private not in text, private
