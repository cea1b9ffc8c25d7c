"""The policy admin through the Django test client: preview, apply, discard, validation, permissions, audit."""

from __future__ import annotations

import csv
import functools
import io

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from queues.models import PolicyPreview, PolicyPush, QuotaLine, TeamQuota
from queues.tasks import policy_preview
from tests.factories import UserFactory


@pytest.fixture
def admin_client(client, pool):
    user = UserFactory(username="root", is_staff=True, is_superuser=True)
    client.force_login(user)
    return client


def _quota_post(quota: TeamQuota, lines: list[dict], **overrides) -> dict:
    """The TeamQuota change form's POST data with the given inline lines."""
    data = {
        "team": quota.team_id,
        "cluster": quota.cluster_id,
        "cluster_queue_name": quota.cluster_queue_name,
        "cohort": quota.cohort_id or "",
        "queueing_strategy": quota.queueing_strategy,
        "within_cluster_queue": quota.within_cluster_queue,
        "reclaim_within_cohort": quota.reclaim_within_cohort,
        "borrow_within_cohort": quota.borrow_within_cohort,
        "borrow_within_cohort_max_priority": "",
        "when_can_borrow": quota.when_can_borrow,
        "when_can_preempt": quota.when_can_preempt,
        "fair_weight": str(quota.fair_weight),
        "stop_policy": quota.stop_policy,
        "lines-TOTAL_FORMS": str(len(lines)),
        "lines-INITIAL_FORMS": str(sum(1 for ln in lines if ln.get("id"))),
        "lines-MIN_NUM_FORMS": "0",
        "lines-MAX_NUM_FORMS": "1000",
        "_save": "Save",
    }
    for i, line in enumerate(lines):
        for key, value in line.items():
            data[f"lines-{i}-{key}"] = value
        data[f"lines-{i}-team_quota"] = quota.pk
    data.update(overrides)
    return data


def _line(line: QuotaLine, **changes) -> dict:
    return {
        "id": line.pk,
        "flavor": line.flavor_id,
        "flavor_order": line.flavor_order,
        "resource_name": line.resource_name,
        "nominal": line.nominal,
        "borrowing_limit": line.borrowing_limit,
        "lending_limit": line.lending_limit,
        **changes,
    }


def test_save_records_a_preview_and_keeps_nothing(admin_client, pool, django_capture_on_commit_callbacks):
    url = reverse("admin:queues_teamquota_change", args=[pool.vq.pk])
    with django_capture_on_commit_callbacks() as callbacks:
        response = admin_client.post(url, _quota_post(pool.vq, [_line(pool.vline, nominal="4")]))
    preview = PolicyPreview.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("policy:preview", args=[preview.pk])
    assert len(callbacks) == 1  # the replay, enqueued after commit
    assert preview.status == PolicyPreview.Status.QUEUED
    assert preview.changes == ["sim-east: ClusterQueue vision: h100/nvidia.com/gpu nominal 2 → 4"]
    body = admin_client.get(response["Location"]).content.decode()
    assert "Nothing is saved yet" in body
    assert "ClusterQueue vision: h100/nvidia.com/gpu nominal 2 → 4" in body
    assert 'hx-trigger="every 1s"' in body
    assert 'name="_whatif_apply"' not in body  # not before the replay is done
    pool.vline.refresh_from_db()
    assert pool.vline.nominal == "2"
    assert not PolicyPush.objects.exists()
    assert pool.vline.history.count() == 1  # the creation only


def test_apply_saves_audits_and_pushes(admin_client, pool, django_capture_on_commit_callbacks):
    url = reverse("admin:queues_teamquota_change", args=[pool.vq.pk])
    data = _quota_post(pool.vq, [_line(pool.vline, nominal="4")], _whatif_apply="Apply change")
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = admin_client.post(url, data)
    assert response.status_code == 302
    pool.vline.refresh_from_db()
    assert pool.vline.nominal == "4"
    # One push queued after the commit (the other callbacks count the engine state version's change).
    assert len([c for c in callbacks if isinstance(c, functools.partial)]) == 1
    push = PolicyPush.objects.get()
    assert push.cluster == pool.cluster
    assert push.state == PolicyPush.State.SUCCEEDED
    assert "simulated cluster rescheduled" in push.report
    record = pool.vline.history.first()
    assert record.history_user.username == "root"
    delta = record.diff_against(record.prev_record)
    assert [(c.field, c.old, c.new) for c in delta.changes] == [("nominal", "2", "4")]


