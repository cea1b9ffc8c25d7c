"""A researcher's own usage page and the job page's GPU-hours and cost (billing answering through queues' port)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from billing import my_usage, services
from queues import services as job_services
from queues.ports import job_cost_port
from tests.billing.conftest import H, run_job
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

URL = reverse("billing:usage_mine")


def day_at_eight(days_ago: int) -> datetime:
    """08:00 UTC ``days_ago`` days before today (the billing tests bill in UTC)."""
    day = timezone.now().astimezone(UTC).date() - timedelta(days=days_ago)
    return datetime(day.year, day.month, day.day, 8, tzinfo=UTC)


@pytest.fixture
def usage(world):
    """Alice: 2 GPUs × 3 h and 1 GPU × 1 h 40 days ago; Bob 1 GPU × 5 h; metered and rolled up."""
    t = day_at_eight(40)
    run_job(world, devices=2, start=t, end=t + 3 * H)
    run_job(world, devices=1, start=t + H, end=t + 2 * H)
    run_job(world, owner=world.bob, devices=1, start=t, end=t + 5 * H)
    end = t + timedelta(days=1)
    services.metering_sync(now=end)
    services.usage_rollup(day=t.date(), now=end)
    world.t = t
    return world


def test_months_param_validates_with_the_field_and_limit():
    assert my_usage.months_param(None) == (6, "")
    assert my_usage.months_param("12") == (12, "")
    n, error = my_usage.months_param("99")
    assert n == 6
    assert "months" in error
    assert "1 to 24" in error
    assert my_usage.months_param("x")[1].startswith("months:")


def test_months_back_crosses_the_year():
    assert my_usage.months_back(datetime(2026, 2, 17).date(), 6).isoformat() == "2025-09-01"
    assert my_usage.months_back(datetime(2026, 2, 17).date(), 1).isoformat() == "2026-02-01"


def test_researcher_sees_only_their_own_hours_and_cost(client, usage):
    client.force_login(usage.alice)
    html = client.get(URL, {"months": "3"}).content.decode()
    # 2 × 3 h + 1 × 1 h = 7 GPU-hours at 2.00 EUR = 14.00 EUR; Bob's 5 hours are not hers.
    assert 'data-total="hours">7.0 ' in html
    assert "14.00 EUR" in html
    assert "7.0 within quota, 0.0 borrowed" in html  # 4 GPUs of nominal quota: all within it
    assert f'data-month="{usage.t:%Y-%m}"' in html
    assert "H100 training" in html  # the per-class table
    assert "Team&#x27;s idle" in html or "Team's idle" in html


def test_usage_page_is_the_nav_link_for_a_member_and_cost_for_a_lead(client, usage):
    client.force_login(usage.alice)
    html = client.get(reverse("queues:classes")).content.decode()
    assert f'href="{URL}"' in html
    assert ">My usage<" in html
    assert f'href="{reverse("billing:cost")}"' not in html
    client.force_login(usage.lead)
    html = client.get(reverse("queues:classes")).content.decode()
    assert f'href="{reverse("billing:cost")}"' in html
    assert ">My usage<" not in html
    # A lead's own usage page links to the team report.
    assert reverse("billing:cost") in client.get(URL).content.decode()


def test_bad_months_is_a_400_naming_the_field(client, usage):
    client.force_login(usage.alice)
    response = client.get(URL, {"months": "0"})
    assert response.status_code == 400
    assert "months: give a whole number from 1 to 24" in response.content.decode()


def test_a_user_without_a_team_is_told_so(client, db):
    from tests.factories import UserFactory

    client.force_login(UserFactory(username="loner"))
    assert "not in a team yet" in client.get(URL).content.decode()


def test_usage_page_requires_login(client, db):
    assert client.get(URL).status_code == 302


def test_job_cost_port_running_accrues_and_finished_is_final(client, world):
    t = day_at_eight(2)
    running = run_job(world, devices=2, start=t)  # still running
    done = run_job(world, devices=1, start=t, end=t + 30 * timedelta(minutes=1))
    services.metering_sync(now=t + 2 * H)
    port = job_cost_port()
    assert port is not None  # billing registered it in BillingConfig.ready
    so_far = port.job_cost(job_id=running.pk)
    assert so_far.device_hours == Decimal("4")  # 2 GPUs × 2 h up to the metering run
    assert so_far.still_open is True
    assert so_far.cost == {"EUR": Decimal("8.00000000")}
    final = port.job_cost(job_id=done.pk)
    assert final.device_hours == Decimal("0.5")
    assert final.still_open is False

    client.force_login(world.alice)
    html = client.get(reverse("queues:job_detail", args=[running.pk])).content.decode()
    assert "GPU-hours so far" in html
    assert 'data-cost="hours">4.00 h' in html
    assert "8.00 EUR" in html
    html = client.get(reverse("queues:job_detail", args=[done.pk])).content.decode()
    assert "Final: metered to the end" in html
    assert 'data-cost="cost">1.00 EUR' in html
    # The live fragment (what the page polls) carries the cost too, so a running job's figure grows.
    fragment = client.get(reverse("queues:job_detail", args=[running.pk]), HTTP_HX_REQUEST="true")
    assert "Cost so far" in fragment.content.decode()


def test_job_page_before_metering_says_so(client, world):
    job = run_job(world, devices=1, start=timezone.now() - timedelta(minutes=1))
    client.force_login(world.alice)
    html = client.get(reverse("queues:job_detail", args=[job.pk])).content.decode()
    assert 'data-cost="pending"' in html


def test_a_job_of_several_pod_sets_is_metered_for_every_device_and_per_pod_set(client, world):
    """A PyTorchJob: a master with 2 GPUs (pod 0) and 2 workers with 1 GPU each (pods 1, 2), held 2 hours: 8
    GPU-hours in all, 4 for the master and 4 for the workers."""
    t = day_at_eight(2)
    gpus = world.free(4)
    job = JobFactory(
        team=world.team, owner=world.alice, cluster=world.cluster, resource_class=world.rc, kind="pytorchjob",
        devices_per_pod=1, pod_count=2, submitted_at=t - timedelta(minutes=5),
        companion_pod_sets=[{"name": "master", "count": 1, "devices_per_pod": 2, "cpu": "16", "memory": "64Gi"}],
    )  # fmt: skip
    assert job.total_devices == 4
    flavors = {"nvidia.com/gpu": world.flavor.name}
    job_services.job_admit(
        job,
        now=t,
        cluster_queue=world.team.slug,
        pod_sets=[
            {"name": "master", "count": 1, "flavors": flavors, "nodes": ["gpu-a"]},
            {"name": "worker", "count": 2, "flavors": flavors, "nodes": ["gpu-a", "gpu-a"]},
        ],
        borrowing=False,
        devices=[gpus[:2], gpus[2:3], gpus[3:]],
    )
    job_services.job_start(job, now=t)
    services.metering_sync(now=t + 2 * H)
    cost = job_cost_port().job_cost(job_id=job.pk)
    assert cost.device_hours == Decimal("8")
    assert cost.device_hours_by_pod == {0: Decimal("4"), 1: Decimal("2"), 2: Decimal("2")}
    client.force_login(world.alice)
    html = client.get(reverse("queues:job_detail", args=[job.pk])).content.decode()
    assert 'data-cost="pod-sets">master 4.00 h · worker 4.00 h</dd>' in html
    assert "master on " in job.events.get(kind="admitted").message
