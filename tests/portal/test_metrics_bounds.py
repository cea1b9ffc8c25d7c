"""``/metrics`` stays bounded: series for 100 teams × 20 classes under the documented count (docs/operations.md),
a fixed number of queries whatever the size, and the Grafana dashboard queries only metrics a scrape exports."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from billing.models import Budget
from clusters.models import ReconcileReport
from pools.models import HealthState, RepairTicket, ResourceClass
from portal.celery import app
from portal.models import TaskFailure
from queues.engine.wait_codes import WAIT_CODE_LABELS
from queues.models import ClusterDiagnosis, Job, PolicyPush, QuotaLine, Team, TeamQuota
from tests.factories import ClusterFactory, DeviceFactory, NodeFactory, ResourceFlavorFactory, UserFactory

pytestmark = pytest.mark.django_db

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "portal-dashboard.json"
#: The documented bound (docs/operations.md, "Metrics"): one cluster, 2 flavors, 100 teams × 20 classes.
SERIES_BOUND = 10_000
#: Queries per scrape, whatever the number of teams, classes, jobs or devices.
QUERIES_PER_SCRAPE = 21


def samples(client) -> list:
    """Every sample of a scrape, parsed with prometheus-client's parser."""
    response = client.get("/metrics")
    assert response.status_code == 200
    return [s for family in text_string_to_metric_families(response.content.decode()) for s in family.samples]


def build_site(*, teams: int, classes: int, prefix: str = "") -> None:
    """A cluster where every team waits and runs in every class (in bulk): the worst case for the labels."""
    now = timezone.now()
    cluster = ClusterFactory(name=f"{prefix}big", last_synced_at=now, last_sync_error_at=now - timedelta(hours=1))
    flavors = [ResourceFlavorFactory(name="h100"), ResourceFlavorFactory(name="a100")]
    owner = UserFactory()
    team_rows = Team.objects.bulk_create(
        Team(slug=f"{prefix}team-{i:03d}", name=f"Team {i}", namespace=f"{prefix}team-{i:03d}") for i in range(teams)
    )
    class_rows = ResourceClass.objects.bulk_create(
        ResourceClass(
            slug=f"{prefix}class-{i:02d}", name=f"Class {i}", resource_name="nvidia.com/gpu", allowed_counts=[1]
        )
        for i in range(classes)
    )
    codes = sorted(WAIT_CODE_LABELS)
    jobs = []
    for t, team in enumerate(team_rows):
        for k, rc in enumerate(class_rows):
            base = {"team": team, "owner": owner, "cluster": cluster, "resource_class": rc, "image": "img:1"}
            jobs.append(
                Job(
                    name=f"p-{t}-{k}",
                    wait_reason=codes[(t + k) % len(codes)],
                    submitted_at=now - timedelta(minutes=t + k),
                    queued_at=now - timedelta(minutes=t + k),
                    state_changed_at=now,
                    **base,
                )
            )
            jobs.append(
                Job(
                    name=f"r-{t}-{k}",
                    state=Job.State.RUNNING,
                    assigned_flavor=flavors[k % 2],
                    submitted_at=now - timedelta(hours=1),
                    queued_at=now - timedelta(hours=1),
                    admitted_at=now - timedelta(minutes=(t * k) % 55),
                    started_at=now - timedelta(minutes=1),
                    state_changed_at=now,
                    **base,
                )
            )
    Job.objects.bulk_create(jobs, batch_size=500)
    quotas = TeamQuota.objects.bulk_create(
        TeamQuota(team=team, cluster=cluster, cluster_queue_name=team.slug) for team in team_rows
    )
    QuotaLine.objects.bulk_create(
        QuotaLine(team_quota=q, flavor=f, resource_name="nvidia.com/gpu", nominal="8") for q in quotas for f in flavors
    )
    Budget.objects.bulk_create(
        Budget(team=team, period=period, amount=Decimal(1000), currency="EUR")
        for team in team_rows
        for period in Budget.Period.values
    )
    for flavor in flavors:
        node = NodeFactory(cluster=cluster, flavor=flavor)
        for health in HealthState.values:
            DeviceFactory(node=node, health=health)
        RepairTicket.objects.create(node=node, reason="XID 79", opened_at=now, state_changed_at=now)
    ReconcileReport.objects.create(cluster=cluster, started_at=now, finished_at=now)
    ReconcileReport.objects.create(cluster=cluster, started_at=now, finished_at=now, error="timeout")
    PolicyPush.objects.create(cluster=cluster, reason="r", requested_at=now, state=PolicyPush.State.SUCCEEDED)
    PolicyPush.objects.create(cluster=cluster, reason="r", requested_at=now, state=PolicyPush.State.RETRYING)
    ClusterDiagnosis.objects.create(cluster=cluster, state_version=1, computed_at=now)
    # every registered task has failed once
    TaskFailure.objects.bulk_create(
        (TaskFailure(task=name, count=1, last_failure_at=now) for name in app.tasks if not name.startswith("celery.")),
        ignore_conflicts=True,
    )