@pytest.mark.parametrize(
    ("lines", "cohort", "message"),
    [
        ([{"nominal": "2", "lending_limit": "3"}], True, "lending limit 3 is above the nominal quota 2"),
        ([{"nominal": "2", "borrowing_limit": "4"}], False, "borrowing limit 4 has nobody to borrow from"),
        ([{"nominal": "2"}, {"nominal": "3"}], True, "the flavor is listed 2 times"),
        ([{"nominal": "2Gb"}], True, "nominal quota: invalid quantity &#x27;2Gb&#x27;"),
    ],
)
def test_quota_validation_errors_block_the_save(admin_client, pool, lines, cohort, message):
    rows = []
    for i, extra in enumerate(lines):
        base = {"flavor": pool.flavor.pk, "flavor_order": 0, "resource_name": "nvidia.com/gpu"}
        if i == 0:
            base["id"] = pool.vline.pk
        rows.append({**base, "borrowing_limit": "", "lending_limit": "", **extra})
    data = _quota_post(pool.vq, rows, cohort=pool.cohort.pk if cohort else "")
    response = admin_client.post(reverse("admin:queues_teamquota_change", args=[pool.vq.pk]), data)
    assert response.status_code == 200
    assert message in response.content.decode()
    assert "Nothing is saved yet" not in response.content.decode()
    pool.vline.refresh_from_db()
    assert pool.vline.nominal == "2"


def test_cohort_cycle_is_refused(admin_client, pool):
    from queues.models import Cohort

    child = Cohort.objects.create(name="vision-lab", parent=pool.cohort)
    url = reverse("admin:queues_cohort_change", args=[pool.cohort.pk])
    data = {
        "name": "research",
        "parent": child.pk,
        "fair_weight": "1",
        "lines-TOTAL_FORMS": "0",
        "lines-INITIAL_FORMS": "0",
        "lines-MIN_NUM_FORMS": "0",
        "lines-MAX_NUM_FORMS": "1000",
        "_save": "Save",
    }
    response = admin_client.post(url, data)
    assert response.status_code == 200
    assert "cohort cycle research → vision-lab → research" in response.content.decode()
    pool.cohort.refresh_from_db()
    assert pool.cohort.parent_id is None


def test_researcher_cannot_reach_policy_pages(client, pool):
    researcher = UserFactory(username="bob")
    client.force_login(researcher)
    for url in (
        reverse("admin:queues_teamquota_change", args=[pool.vq.pk]),
        reverse("policy:dashboard"),
        reverse("policy:audit"),
    ):
        response = client.get(url)
        assert response.status_code == 302
        assert "/admin/login/" in response["Location"]
    response = client.post(reverse("admin:queues_teamquota_change", args=[pool.vq.pk]), {})
    assert response.status_code == 302
    assert QuotaLine.objects.get(pk=pool.vline.pk).nominal == "2"


def test_staff_without_permission_gets_403(client, pool):
    staff = UserFactory(username="carol", is_staff=True)
    client.force_login(staff)
    assert client.get(reverse("policy:dashboard")).status_code == 403
    assert client.get(reverse("policy:audit")).status_code == 403
    url = reverse("admin:queues_teamquota_change", args=[pool.vq.pk])
    assert client.get(url).status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="view_teamquota"))
    staff = type(staff).objects.get(pk=staff.pk)
    client.force_login(staff)
    assert client.get(reverse("policy:dashboard")).status_code == 200
    response = client.post(url, _quota_post(pool.vq, [_line(pool.vline, nominal="6")], _whatif_apply="Apply"))
    assert response.status_code == 403
    pool.vline.refresh_from_db()
    assert pool.vline.nominal == "2"


def test_audit_page_and_csv_export(admin_client, pool):
    url = reverse("admin:queues_teamquota_change", args=[pool.vq.pk])
    admin_client.post(url, _quota_post(pool.vq, [_line(pool.vline, nominal="4")], _whatif_apply="Apply change"))
    page = admin_client.get(reverse("policy:audit"))
    assert page.status_code == 200
    assert "nominal" in page.content.decode()
    response = admin_client.get(reverse("policy:audit"), {"model": "queues.QuotaLine", "format": "csv"})
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    changed = [r for r in rows if r["action"] == "changed"]
    assert [(r["user"], r["field"], r["before"], r["after"]) for r in changed] == [("root", "nominal", "2", "4")]


def test_dashboard_renders_charts(admin_client, pool):
    pool.job(pool.vision, devices=3, submitted=__import__("datetime").timedelta(0), started=None, finished=None)
    response = admin_client.get(reverse("policy:dashboard"))
    assert response.status_code == 200
    body = response.content.decode()
    for fig in ("policy-fig-classes", "policy-fig-queues", "policy-fig-borrowed", "policy-fig-tree"):
        assert f'id="{fig}"' in body
    assert "vendor/plotly/plotly.min.js" in body


def test_preview_reports_a_replay_past_its_budget(admin_client, pool, settings):
    settings.WHATIF_MAX_SECONDS = 1e-9
    url = reverse("admin:queues_teamquota_change", args=[pool.vq.pk])
    response = admin_client.post(url, _quota_post(pool.vq, [_line(pool.vline, nominal="4")]))
    policy_preview(PolicyPreview.objects.get().pk)
    body = admin_client.get(response["Location"]).content.decode()
    assert "No preview for cluster sim-east: the replay took longer than 1e-09 s" in body
    assert 'name="_whatif_apply"' in body


