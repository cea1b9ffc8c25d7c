"""What-if on the history as it happened: the replay applies the recorded policy changes (the audit log) at their
times, and the proposal from the time the admin chose; the result says which recorded changes it replayed."""

from __future__ import annotations

from datetime import UTC, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from queues.models import Cohort, PolicyPreview, QuotaLine, TeamQuota
from queues.policy import preview_replay
from queues.policy.overlay import lay_over
from queues.policy.recorded import MODELS, recorded_policy
from queues.policy.whatif import WhatIfRequest, policy_configuration, whatif_compare, whatif_from_data, whatif_to_data
from tests.admin.conftest import T0
from tests.admin.test_admin_flow import _line, _quota_post
from tests.factories import UserFactory

H = timedelta(hours=1)
LONG_AGO = T0 - timedelta(days=30)


def backdate_all(when=LONG_AGO) -> None:
    """Every recorded version of the policy so far happened ``when`` (long before the window)."""
    for model in MODELS.values():
        model.history.model.objects.update(history_date=when)


def recorded_at(model, pk: int, when) -> None:
    """The latest recorded version of one object happened ``when``."""
    latest = model.history.filter(id=pk).order_by("-history_id").first()
    type(latest).objects.filter(pk=latest.pk).update(history_date=when)


@pytest.fixture
def history(pool):
    """vision runs 4 GPUs (2 borrowed from nlp) 0h-2h; nlp asks for 2 GPUs at 1h (1 h); the policy dates from long
    ago."""
    pool.job(pool.vision, devices=4, submitted=0 * H, started=0 * H, finished=2 * H)
    pool.job(pool.nlp, devices=2, submitted=1 * H, started=2 * H, finished=3 * H)
    backdate_all()
    return pool


def compare(pool, *, current=None, proposed=None, apply_at=None):
    current = current or policy_configuration(cluster=pool.cluster)
    return whatif_compare(
        cluster=pool.cluster,
        current=current,
        proposed=proposed or current,
        request=WhatIfRequest(now=T0 + 4 * H, window=4 * H),
        apply_at=apply_at,
    )


def test_recorded_change_inside_the_window_is_replayed_at_its_time(history):
    """nlp was set to reclaim within its cohort at 0h30: as it happened, its job at 1h preempts vision's borrowed
    run at once — the current side says so, and lists the change it replayed."""
    pool = history
    pool.nq.reclaim_within_cohort = "Any"
    pool.nq.save()
    recorded_at(TeamQuota, pool.nq.pk, T0 + timedelta(minutes=30))
    result = compare(pool)
    cur = result.current.by_queue()
    assert cur["nlp"].wait_p50_seconds == 0
    assert cur["vision"].preemptions == 1
    assert cur["vision"].used_device_hours == 12  # 4 GPUs 0h-1h, then again 2h-4h
    assert len(result.replayed) == 1
    change = result.replayed[0]
    assert change.at == T0 + timedelta(minutes=30)
    assert change.lines == ("TeamQuota nlp (Sim East) changed: reclaim_within_cohort Never → Any",)
    # The proposal is nothing: both sides are the history as it happened.
    assert result.proposed.by_queue()["nlp"].wait_p50_seconds == 0
    # Round trip through the preview's stored result.
    again = whatif_from_data(whatif_to_data(result))
    assert again.replayed == result.replayed
    assert again.apply_at == T0


def test_today_policy_alone_gives_the_other_answer(history):
    """The same change recorded after the window (made today): the window is replayed without it."""
    pool = history
    pool.nq.reclaim_within_cohort = "Any"
    pool.nq.save()
    recorded_at(TeamQuota, pool.nq.pk, T0 + 5 * H)
    before = policy_configuration(cluster=pool.cluster)
    result = compare(pool, current=before)
    assert result.replayed == ()
    # A change recorded after a window that ends in the past is in place throughout it.
    assert result.current.by_queue()["nlp"].wait_p50_seconds == 0


def test_proposal_applied_from_the_chosen_time(history):
    """Proposal: nlp reclaims within its cohort, from 1h30 (not from the window's start). nlp's job waits from 1h
    to 1h30, then reclaims its 2 GPUs; the current side (no recorded change) waits until vision's run ends at 2h."""
    pool = history
    current = policy_configuration(cluster=pool.cluster)
    pool.nq.reclaim_within_cohort = "Any"
    pool.nq.save()
    proposed = policy_configuration(cluster=pool.cluster)
    pool.nq.reclaim_within_cohort = "Never"
    pool.nq.save()
    backdate_all()
    result = compare(pool, current=current, proposed=proposed, apply_at=T0 + 1.5 * H)
    assert result.apply_at == T0 + 1.5 * H
    assert result.current.by_queue()["nlp"].wait_p50_seconds == 3600
    new = result.proposed.by_queue()
    assert new["nlp"].wait_p50_seconds == 1800
    assert new["vision"].preemptions == 1
    at_start = compare(pool, current=current, proposed=proposed)
    assert at_start.apply_at == T0
    assert at_start.proposed.by_queue()["nlp"].wait_p50_seconds == 0


