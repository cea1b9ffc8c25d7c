"""What-if previews in the background: queued → running → done, failures, stale applies, permissions, the sweep."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from queues.models import PolicyPreview, QuotaLine
from queues.policy import preview_replay
from queues.policy.preview_replay import policy_previews_sweep
from queues.tasks import policy_preview
from tests.admin.test_admin_flow import _line, _quota_post
from tests.factories import UserFactory

H = timedelta(hours=1)
HX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def root(client, pool):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def _ask(client, pool, nominal: str = "4") -> PolicyPreview:
    """Post the vision quota with a new nominal; the preview it recorded (its replay not run: nothing commits)."""
    url = reverse("admin:queues_teamquota_change", args=[pool.vq.pk])
    response = client.post(url, _quota_post(pool.vq, [_line(pool.vline, nominal=nominal)]))
    assert response.status_code == 302, response.content.decode()[:2000]
    return PolicyPreview.objects.order_by("-pk").first()


def _history(pool):
    pool.job(pool.vision, devices=4, submitted=-3 * H, started=-3 * H, finished=-1 * H)
    pool.job(pool.nlp, devices=2, submitted=-2 * H, started=-1 * H, finished=None)


def test_preview_queued_running_done(root, pool, monkeypatch):
    _history(pool)
    preview = _ask(root, pool)
    page = reverse("policy:preview", args=[preview.pk])
    queued = root.get(page, **HX)
    assert queued.status_code == 200
    assert "HX-Request" in queued["Vary"]
    html = queued.content.decode()
    assert f'id="policy-preview-status-{preview.pk}"' in html
    assert 'hx-trigger="every 1s"' in html
    assert "Queued" in html
    assert "<html" not in html  # the fragment only

    seen = {}
    real = preview_replay.whatif_compare

    def observed(**kwargs):
        kwargs["on_progress"]("current", 0.5)
        seen["running"] = root.get(page, **HX)
        return real(**kwargs)

    monkeypatch.setattr(preview_replay, "whatif_compare", observed)
    policy_preview(preview.pk)  # what the worker runs

    running = seen["running"]
    assert running.status_code == 200
    assert 'hx-trigger="every 1s"' in running.content.decode()
    assert "Replaying" in running.content.decode()
    assert "sim-east: replaying the current policy" in running.content.decode()
    assert 'value="25"' in running.content.decode()  # half of the first of two replays

    preview.refresh_from_db()
    assert preview.status == PolicyPreview.Status.DONE
    assert preview.started_at <= preview.finished_at
    assert [c["cluster"] for c in preview.result["clusters"]] == ["sim-east"]
    done = root.get(page, **HX)
    assert done.status_code == 286  # htmx stops polling
    html = done.content.decode()
    assert "hx-trigger" not in html
    assert 'id="whatif-table-1"' in html
    assert "Vision (vision)" in html
    assert 'name="_whatif_apply"' in html
    full = root.get(page).content.decode()
    assert "whatif-fig-1" in full
    assert "htmx" in full


def test_redelivered_preview_task_does_nothing(root, pool):
    preview = _ask(root, pool)
    assert preview_replay.policy_preview_run(preview_id=preview.pk) is not None
    finished = PolicyPreview.objects.get(pk=preview.pk).finished_at
    assert preview_replay.policy_preview_run(preview_id=preview.pk) is None
    assert PolicyPreview.objects.get(pk=preview.pk).finished_at == finished


def test_failed_replay_shows_its_error(root, pool, monkeypatch):
    def broken(**kwargs):
        raise RuntimeError("the engine fell over")

    monkeypatch.setattr(preview_replay, "whatif_compare", broken)
    preview = _ask(root, pool)
    policy_preview(preview.pk)
    preview.refresh_from_db()
    assert preview.status == PolicyPreview.Status.FAILED
    assert preview.error == "RuntimeError: the engine fell over"
    response = root.get(reverse("policy:preview", args=[preview.pk]), **HX)
    assert response.status_code == 286
    assert "The replay failed: RuntimeError: the engine fell over" in response.content.decode()


def test_apply_before_the_replay_finished_is_refused(root, pool):
    preview = _ask(root, pool)
    url = reverse("admin:queues_teamquota_change", args=[pool.vq.pk])
    response = root.post(url, {"_whatif_preview": preview.pk, "_whatif_apply": "Apply change"})
    assert response["Location"] == reverse("policy:preview", args=[preview.pk])
    assert QuotaLine.objects.get(pk=pool.vline.pk).nominal == "2"


def test_apply_refused_when_the_policy_changed_since_then_preview_again(root, pool, django_capture_on_commit_callbacks):
    preview = _ask(root, pool)
    policy_preview(preview.pk)
    # Someone else changes nlp's quota on the same cluster before the apply.
    QuotaLine.objects.filter(pk=pool.nline.pk).update(nominal="3")
    url = reverse("admin:queues_teamquota_change", args=[pool.vq.pk])
    refused = root.post(url, {"_whatif_preview": preview.pk, "_whatif_apply": "Apply change"}, follow=True)
    html = refused.content.decode()
    assert "Not applied: the policy of cluster sim-east changed since the preview" in html
    assert "Cannot apply: the policy of cluster sim-east changed since the preview" in html
    assert 'name="_whatif_apply"' not in html
    assert QuotaLine.objects.get(pk=pool.vline.pk).nominal == "2"

    # Preview again: the stored proposal against the policy as it is now, then apply.
    again = root.post(url, {"_whatif_preview": preview.pk, "_whatif_rerun": "Preview again", "_whatif_days": "3"})
    fresh = PolicyPreview.objects.order_by("-pk").first()
    assert again["Location"] == reverse("policy:preview", args=[fresh.pk])
    assert fresh.pk != preview.pk
    assert fresh.days == 3
    assert fresh.form_data == preview.form_data
    policy_preview(fresh.pk)
    with django_capture_on_commit_callbacks(execute=True):
        applied = root.post(url, {"_whatif_preview": fresh.pk, "_whatif_apply": "Apply change"})
    assert applied.status_code == 302
    assert QuotaLine.objects.get(pk=pool.vline.pk).nominal == "4"
    assert QuotaLine.objects.get(pk=pool.nline.pk).nominal == "3"  # the other admin's change stays
    fresh.refresh_from_db()
    assert fresh.applied_at is not None
    # The same preview cannot be applied twice.
    twice = root.post(url, {"_whatif_preview": fresh.pk, "_whatif_apply": "Apply change"}, follow=True)
    assert "this preview was applied at" in twice.content.decode()


def test_preview_of_another_object_is_refused(root, pool):
    preview = _ask(root, pool)
    policy_preview(preview.pk)
    other = reverse("admin:queues_teamquota_change", args=[pool.nq.pk])
    response = root.post(other, {"_whatif_preview": preview.pk, "_whatif_apply": "Apply change"})
    assert response.status_code == 400
    missing = root.post(other, {"_whatif_preview": 999, "_whatif_apply": "Apply change"})
    assert missing.status_code == 404


def test_preview_pages_need_staff_with_change_permission(client, pool):
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    client.force_login(root)
    preview = _ask(client, pool)
    page = reverse("policy:preview", args=[preview.pk])
    discard = reverse("policy:preview_discard", args=[preview.pk])

    client.force_login(UserFactory(username="bob"))  # a researcher
    assert "/admin/login/" in client.get(page)["Location"]
    assert "/admin/login/" in client.post(discard)["Location"]

    viewer = UserFactory(username="carol", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_teamquota"))
    client.force_login(viewer)
    assert client.get(page).status_code == 403
    assert client.post(discard).status_code == 403
    assert PolicyPreview.objects.filter(pk=preview.pk).exists()

    viewer.user_permissions.add(Permission.objects.get(codename="change_teamquota"))
    client.force_login(type(viewer).objects.get(pk=viewer.pk))
    assert client.get(page).status_code == 200
    assert client.get(discard).status_code == 405
    assert client.post(discard).status_code == 302
    assert not PolicyPreview.objects.filter(pk=preview.pk).exists()


def test_discarded_while_running_stores_nothing(root, pool, monkeypatch):
    preview = _ask(root, pool)
    real = preview_replay.whatif_compare

    def discarded_meanwhile(**kwargs):
        PolicyPreview.objects.filter(pk=preview.pk).delete()
        return real(**kwargs)

    monkeypatch.setattr(preview_replay, "whatif_compare", discarded_meanwhile)
    assert preview_replay.policy_preview_run(preview_id=preview.pk) is None
    assert not PolicyPreview.objects.exists()


def test_unchanged_queue_configuration_is_done_at_once(root, pool, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        preview = _ask(root, pool, nominal="2")
    assert callbacks == []
    assert preview.status == PolicyPreview.Status.DONE
    html = root.get(reverse("policy:preview", args=[preview.pk])).content.decode()
    assert "does not alter the queue configuration" in html
    assert 'name="_whatif_apply"' in html


def test_starting_a_preview_reads_no_job_and_no_node(root, pool):
    _history(pool)
    url = reverse("admin:queues_teamquota_change", args=[pool.vq.pk])
    data = _quota_post(pool.vq, [_line(pool.vline, nominal="4")])
    with CaptureQueriesContext(connection) as queries:
        assert root.post(url, data).status_code == 302
    sql = [q["sql"] for q in queries.captured_queries]
    assert not [q for q in sql if "queues_job" in q]
    # Devices: only the healthy capacity per flavor that the effective quota is computed from (one grouped count,
    # issue 38), never the devices themselves.
    assert all("GROUP BY" in q for q in sql if "pools_device" in q)
    # Nodes: only the validation's "does the flavor have a node here" (an EXISTS), never the inventory.
    # (and that grouped count's join).
    assert all(q.startswith("SELECT 1 AS") or "GROUP BY" in q for q in sql if "pools_node" in q)


def test_sweep_prunes_old_previews_and_fails_stuck_ones(root, pool, settings):
    settings.WHATIF_MAX_SECONDS = 10
    settings.WHATIF_PREVIEW_KEEP_DAYS = 7
    now = timezone.now()
    old, stuck, busy = _ask(root, pool), _ask(root, pool, "5"), _ask(root, pool, "6")
    PolicyPreview.objects.filter(pk=old.pk).update(requested_at=now - timedelta(days=8))
    PolicyPreview.objects.filter(pk=stuck.pk).update(status="running", started_at=now - timedelta(minutes=10))
    PolicyPreview.objects.filter(pk=busy.pk).update(status="running", started_at=now - timedelta(minutes=1))
    assert policy_previews_sweep(now=now) == (1, 1)
    assert not PolicyPreview.objects.filter(pk=old.pk).exists()
    stuck.refresh_from_db()
    assert stuck.status == PolicyPreview.Status.FAILED
    assert "stopped before it finished" in stuck.error
    assert PolicyPreview.objects.get(pk=busy.pk).status == PolicyPreview.Status.RUNNING


def test_sweep_is_declared_in_the_beat_schedule(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["policy-previews-sweep"]
    assert entry["task"] == "queues.policy_previews_sweep"
    assert entry["options"]["expires"]


def test_the_form_says_save_opens_a_preview_and_links_the_previews(root, pool, client):
    url = reverse("admin:queues_teamquota_change", args=[pool.vq.pk])
    before = root.get(url).content.decode()
    assert "Save opens a what-if preview first; nothing is changed yet." in before
    assert 'id="whatif-recent"' not in before
    assert "Save opens a what-if preview first" in root.get(reverse("admin:queues_cohort_add")).content.decode()

    preview = _ask(root, pool)
    link = f'href="{reverse("policy:preview", args=[preview.pk])}"'
    on_form = root.get(url).content.decode()
    assert 'id="whatif-recent"' in on_form
    assert link in on_form
    assert "Queued" in on_form
    assert link not in root.get(reverse("admin:queues_teamquota_change", args=[pool.nq.pk])).content.decode()

    listed = root.get(reverse("policy:previews")).content.decode()
    assert link in listed
    assert "queue vision" in listed or "vision" in listed
    assert 'href="/admin/policy/previews/"' in root.get(reverse("policy:dashboard")).content.decode()

    # Staff who may not change team quotas cannot open those previews, so the list leaves them out.
    viewer = UserFactory(username="carol", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_teamquota"))
    client.force_login(viewer)
    assert link not in client.get(reverse("policy:previews")).content.decode()