def test_discard_leaves_the_policy_and_apply_add_creates(admin_client, pool):
    from queues.models import Team

    team = Team.objects.create(slug="speech", name="Speech", namespace="speech")
    url = reverse("admin:queues_teamquota_add")
    new = TeamQuota(team=team, cluster=pool.cluster, cluster_queue_name="speech", cohort=pool.cohort)
    data = _quota_post(
        new,
        [
            {
                "flavor": pool.flavor.pk,
                "flavor_order": 0,
                "resource_name": "nvidia.com/gpu",
                "nominal": "1",
                "borrowing_limit": "",
                "lending_limit": "",
            }
        ],
    )
    data = {k: v for k, v in data.items() if not k.endswith("-team_quota")}
    preview = admin_client.post(url, data, follow=True)
    assert "ClusterQueue speech: added" in preview.content.decode()
    assert not TeamQuota.objects.filter(cluster_queue_name="speech").exists()
    first = PolicyPreview.objects.get()
    discarded = admin_client.post(reverse("policy:preview_discard", args=[first.pk]))
    assert discarded["Location"] == reverse("admin:queues_teamquota_changelist")  # discard goes back to the list
    assert not PolicyPreview.objects.exists()
    assert not TeamQuota.objects.filter(cluster_queue_name="speech").exists()
    admin_client.post(url, data)
    second = PolicyPreview.objects.get()
    policy_preview(second.pk)
    applied = admin_client.post(url, {"_whatif_preview": second.pk, "_whatif_apply": "Apply change"})
    assert applied.status_code == 302
    assert TeamQuota.objects.get(cluster_queue_name="speech").lines.get().nominal == "1"


def test_cohort_change_previews_then_pushes_every_cluster(admin_client, pool, django_capture_on_commit_callbacks):
    url = reverse("admin:queues_cohort_change", args=[pool.cohort.pk])
    data = {
        "name": "research",
        "parent": "",
        "fair_weight": "2",
        "shortfall_policy": "warn",  # issue 38's field: the form posts it
        "spare_team": "",
        "lines-TOTAL_FORMS": "1",
        "lines-INITIAL_FORMS": "0",
        "lines-MIN_NUM_FORMS": "0",
        "lines-MAX_NUM_FORMS": "1000",
        "lines-0-flavor": pool.flavor.pk,
        "lines-0-flavor_order": "0",
        "lines-0-resource_name": "nvidia.com/gpu",
        "lines-0-nominal": "4",
        "lines-0-borrowing_limit": "",
        "lines-0-lending_limit": "",
        "lines-0-cohort": pool.cohort.pk,
        "_save": "Save",
    }
    with django_capture_on_commit_callbacks(execute=True):  # no broker in tests: the replay runs eagerly
        response = admin_client.post(url, data)
    preview = admin_client.get(response["Location"]).content.decode()
    assert "Cohort research: h100/nvidia.com/gpu added, nominal 4" in preview
    assert "Cohort research: fair weight 1 → 2" in preview
    assert "Cluster sim-east:" in preview
    assert not QuotaLine.objects.filter(cohort=pool.cohort).exists()
    stored = PolicyPreview.objects.get()
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(url, {"_whatif_preview": stored.pk, "_whatif_apply": "Apply change"})
    assert response.status_code == 302
    assert QuotaLine.objects.get(cohort=pool.cohort).nominal == "4"
    assert list(PolicyPush.objects.values_list("cluster__name", "state")) == [("sim-east", "succeeded")]


def test_history_is_visible_but_cannot_be_reverted(admin_client, pool):
    url = reverse("admin:queues_teamquota_change", args=[pool.vq.pk])
    admin_client.post(url, _quota_post(pool.vq, [_line(pool.vline)], cohort="", _whatif_apply="Apply change"))
    history = admin_client.get(reverse("admin:queues_teamquota_history", args=[pool.vq.pk]))
    assert history.status_code == 200
    assert "root" in history.content.decode()
    record = pool.vq.history.order_by("history_id").first()
    revert_url = reverse("admin:queues_teamquota_simple_history", args=[pool.vq.pk, record.history_id])
    assert admin_client.get(revert_url).status_code == 200
    assert admin_client.post(revert_url, {"cluster_queue_name": "x"}).status_code == 403


def test_dashboard_query_count_does_not_grow_with_teams_and_classes(admin_client, pool, django_assert_max_num_queries):
    from tests.factories import ResourceClassFactory, TeamFactory, TeamQuotaFactory

    admin_client.get(reverse("policy:dashboard"))  # warm the session and content types
    for n in range(5):
        team = TeamFactory(slug=f"extra-{n}")
        TeamQuotaFactory(team=team, cluster=pool.cluster, cohort=pool.cohort)
        ResourceClassFactory(slug=f"extra-class-{n}", flavors=[pool.flavor])
    with django_assert_max_num_queries(19):  # constant: the page's reads and the live-data note's heartbeat read
        assert admin_client.get(reverse("policy:dashboard")).status_code == 200