def test_proposal_is_laid_over_recorded_versions_line_by_line(history):
    """A recorded quota change of nlp (2 → 3 GPUs at 0h30) and a proposal raising vision's quota (2 → 4): from the
    start the proposed side has vision at 4 and still nlp's recorded change at 0h30."""
    pool = history
    pool.nline.nominal = "3"
    pool.nline.save()
    recorded_at(QuotaLine, pool.nline.pk, T0 + timedelta(minutes=30))
    current = policy_configuration(cluster=pool.cluster)
    pool.vline.nominal = "4"
    pool.vline.save()
    proposed = policy_configuration(cluster=pool.cluster)
    recorded = recorded_policy(cluster=pool.cluster, start=T0, end=T0 + 4 * H, now=current)
    assert [s.at for s in recorded.steps] == [T0 + timedelta(minutes=30)]
    start_quota = {
        cq.name: cq.resource_groups[0].flavors[0].resources[0].nominal for cq in recorded.initial.cluster_queues
    }
    assert start_quota == {"nlp": 2, "vision": 2}
    laid = lay_over(recorded.steps[0].policy, current, proposed)
    quotas = {cq.name: cq.resource_groups[0].flavors[0].resources[0].nominal for cq in laid.cluster_queues}
    assert quotas == {"nlp": 3, "vision": 4}


def test_new_quota_line_on_an_existing_queue_is_a_change_at_its_time(history):
    """A quota line added at 1h to a queue that existed before the window is replayed at 1h; a cohort created at
    1h (with its own line) is taken as present from the start."""
    pool = history
    cohort = Cohort.objects.create(name="spare")
    line = QuotaLine.objects.create(cohort=cohort, flavor=pool.flavor, resource_name="cpu", nominal="8")
    extra = QuotaLine.objects.create(team_quota=pool.nq, flavor=pool.flavor, resource_name="cpu", nominal="16")
    for model, pk in ((Cohort, cohort.pk), (QuotaLine, line.pk), (QuotaLine, extra.pk)):
        recorded_at(model, pk, T0 + H)
    recorded = recorded_policy(cluster=pool.cluster, start=T0, end=T0 + 4 * H)
    assert "spare" in {c.name for c in recorded.initial.cohorts}
    nlp_at_start = next(cq for cq in recorded.initial.cluster_queues if cq.name == "nlp")
    assert {r for g in nlp_at_start.resource_groups for r in g.covered_resources} == {"nvidia.com/gpu"}
    assert [s.at for s in recorded.steps] == [T0 + H]
    nlp_later = next(cq for cq in recorded.steps[0].policy.cluster_queues if cq.name == "nlp")
    assert "cpu" in {r for g in nlp_later.resource_groups for r in g.covered_resources}
    assert [e.object_repr for e in recorded.present_from_start] == ["spare", "h100/cpu: 8"]


def test_deleted_queue_disappears_at_its_time(history):
    """vision's queue deleted at 1h: from then on its jobs are not admitted (its team's queue is gone)."""
    pool = history
    pk, line_pk = pool.vq.pk, pool.vline.pk
    pool.vline.delete()
    pool.vq.delete()
    for model, oid in ((TeamQuota, pk), (QuotaLine, line_pk)):
        deleted = model.history.filter(id=oid, history_type="-").first()
        type(deleted).objects.filter(pk=deleted.pk).update(history_date=T0 + H)
    recorded = recorded_policy(cluster=pool.cluster, start=T0, end=T0 + 4 * H)
    assert [cq.name for cq in recorded.initial.cluster_queues] == ["nlp", "vision"]
    assert [cq.name for cq in recorded.steps[0].policy.cluster_queues] == ["nlp"]
    assert {e.action for e in recorded.steps[0].entries} == {"deleted"}


# ------------------------------------------------------------------------------------------------ the admin flow


def test_preview_page_lists_the_recorded_changes_and_the_chosen_time(client, pool):
    """Through the admin: a recorded change of nlp's quota an hour ago, then vision's quota edited with the change
    taking effect 30 minutes ago: the preview's replay names the recorded change and the time chosen."""
    now = timezone.now()
    pool.job(pool.vision, devices=2, submitted=now - T0 - 2 * H, started=None, finished=None)
    backdate_all(now - timedelta(days=30))
    pool.nline.nominal = "3"
    pool.nline.save()
    recorded_at(QuotaLine, pool.nline.pk, now - H)
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    url = reverse("admin:queues_teamquota_change", args=[pool.vq.pk])
    chosen = (now - timedelta(minutes=30)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M")
    post = _quota_post(pool.vq, [_line(pool.vline, nominal="4")])
    post["_whatif_apply_at"] = chosen
    assert client.post(url, post).status_code == 302
    preview = PolicyPreview.objects.order_by("-pk").first()
    assert preview.apply_at.strftime("%Y-%m-%dT%H:%M") == chosen
    preview_replay.policy_preview_run(preview_id=preview.pk)
    html = client.get(reverse("policy:preview", args=[preview.pk])).content.decode()
    assert 'id="whatif-replayed-1"' in html
    assert "QuotaLine h100/nvidia.com/gpu: 3 changed: nominal 2 → 3" in html
    assert f'value="{chosen}"' in html
    assert "Your change takes effect at" in html

    bad = _quota_post(pool.vq, [_line(pool.vline, nominal="4")])
    bad["_whatif_apply_at"] = "2001-01-01T00:00"
    assert client.post(url, bad).status_code == 302
    refused = PolicyPreview.objects.order_by("-pk").first()
    assert refused.apply_at is None
    assert any(
        w.startswith("_whatif_apply_at: '2001-01-01T00:00' is not a time of the window") for w in refused.warnings
    )
