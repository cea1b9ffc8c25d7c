"""The idle-GPU banner and snooze on the job page and in the API: what shows, who may snooze, the second refusal."""

from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from queues.idle import idle_negotiations_scan
from queues.models import JobIdle
from tests.factories import MembershipFactory
from tests.queues import idle_world
from tests.queues.idle_world import HOUR

pytestmark = pytest.mark.django_db

world = idle_world.world  # the fixture


@pytest.fixture
def warned(world):
    job = world.running("notebook")
    world.samples(job, start=60, end=HOUR + 60, percent=0.0)
    assert idle_negotiations_scan(now=world.at(HOUR + 60)).warned == [job.pk]
    return job


def test_the_job_page_shows_the_banner_and_the_owner_snoozes_once(client, world, warned, django_assert_max_num_queries):
    client.force_login(world.user)
    url = reverse("queues:job_detail", args=[warned.pk])
    # 17 measured: the banner is one of them; the user's permissions (twice: hers and her groups', whether the
    # health pages and every team are hers to read) and the live-data note's heartbeats came with issues 31 and 32.
    with django_assert_max_num_queries(17):
        html = client.get(url).content.decode()
    assert f'id="queues-job-idle-{warned.pk}"' in html
    assert "GPUs idle:" in html
    assert "Snooze once" in html
    fragment = client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert "Snooze once" in fragment  # the 5-second poll keeps the banner
    snooze = reverse("queues:job_idle_snooze", args=[warned.pk])
    assert client.get(snooze).status_code == 405
    response = client.post(snooze, follow=True)
    html = response.content.decode()
    assert "Snoozed: notebook is warned again only after another 1 hour idle." in html
    assert f'id="queues-job-idle-{warned.pk}"' not in html
    assert JobIdle.objects.get(job=warned).snoozed_by == world.user
    html = client.post(snooze, follow=True).content.decode()
    assert "Not snoozed: the idle warning was already snoozed once" in html


def test_a_team_mate_sees_the_banner_without_the_button_and_cannot_snooze(client, world, warned):
    mate = MembershipFactory(team=world.team).user
    client.force_login(mate)
    html = client.get(reverse("queues:job_detail", args=[warned.pk])).content.decode()
    assert "GPUs idle:" in html
    assert "Snooze once" not in html
    html = client.post(reverse("queues:job_idle_snooze", args=[warned.pk]), follow=True).content.decode()
    assert "Not snoozed: job: only the job&#x27;s owner can snooze its idle warning" in html
    assert JobIdle.objects.get(job=warned).phase == JobIdle.Phase.WARNED


def test_the_api_snoozes_once_and_answers_409_the_second_time(world, warned):
    api = APIClient()
    api.force_authenticate(world.user)
    first = api.post(f"/api/jobs/{warned.pk}/idle-snooze/")
    assert first.status_code == 200
    assert first.json()["id"] == warned.pk
    second = api.post(f"/api/jobs/{warned.pk}/idle-snooze/")
    assert second.status_code == 409
    assert "already snoozed once" in str(second.json())
    timeline = api.get(f"/api/jobs/{warned.pk}/timeline/").json()
    assert any("Idle warning snoozed by ada" in entry["message"] for entry in timeline)
