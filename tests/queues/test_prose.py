"""What people read: every form problem at once, durations and counts as prose, state names in words."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from kernel.labels import duration_words, plural, state_words
from pools.models import HealthState, RepairTicket
from queues.models import Job
from queues.templatetags.queues_tags import ran_for
from tests.browser.scenarios import research_pool
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

FORM = {"image": "registry.example.org/vision/train:1.2", "resource_class": "h100", "devices_per_pod": "4"}


@pytest.fixture
def pool():
    return research_pool()


def test_form_shows_field_errors_and_the_services_at_once(client, pool):
    """A bad name (a field error) and a request that can never fit (the service's check) in one answer."""
    client.force_login(pool.user)
    data = {**FORM, "name": "Not A Valid Name!" * 4, "pod_count": "40", "max_runtime": "soon"}
    html = client.post(reverse("queues:job_submit"), {**data, "action": "submit"}).content.decode()
    assert "at most 50 characters" in html  # the field's own limit
    assert "is not a duration such as 90m" in html  # another field error
    assert "can never run: asks 160 GPUs in all" in html  # the service, though the form did not parse
    assert not Job.objects.exists()


def test_feasibility_check_lists_every_problem(client, pool):
    client.force_login(pool.user)
    data = {**FORM, "name": "x" * 60, "pod_count": "40", "checkpoint_signal": "SIGUSR1"}
    html = client.post(reverse("queues:job_feasibility"), data).content.decode()
    assert "at most 50 characters" in html
    assert "can never run" in html
    assert "say where checkpoints are written" in html


def test_field_in_error_keeps_only_its_own_message(client, pool):
    client.force_login(pool.user)
    data = {**FORM, "name": "Bad Name", "devices_per_pod": "3", "pod_count": "1"}
    response = client.post(reverse("queues:job_submit"), {**data, "action": "submit"})
    form = response.context["form"]
    assert set(form.errors) == {"name", "devices_per_pod"}
    assert len(form.errors["name"]) == 1


def test_submitted_event_reads_as_prose(pool):
    from queues import services
    from queues.services import JobSpec

    job = services.job_submit(
        owner=pool.user,
        team=pool.team,
        spec=JobSpec(name="one", image="python:3.11", resource_class=pool.rc, devices_per_pod=4),
    )
    assert job.events.get().message == "Submitted by alice: 1 pod with 4 GPUs of H100 80GB = 4 GPUs."


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (0, "0 seconds"),
        (1, "1 second"),
        (45, "45 seconds"),
        (60, "1 minute"),
        (95, "1 minute 35 seconds"),
        (25 * 60 + 3, "25 minutes"),
        (3600, "1 hour"),
        (3 * 3600 + 5 * 60, "3 hours 5 minutes"),
        (50 * 3600, "2 days 2 hours"),
    ],
)
def test_duration_words(seconds, words):
    assert duration_words(seconds) == words


def test_plural():
    assert plural(1, "pod") == "1 pod"
    assert plural(0, "pod") == "0 pods"
    assert plural(2, "child", "children") == "2 children"


def test_a_45_second_run_reads_properly(client, pool):
    start = timezone.now() - timedelta(minutes=5)
    job = JobFactory(
        team=pool.team,
        owner=pool.user,
        cluster=pool.cluster,
        resource_class=pool.rc,
        name="short",
        state=Job.State.SUCCEEDED,
        submitted_at=start,
        state_changed_at=start + timedelta(seconds=50),
    )
    job.started_at, job.finished_at = start + timedelta(seconds=5), start + timedelta(seconds=50)
    job.save()
    assert ran_for(job.started_at, job.finished_at) == "45 seconds"
    client.force_login(pool.user)
    html = client.get(reverse("queues:job_detail", args=[job.pk])).content.decode()
    assert "after running 45 seconds." in html
    assert "0 minutes" not in html


def test_state_words():
    assert state_words(RepairTicket.State, "in_repair") == "in repair"
    assert state_words(RepairTicket.State, "rma") == "RMA"
    assert state_words(HealthState, "unhealthy") == "unhealthy"
    assert state_words(HealthState, "quarantined") == "quarantined"
    assert state_words(HealthState, "made_up") == "made up"
