"""The lent-out reason from the tick to the job page, the API and the CLI (issue 32).

Vision has 12 of the cohort's 16 H100s and runs nothing; Speech (4 of its own) holds all 16, 12 of them borrowed.
A 4-GPU job of Vision waits because its quota is lent out: not "Team quota used up".
"""

from __future__ import annotations

from datetime import datetime

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from clusters.backends.simulated import simulated_cluster_tick_run
from gpupool.show import diagnosis as cli_diagnosis
from gpupool.show import job_table
from queues import services
from queues.models import Cohort, Job, TeamQuota, WaitReason
from queues.services import JobSpec
from tests.browser.scenarios import occupy, research_pool

pytestmark = pytest.mark.django_db


@pytest.fixture
def lent():
    pool = research_pool(nominal="12", other_nominal="4")
    TeamQuota.objects.update(cohort=Cohort.objects.create(name="lab"))
    for node in pool.nodes:
        occupy(pool, node=node, count=4, team=pool.other_team, name=f"borrower-{node.name}", runtime=1800)
    spec = JobSpec(name="train", image="registry.example.org/t:1", resource_class=pool.rc, devices_per_pod=4)
    job = services.job_submit(owner=pool.user, team=pool.team, spec=spec)
    simulated_cluster_tick_run(cluster_id=pool.cluster.pk)
    job.refresh_from_db()
    return pool, job


def test_the_tick_stores_the_lent_out_reason(lent):
    _, job = lent
    assert job.state == Job.State.PENDING
    assert job.wait_reason == WaitReason.QUOTA_LENT_OUT
    assert job.get_wait_reason_display() == "Team quota lent to other teams"
    assert job.wait_details["lentTo"] == [{"clusterQueue": "speech", "units": 12}]
    assert job.wait_message.startswith("Your team uses 0 of its 12 H100 GPUs and this job needs 4.")


def test_the_job_page_says_who_holds_the_quota_and_when_it_comes_back(client, lent):
    pool, job = lent
    client.force_login(pool.user)
    html = client.get(reverse("queues:job_detail", args=[job.pk])).content.decode()
    assert "Team quota lent to other teams" in html
    assert "Team quota used up" not in html
    assert 'id="queues-wait-lent"' in html
    assert "Speech: 12 GPUs above its own quota" in html
    assert "off (Never): it comes back only as the borrowers' jobs end" in html
    assert "Comes back (p50)" in html


def test_the_api_and_the_cli_give_the_figures(client, lent):
    pool, job = lent
    api = APIClient()
    api.force_authenticate(pool.user)
    data = api.get(f"/api/jobs/{job.pk}/wait-reason/").json()
    assert data["code"] == "quota_lent_out"
    assert data["label"] == "Team quota lent to other teams"
    details = data["details"]
    assert details["lentTo"] == [{"clusterQueue": "speech", "units": 12, "team": "Speech"}]
    assert (details["lent"], details["reclaim"], details["reclaimOn"]) == (12, "Never", False)
    assert details["returnsP50"]  # the borrowers' jobs end within the hour: the ETA's p50
    listed = api.get("/api/jobs/", {"state": "pending"}).json()["results"]
    assert [(j["wait_reason"], j["wait_label"]) for j in listed] == [
        ("quota_lent_out", "Team quota lent to other teams")
    ]

    now = datetime.fromisoformat(details["returnsP50"])
    text = cli_diagnosis(data, now=now)
    assert "Team quota lent to other teams (quota_lent_out)" in text
    assert "  lent:     12 held by Speech 12" in text
    assert "  reclaim:  off (Never): back as their jobs end" in text
    assert "  back:     " in text
    assert "(now) (p50)" in text
    table = job_table(listed)
    assert "Team quota lent to other teams" in table
    assert "quota_lent_out" not in table  # words, not codes


def test_the_class_card_says_how_much_more_the_team_may_borrow(client):
    # Vision: 4 of its own, may borrow 4 above it, holds 8: it borrows 4 and may borrow no more.
    pool = research_pool(nominal="4", other_nominal="12")
    TeamQuota.objects.update(cohort=Cohort.objects.create(name="lab"))
    pool.quota.lines.update(borrowing_limit="4")
    for node in pool.nodes[:2]:
        occupy(pool, node=node, count=4, name=f"own-{node.name}")
    client.force_login(pool.user)
    html = client.get(reverse("queues:classes")).content.decode()
    assert "using <strong>8</strong> of 4" in html
    assert "borrowing 4 from the cohort; its borrowing limit of 4 is reached: may borrow no more" in html
    assert "may borrow up to 4 more" not in html
    pool.quota.lines.update(borrowing_limit="6")
    html = client.get(reverse("queues:classes")).content.decode()
    assert "borrowing 4 from the cohort; may borrow up to 2 more" in html


def test_an_operator_reads_the_reason_about_the_team_not_about_your_team(client, lent):
    """Issue 32: the reason said "Your team" to an operator, who is in no team."""
    from django.contrib.auth.models import Group

    from tests.factories import UserFactory

    _, job = lent
    operator = UserFactory(username="oscar")
    operator.groups.add(Group.objects.get(name="operator"))
    client.force_login(operator)
    html = client.get(reverse("queues:job_detail", args=[job.pk])).content.decode()
    assert "Team Vision uses 0 of its 12 H100 GPUs and this job needs 4." in html
    assert "Your team" not in html
    assert "The queue vision does not reclaim lent quota" in html
