"""``/metrics``: scraped with the test client, parsed with prometheus-client's parser, checked against fixtures."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from billing.models import Budget, UsageRecord
from billing.pricing import local_day
from billing.services.common import billing_tz
from clusters.models import KubeJobState, ReconcileReport
from pools.models import HealthState, RepairTicket
from portal.models import TaskFailure
from queues.models import ClusterDiagnosis, Job, PolicyPush
from tests.factories import (
    AllocationFactory,
    ClusterFactory,
    DeviceFactory,
    JobFactory,
    NodeFactory,
    QuotaLineFactory,
    ResourceClassFactory,
    ResourceFlavorFactory,
    TeamFactory,
    TeamQuotaFactory,
)

pytestmark = pytest.mark.django_db


def scrape(client, **headers) -> dict[str, list]:
    """Metric family name → its samples, from a scrape parsed by prometheus-client's own parser."""
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == CONTENT_TYPE_LATEST
    families = text_string_to_metric_families(response.content.decode())
    return {family.name: family.samples for family in families}


def value(samples, name: str, **labels) -> float:
    """The one sample called ``name`` whose labels include ``labels``."""
    found = [s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


@pytest.fixture
def site():
    """One cluster, two teams, one class, a flavor with four GPUs (one unhealthy), jobs in several states."""
    now = timezone.now()
    cluster = ClusterFactory(name="west", last_synced_at=now - timedelta(seconds=30))
    flavor = ResourceFlavorFactory(name="h100")
    rc = ResourceClassFactory(slug="h100-full", flavors=[flavor])
    vision, nlp = TeamFactory(slug="vision"), TeamFactory(slug="nlp")
    QuotaLineFactory(team_quota=TeamQuotaFactory(team=vision, cluster=cluster), flavor=flavor, nominal="1")
    QuotaLineFactory(team_quota=TeamQuotaFactory(team=nlp, cluster=cluster), flavor=flavor, nominal="4")
    node = NodeFactory(cluster=cluster, flavor=flavor)
    gpus = [DeviceFactory(node=node) for _ in range(4)]
    gpus[3].health = HealthState.UNHEALTHY
    gpus[3].save(update_fields=["health"])
    RepairTicket.objects.create(node=node, device=gpus[3], reason="XID 79", opened_at=now, state_changed_at=now)
    common = {"cluster": cluster, "resource_class": rc}
    for _ in range(2):
        JobFactory(team=vision, wait_reason="quota_exhausted", queued_at=now - timedelta(hours=2), **common)
    JobFactory(
        team=nlp, wait_reason="quota_exhausted", devices_per_pod=4, queued_at=now - timedelta(minutes=5), **common
    )
    JobFactory(team=nlp, wait_reason="no_matching_flavor", **common)
    # vision runs two GPUs (one borrowed), admitted 10 minutes after it was queued
    running = JobFactory(
        team=vision,
        running=True,
        devices_per_pod=2,
        assigned_flavor=flavor,
        submitted_at=now - timedelta(hours=1),
        queued_at=now - timedelta(hours=1),
        admitted_at=now - timedelta(minutes=50),
        **common,
    )
    for gpu in gpus[:2]:
        AllocationFactory(job=running, device=gpu)
    # nlp was admitted after 30 s, not started yet
    JobFactory(
        team=nlp,
        state=Job.State.ADMITTED,
        assigned_flavor=flavor,
        queued_at=now - timedelta(minutes=3),
        admitted_at=now - timedelta(minutes=3) + timedelta(seconds=30),
        **common,
    )
    budget = Budget.objects.create(team=vision, period=Budget.Period.MONTH, amount=Decimal("200.00"), currency="EUR")
    allocation = running.allocations.first()
    UsageRecord.objects.create(
        allocation=allocation,
        start=now - timedelta(minutes=1),
        end=now,
        duration_us=60_000_000,
        day=local_day(now, billing_tz()),
        job=running,
        team=vision,
        user=running.owner,
        resource_class=rc,
        flavor=flavor,
        resource_name="nvidia.com/gpu",
        unit_kind="full",
        slice_fraction=Decimal(1),
        borrowed=False,
        unit_price=Decimal(3),
        currency="EUR",
        cost=Decimal("50.00"),
        stop=UsageRecord.Stop.OPEN,
        source_start=now - timedelta(minutes=1),
        metered_at=now,
    )
    return {"now": now, "cluster": cluster, "budget": budget, "running": running}


def test_metrics_scrape_reports_the_queue_and_hardware(client, site):
    m = scrape(client)
    pending = m["portal_jobs_pending"]
    assert value(pending, "portal_jobs_pending", team="vision", wait_code="quota_exhausted") == 2
    assert value(pending, "portal_jobs_pending", team="nlp", wait_code="quota_exhausted") == 1
    assert value(pending, "portal_jobs_pending", team="nlp", wait_code="no_matching_flavor") == 1
    devices = m["portal_jobs_pending_devices"]
    assert value(devices, "portal_jobs_pending_devices", team="nlp", wait_code="quota_exhausted") == 4
    oldest = value(m["portal_jobs_pending_oldest_wait_seconds"], "portal_jobs_pending_oldest_wait_seconds")
    assert 2 * 3600 <= oldest < 2 * 3600 + 60

    held = m["portal_job_devices"]
    assert (
        value(held, "portal_job_devices", team="vision", state="running", flavor="h100", **{"class": "h100-full"}) == 2
    )
    assert value(held, "portal_job_devices", team="nlp", state="admitted") == 1

    assert (
        value(
            m["portal_quota_nominal_devices"], "portal_quota_nominal_devices", team="vision", resource="nvidia.com/gpu"
        )
        == 1
    )
    assert value(m["portal_quota_used_devices"], "portal_quota_used_devices", team="vision") == 2
    assert value(m["portal_quota_borrowed_devices"], "portal_quota_borrowed_devices", team="vision") == 1
    assert value(m["portal_quota_used_devices"], "portal_quota_used_devices", team="nlp") == 0
    assert value(m["portal_quota_borrowed_devices"], "portal_quota_borrowed_devices", team="nlp") == 0

    health = m["portal_devices"]
    assert value(health, "portal_devices", cluster="west", flavor="h100", health="healthy") == 3
    assert value(health, "portal_devices", cluster="west", flavor="h100", health="unhealthy") == 1
    assert value(m["portal_repair_tickets_open"], "portal_repair_tickets_open", state="opened") == 1


def test_metrics_time_to_admission_is_a_histogram_of_the_last_day(client, site):
    # admitted two days ago: outside the window
    JobFactory(
        cluster=site["cluster"],
        resource_class=site["running"].resource_class,
        state=Job.State.SUCCEEDED,
        queued_at=site["now"] - timedelta(days=2, hours=1),
        admitted_at=site["now"] - timedelta(days=2),
    )
    m = scrape(client)
    samples = m["portal_job_admission_wait_seconds"]
    buckets = {s.labels["le"]: s.value for s in samples if s.name == "portal_job_admission_wait_seconds_bucket"}
    assert buckets["60.0"] == 1  # the 30 s admission
    assert buckets["300.0"] == 1
    assert buckets["900.0"] == 2  # and the 10 min one
    assert buckets["+Inf"] == 2
    assert list(buckets.values()) == sorted(buckets.values())  # cumulative
    gsum = value(m["portal_job_admission_wait_seconds_gsum"], "portal_job_admission_wait_seconds_gsum")
    assert gsum == pytest.approx(630, abs=1)
    assert value(m["portal_job_admission_wait_seconds_gcount"], "portal_job_admission_wait_seconds_gcount") == 2
    last = value(m["portal_job_last_admission_timestamp_seconds"], "portal_job_last_admission_timestamp_seconds")
    assert last == pytest.approx((site["now"] - timedelta(seconds=150)).timestamp(), abs=1)


def test_metrics_sync_freshness_per_cluster_and_kind(client, site):
    now, cluster = site["now"], site["cluster"]
    ReconcileReport.objects.create(cluster=cluster, started_at=now, finished_at=now - timedelta(minutes=20))
    ReconcileReport.objects.create(
        cluster=cluster, started_at=now, finished_at=now - timedelta(minutes=5), error="API unreachable"
    )
    PolicyPush.objects.create(
        cluster=cluster, reason="quota changed", requested_at=now - timedelta(minutes=2), state=PolicyPush.State.PENDING
    )
    KubeJobState.objects.create(job=site["running"], cluster=cluster, observed_at=now - timedelta(seconds=90))
    ClusterDiagnosis.objects.create(cluster=cluster, state_version=1, computed_at=now - timedelta(seconds=10))
    m = scrape(client)
    age = m["portal_sync_last_success_age_seconds"]
    assert value(age, "portal_sync_last_success_age_seconds", cluster="west", kind="watch") == pytest.approx(30, abs=5)
    assert value(age, "portal_sync_last_success_age_seconds", kind="reconcile") == pytest.approx(1200, abs=5)
    assert value(age, "portal_sync_last_success_age_seconds", kind="diagnosis") == pytest.approx(10, abs=5)
    assert not [s for s in age if s.labels["kind"] == "policy_push"]  # never succeeded: no age, not a zero
    failed = m["portal_sync_last_failure_timestamp_seconds"]
    stamp = value(failed, "portal_sync_last_failure_timestamp_seconds", kind="reconcile")
    assert stamp == pytest.approx((now - timedelta(minutes=5)).timestamp(), abs=1)
    lag = m["portal_sync_lag_seconds"]
    assert value(lag, "portal_sync_lag_seconds", kind="watch") == pytest.approx(90, abs=5)
    assert value(lag, "portal_sync_lag_seconds", kind="policy_push") == pytest.approx(120, abs=5)
    KubeJobState.objects.update(dirty=False)
    assert value(scrape(client)["portal_sync_lag_seconds"], "portal_sync_lag_seconds", kind="watch") == 0


def test_metrics_budget_burn(client, site):
    m = scrape(client)
    labels = {"team": "vision", "period": "month", "currency": "EUR"}
    assert value(m["portal_budget_spent"], "portal_budget_spent", **labels) == 50
    assert value(m["portal_budget_limit"], "portal_budget_limit", **labels) == 200
    assert value(m["portal_budget_burn_ratio"], "portal_budget_burn_ratio", **labels) == 0.25
    site["budget"].active = False
    site["budget"].save(update_fields=["active"])
    assert scrape(client)["portal_budget_burn_ratio"] == []


def test_metrics_count_celery_task_failures_from_the_signal(client, db):
    from celery.signals import task_failure

    from portal.celery import app

    @app.task(name="tests.metrics.always_fails")
    def always_fails():
        raise RuntimeError("disk full")

    for _ in range(3):
        task_failure.send(sender=always_fails, task_id="x", exception=RuntimeError("disk full"), args=(), kwargs={})
    row = TaskFailure.objects.get(task="tests.metrics.always_fails")
    assert row.count == 3
    assert row.last_error == "RuntimeError: disk full"
    m = scrape(client)
    # the exposition format names a counter's sample <name>_total
    assert value(m["portal_celery_task_failures"], "portal_celery_task_failures_total", task=row.task) == 3
    # a run through Celery's tracer (what a worker does: errors not propagated) sends the signal
    assert always_fails.apply(throw=False).failed()
    assert TaskFailure.objects.get(task=row.task).count == 4


def test_metrics_open_without_a_token_and_guarded_with_one(client, site, settings):
    settings.METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 200
    settings.METRICS_TOKEN = "s3cret-token"
    refused = client.get("/metrics")
    assert refused.status_code == 401
    assert refused["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Basic s3cret-token").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token").status_code == 200
    assert "portal_jobs_pending" in scrape(client, HTTP_AUTHORIZATION="Bearer s3cret-token")
    assert client.post("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token").status_code == 405


def test_metrics_names_follow_prometheus_conventions(client, site):
    m = scrape(client)
    for name, samples in m.items():
        assert name.startswith("portal_"), name
        assert name == name.lower()
        for sample in samples:
            assert not {"job", "job_name", "name", "id", "user"} & set(sample.labels), (name, sample.labels)