def test_metrics_series_for_100_teams_by_20_classes_stay_under_the_documented_bound(client):
    build_site(teams=100, classes=20)
    found = samples(client)
    assert len(found) < SERIES_BOUND
    pending = [s for s in found if s.name == "portal_jobs_pending"]
    assert len(pending) == 100 * 20  # one series per team, class and wait code that has a job: all present
    assert sum(s.value for s in pending) == 2000
    assert len({(s.name, tuple(sorted(s.labels.items()))) for s in found}) == len(found)  # no duplicate series
    assert str(SERIES_BOUND) in _operations_doc().replace(",", "")


def _operations_doc() -> str:
    return (REPO / "docs" / "operations.md").read_text()


def test_metrics_scrape_takes_a_fixed_number_of_queries(client):
    build_site(teams=2, classes=2)
    with CaptureQueriesContext(connection) as small:
        samples(client)
    build_site(teams=30, classes=5, prefix="x-")  # a second cluster, more teams, classes and jobs
    with CaptureQueriesContext(connection) as large:
        samples(client)
    assert len(small) == len(large) <= QUERIES_PER_SCRAPE


def test_grafana_dashboard_queries_only_exported_metrics(client):
    build_site(teams=2, classes=2)
    exported = {s.name for s in samples(client)}
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in _panels(dashboard) for t in p.get("targets", [])]
    assert len(exprs) >= 8
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    used = {name for expr in exprs for name in re.findall(r"\bportal_[a-z0-9_]+", expr)}
    assert used, "the dashboard queries no portal metric"
    assert used - exported == set()
    families = {re.sub(r"_(bucket|gsum|gcount|total)$", "", n) for n in exported}
    assert families - {re.sub(r"_(bucket|gsum|gcount|total)$", "", n) for n in used} <= {
        "portal_celery_task_last_failure_timestamp_seconds",
        "portal_sync_last_failure_timestamp_seconds",
        "portal_sync_last_success_timestamp_seconds",
        "portal_budget_spent",
        "portal_budget_limit",
        "portal_quota_borrowed_devices",
    }  # the rest is on the dashboard


def _panels(dashboard: dict) -> list[dict]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def test_every_metric_is_documented(client):
    build_site(teams=2, classes=2)
    doc = _operations_doc()
    families = {re.sub(r"_(bucket|gsum|gcount|total)$", "", s.name) for s in samples(client)}
    assert sorted(f for f in families if f"`{f}" not in doc) == []


def test_service_monitor_scrapes_the_web_service_through_the_sidecar():
    monitor = yaml.safe_load((REPO / "deploy" / "monitoring" / "servicemonitor.yaml").read_text())
    web = [d for d in yaml.safe_load_all((REPO / "deploy" / "base" / "web.yaml").read_text()) if d["kind"] == "Service"]
    (service,) = web
    assert monitor["kind"] == "ServiceMonitor"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["authorization"]["credentials"] == {
        "name": "gpu-portal-secrets",
        "key": "METRICS_TOKEN",
        "optional": True,
    }
    nginx = (REPO / "deploy" / "base" / "nginx-configmap.yaml").read_text()
    assert "location = /metrics" in nginx  # with the Host the portal allows
    kz = yaml.safe_load((REPO / "deploy" / "monitoring" / "kustomization.yaml").read_text())
    assert kz["resources"] == ["servicemonitor.yaml", "../grafana"]
    generated = yaml.safe_load((REPO / "deploy" / "grafana" / "kustomization.yaml").read_text())
    assert generated["configMapGenerator"][0]["files"] == [DASHBOARD.name]
