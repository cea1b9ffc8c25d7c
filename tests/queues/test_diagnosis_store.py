"""Diagnosis once per state change: the state version, stored verdicts and ETAs, lazy and bounded suggestions."""

from __future__ import annotations

import gc
from datetime import timedelta
from functools import partial

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from pools.models import Device, Node
from pools.state_version import bump, state_version
from queues import diagnosis, diagnosis_input, diagnosis_pages, diagnosis_store, engine, services
from queues import diagnosis_suggestions as ds
from queues.diagnosis_context import Eta, context_eta, context_explain, engine_context
from queues.diagnosis_pages import page_of
from queues.engine import scheduler
from queues.engine_input import workload_key
from queues.models import ClusterDiagnosis, DiagnosisPage, Job, JobSuggestions
from queues.services import JobSpec
from tests.browser.scenarios import RACK, occupy, research_pool
from tests.factories import PriorityClassFactory

pytestmark = pytest.mark.django_db


class EngineCount:
    """Engines built since it was made or last reset: ``count["n"]`` (``scheduler.engines_built``)."""

    def __init__(self) -> None:
        self.since = scheduler.engines_built()

    def __getitem__(self, key: str) -> int:
        return scheduler.engines_built() - self.since

    def __setitem__(self, key: str, value: int) -> None:
        self.since = scheduler.engines_built() - value


@pytest.fixture
def engines():
    """Counts Engine constructions (every explain, settle and replay builds one)."""
    return EngineCount()


def spec(pool, **kw) -> JobSpec:
    values = {"name": "train", "image": "registry.example.org/ml/train:1.0", "resource_class": pool.rc}
    values.update(kw)
    return JobSpec(**values)


def busy_pool():
    """Every GPU taken by the other team (ending at different times), so that submissions wait."""
    pool = research_pool()
    for i, node in enumerate(pool.nodes):
        occupy(
            pool, node=node, count=node.devices.count(), name=f"busy-{i}", team=pool.other_team, runtime=600 * (i + 1)
        )
    return pool


def waiting(pool, n: int, **kw) -> list[Job]:
    sizes = [1, 2, 4, 2]
    return [
        services.job_submit(
            owner=pool.user, team=pool.team, spec=spec(pool, name=f"w{i}", devices_per_pod=sizes[i % 4], **kw)
        )
        for i in range(n)
    ]


# --------------------------------------------------------------------------- the state version


def test_state_version_counts_engine_changes_and_ignores_bookkeeping(django_capture_on_commit_callbacks):
    commit = partial(django_capture_on_commit_callbacks, execute=True)  # the bumps are written at commit
    pool = busy_pool()
    job = waiting(pool, 1)[0]
    v0 = state_version(pool.cluster)
    with commit():
        services.job_set_wait_reason(job, code="quota_exhausted", message="m", now=timezone.now())
    assert state_version(pool.cluster) == v0  # the stored wait reason is not engine input
    job.priority = 5
    with commit():
        job.save()
    v1 = state_version(pool.cluster)
    assert v1 > v0
    with commit():
        Node.objects.filter(pk=pool.nodes[0].pk).get().save()
    v2 = state_version(pool.cluster)
    assert v2 > v1
    with commit():
        PriorityClassFactory(name="urgent", value=1000)  # shared configuration: every cluster's version moves
    assert state_version(pool.cluster) > v2


def _node_with_devices(pool, name: str, count: int) -> Node:
    now = timezone.now()
    node = Node.objects.create(
        cluster=pool.cluster, name=name, flavor=pool.nodes[0].flavor, first_seen_at=now, last_seen_at=now
    )
    Device.objects.bulk_create(
        Device(
            node=node,
            key=f"{name}-{i}",
            vendor="nvidia",
            resource_name="nvidia.com/gpu",
            first_seen_at=now,
            last_seen_at=now,
        )
        for i in range(count)
    )
    return node


def test_deleting_a_node_counts_once_and_not_per_device(django_capture_on_commit_callbacks):
    commit = partial(django_capture_on_commit_callbacks, execute=True)
    pool = research_pool()
    small, large = _node_with_devices(pool, "small", 2), _node_with_devices(pool, "large", 16)
    v0 = state_version(pool.cluster)
    with CaptureQueriesContext(connection) as few, commit():
        small.delete()
    v1 = state_version(pool.cluster)
    assert v1 > v0
    with CaptureQueriesContext(connection) as many, commit():
        large.delete()
    assert state_version(pool.cluster) > v1
    assert len(many.captured_queries) == len(few.captured_queries)  # a cascade is not signalled device by device
    assert not Device.objects.filter(node__name__in=["small", "large"]).exists()


def test_the_device_admin_counts_its_deletes(admin_client, django_capture_on_commit_callbacks):
    commit = partial(django_capture_on_commit_callbacks, execute=True)
    pool = research_pool()
    node = _node_with_devices(pool, "spare", 3)
    devices = list(node.devices.order_by("pk"))
    v0 = state_version(pool.cluster)
    url = reverse("admin:pools_device_delete", args=[devices[0].pk])
    with commit():
        assert admin_client.post(url, {"post": "yes"}).status_code == 302
    v1 = state_version(pool.cluster)
    assert v1 > v0
    changelist = reverse("admin:pools_device_changelist")
    data = {"action": "delete_selected", "_selected_action": [d.pk for d in devices[1:]], "post": "yes"}
    with commit():
        assert admin_client.post(changelist, data).status_code == 302
    assert state_version(pool.cluster) > v1
    assert not node.devices.exists()


# --------------------------------------------------------------------------- polls between changes


def test_job_page_polls_between_changes_run_no_engine(client, engines):
    pool = busy_pool()
    job = waiting(pool, 3)[1]
    client.force_login(pool.user)
    url = reverse("queues:job_detail", args=[job.pk])
    headers = {"HX-Request": "true"}
    assert client.get(url, headers=headers).status_code == 200
    first = engines["n"]
    assert first > 0  # the first poll after the change computes the cluster's diagnoses (and the suggestions)
    for _ in range(10):
        assert client.get(url, headers=headers).status_code == 200
    assert engines["n"] == first  # ten more polls, no change: no engine built
    assert ClusterDiagnosis.objects.get(cluster=pool.cluster).state_version == state_version(pool.cluster)
    assert DiagnosisPage.objects.filter(cluster=pool.cluster, page=page_of(job.pk)).exists()
    assert JobSuggestions.objects.get(job=job).state_version == state_version(pool.cluster)


def test_a_state_change_triggers_a_recompute(engines, django_capture_on_commit_callbacks):
    pool = busy_pool()
    jobs = waiting(pool, 3)
    now = timezone.now()
    before = diagnosis.job_diagnosis(jobs[0], now=now)
    built = engines["n"]
    diagnosis.job_diagnosis(jobs[0], now=now)
    assert engines["n"] == built
    version = ClusterDiagnosis.objects.get(cluster=pool.cluster).state_version
    with django_capture_on_commit_callbacks(execute=True):
        services.job_cancel(job=jobs[1], user=pool.user)  # one job ahead leaves: the version moves
    after = diagnosis.job_diagnosis(Job.objects.get(pk=jobs[0].pk), now=now)
    assert engines["n"] > built
    assert ClusterDiagnosis.objects.get(cluster=pool.cluster).state_version > version
    assert before.eta is not None
    assert after.eta is not None


def test_stored_diagnoses_older_than_the_max_age_are_refreshed(engines):
    pool = busy_pool()
    job = waiting(pool, 1)[0]
    now = timezone.now()
    diagnosis.job_diagnosis(job, now=now, with_suggestions=False)
    built = engines["n"]
    diagnosis.job_diagnosis(job, now=now + diagnosis.DIAGNOSIS_MAX_AGE / 2, with_suggestions=False)
    assert engines["n"] == built
    old = now - diagnosis.DIAGNOSIS_MAX_AGE - timedelta(seconds=1)
    ClusterDiagnosis.objects.filter(cluster=pool.cluster).update(computed_at=old)  # no change counted since
    diagnosis.job_diagnosis(job, with_suggestions=False)
    assert ClusterDiagnosis.objects.get(cluster=pool.cluster).computed_at > old  # the poll asked for a refresh


def test_catalogue_estimates_are_computed_once_per_change(client, engines, django_capture_on_commit_callbacks):
    pool = busy_pool()
    client.force_login(pool.user)
    client.get(reverse("queues:classes"))
    built = engines["n"]
    assert built > 0
    html = client.get(reverse("queues:classes")).content.decode()
    assert engines["n"] == built
    assert "card" in html
    with django_capture_on_commit_callbacks(execute=True):
        waiting(pool, 1)
    client.get(reverse("queues:classes"))
    assert engines["n"] > built


# --------------------------------------------------------------------------- one replay = the per-job replays


def test_a_refresh_rewrites_only_the_pages_that_changed(django_capture_on_commit_callbacks):
    pool = busy_pool()
    jobs = waiting(pool, 4)
    now = timezone.now()
    first = diagnosis.cluster_diagnosis_refresh(pool.cluster, now=now)
    assert first.written == first.pages >= 1  # all new
    page = page_of(jobs[1].pk)
    DiagnosisPage.objects.filter(cluster=pool.cluster, page=page).update(data="{}", digest="not-the-digest")
    later = now + timedelta(minutes=3)  # a later refresh: nothing stored moves with its time
    bump(cluster_ids=[pool.cluster.pk])
    with CaptureQueriesContext(connection) as queries:
        second = diagnosis.cluster_diagnosis_refresh(pool.cluster, now=later)
    assert second.written == 1  # the page whose digest differs is rewritten, the others not
    assert DiagnosisPage.objects.get(cluster=pool.cluster, page=page).state_version == second.version
    inserts = [q["sql"] for q in queries.captured_queries if "INSERT" in q["sql"] and "diagnosispage" in q["sql"]]
    assert len(inserts) == 1  # one statement
    assert ClusterDiagnosis.objects.get(cluster=pool.cluster).state_version == second.version
    stored = diagnosis_store.stored_job_diagnosis(jobs[0], version=second.version, now=later)
    assert stored is not None
    assert stored.position == (1, 4)
    with django_capture_on_commit_callbacks(execute=True):
        services.job_cancel(job=jobs[3], user=pool.user)
    third = diagnosis.cluster_diagnosis_refresh(pool.cluster, now=later)
    assert diagnosis_store.stored_job_diagnosis(jobs[3], version=third.version, now=later) is None  # gone
    assert diagnosis_store.stored_job_diagnosis(jobs[2], version=third.version, now=later).position == (3, 3)


def test_a_page_built_again_equals_a_page_built_anew(django_capture_on_commit_callbacks):
    pool = busy_pool()
    jobs = waiting(pool, 5)
    now = timezone.now()
    diagnosis.cluster_diagnosis_refresh(pool.cluster, now=now)
    with django_capture_on_commit_callbacks(execute=True):  # the submission counts at its commit
        services.job_submit(owner=pool.user, team=pool.team, spec=spec(pool, name="late", devices_per_pod=1))
    jobs[0].devices_per_pod = 4
    jobs[0].save()
    diagnosis.cluster_diagnosis_refresh(pool.cluster, now=now + timedelta(minutes=1))  # pages kept where equal
    kept = dict(DiagnosisPage.objects.filter(cluster=pool.cluster).values_list("page", "data"))
    diagnosis_input.forget_kept_inputs()
    diagnosis_store._WINDOWS.clear()
    diagnosis_pages._ENTRIES.clear()
    bump(cluster_ids=[pool.cluster.pk])
    diagnosis.cluster_diagnosis_refresh(pool.cluster, now=now + timedelta(minutes=1))
    assert dict(DiagnosisPage.objects.filter(cluster=pool.cluster).values_list("page", "data")) == kept


def test_suggestions_are_recomputed_after_a_change():
    pool = research_pool()
    job = _fragmented_job(pool)
    now = timezone.now()
    first = diagnosis.job_diagnosis(job, now=now)
    assert first.suggestions
    stale = [{"kind": "devices", "title": "stale", "message": "m", "changes": {}}]
    JobSuggestions.objects.filter(job=job).update(suggestions=stale)
    assert [s.title for s in diagnosis.job_diagnosis(job, now=now).suggestions] == ["stale"]  # same version: read
    bump(cluster_ids=[pool.cluster.pk])  # a counted change that leaves this job's verdict and ETA as they were
    again = diagnosis.job_diagnosis(job, now=now)
    assert [s.title for s in again.suggestions] == [s.title for s in first.suggestions]  # recomputed
    assert JobSuggestions.objects.get(job=job).state_version == state_version(pool.cluster)


def test_the_stored_p90_is_its_spread_shown_at_read_time():
    pool = busy_pool()
    jobs = waiting(pool, 3)
    now = timezone.now()
    result = diagnosis.cluster_diagnosis_refresh(pool.cluster, now=now)
    ctx = engine_context(pool.cluster, now=now)
    entries = {j.pk: diagnosis_store.stored_job_diagnosis(j, version=result.version, now=now) for j in jobs}
    job = next(j for j in jobs if entries[j.pk].eta.p50 is not None and not entries[j.pk].eta.starts_now)
    p50 = entries[job.pk].eta.p50
    wait = (p50 - now).total_seconds()
    assert wait > 0
    at_refresh = entries[job.pk].eta
    assert (at_refresh.spread_floor, at_refresh.spread_share) == (0.0, diagnosis.FALLBACK_SPREAD)  # no history
    key = workload_key(job)
    assert at_refresh.p90 == context_eta(ctx, key, team=job.team, verdict=context_explain(ctx, key)).p90
    assert at_refresh.p90 == p50 + timedelta(seconds=wait * diagnosis.FALLBACK_SPREAD)
    # Half-way to the p50 the wait left is half: so is the spread; past the p50 no spread is left.
    halfway = now + timedelta(seconds=wait / 2)
    half = diagnosis_store.stored_job_diagnosis(job, version=result.version, now=halfway)
    assert half.eta.p90 == p50 + timedelta(seconds=wait / 2 * diagnosis.FALLBACK_SPREAD)
    late = p50 + timedelta(minutes=1)
    assert diagnosis_store.stored_job_diagnosis(job, version=result.version, now=late).eta.p90 == p50


def test_the_p90_keeps_the_queue_history_spread_as_its_floor():
    eta = Eta(p50=timezone.now() + timedelta(hours=1), spread_floor=600.0, spread_share=diagnosis.MIN_SPREAD)
    now = eta.p50 - timedelta(hours=1)
    assert eta.seen_at(now).p90 == eta.p50 + timedelta(seconds=3600 * diagnosis.MIN_SPREAD)  # 720 s > 600 s
    assert eta.seen_at(eta.p50 - timedelta(minutes=10)).p90 == eta.p50 + timedelta(seconds=600)  # the floor
    starts = Eta(starts_now=True).seen_at(now)
    assert (starts.p50, starts.p90) == (now, now)


def test_one_replay_etas_equal_the_per_job_etas():
    pool = busy_pool()
    jobs = waiting(pool, 6)
    jobs += waiting(pool, 2, pod_count=2, topology_mode="required", topology_level=RACK)
    now = timezone.now()
    result = diagnosis.cluster_diagnosis_refresh(pool.cluster, now=now)
    assert result.jobs == len(jobs)
    ctx = engine_context(pool.cluster, now=now)
    estimated = 0
    for job in jobs:
        key = workload_key(job)
        verdict = context_explain(ctx, key)
        old = context_eta(ctx, key, team=job.team, verdict=verdict)  # one engine and one replay for this job
        entry = diagnosis_store.stored_job_diagnosis(job, version=result.version, now=now)
        stored = entry.verdict
        assert (stored.admissible, stored.code, stored.message) == (verdict.admissible, verdict.code, verdict.message)
        eta = entry.eta  # as read at `now`
        assert (eta.starts_now, eta.p50, eta.p90) == (old.starts_now, old.p50, old.p90), job.name
        assert eta.method == old.method
        estimated += eta.p50 is not None and not eta.starts_now
    assert estimated >= 4  # most wait for a running job to end


def test_explain_many_equals_explain_one_by_one():
    pool = busy_pool()
    waiting(pool, 5)
    waiting(pool, 2, pod_count=2, topology_mode="required", topology_level=RACK)
    ctx = engine_context(pool.cluster, now=timezone.now())
    keys = sorted(k for k, j in ctx.inp.jobs_by_key.items() if j.state == Job.State.PENDING)
    now = ctx.now.timestamp()
    many = engine.explain_many(ctx.state, keys, now)
    for key in keys:
        assert many[key] == engine.explain(ctx.state, key, now), key


def test_estimate_admissions_equals_estimate_admission():
    pool = busy_pool()
    waiting(pool, 8)
    ctx = engine_context(pool.cluster, now=timezone.now())
    keys = sorted(k for k, j in ctx.inp.jobs_by_key.items() if j.state == Job.State.PENDING)
    now = ctx.now.timestamp()
    horizon = now + 14 * 86400
    together = engine.estimate_admissions(ctx.state, keys, now, ctx.end_times, horizon=horizon, default_runtime=60)
    for key in keys:
        alone = engine.estimate_admission(ctx.state, key, now, ctx.end_times, horizon=horizon, default_runtime=60)
        assert together[key] == alone, key
    assert any(v is not None for v in together.values())


# --------------------------------------------------------------------------- suggestions


def _fragmented_job(pool) -> Job:
    """A required-rack job that cannot start while each rack has only part of its GPUs free."""
    occupy(pool, node=pool.nodes[0], count=4, name="a", runtime=1800)
    occupy(pool, node=pool.nodes[2], count=4, name="b", team=pool.other_team, runtime=3600)
    return services.job_submit(
        owner=pool.user,
        team=pool.team,
        spec=spec(pool, devices_per_pod=4, pod_count=2, topology_mode="required", topology_level=RACK),
    )


def test_suggestions_are_computed_once_per_version(engines):
    pool = research_pool()
    job = _fragmented_job(pool)
    now = timezone.now()
    first = diagnosis.job_diagnosis(job, now=now)
    assert first.suggestions
    built = engines["n"]
    again = diagnosis.job_diagnosis(job, now=now)
    assert engines["n"] == built
    assert [(s.kind, s.title, s.changes) for s in again.suggestions] == [
        (s.kind, s.title, s.changes) for s in first.suggestions
    ]


def test_suggestions_are_bounded_in_variants_and_time(engines, monkeypatch):
    pool = research_pool()
    job = _fragmented_job(pool)
    ctx = engine_context(pool.cluster, now=timezone.now())
    key = workload_key(job)
    explained = []
    original = engine.WhatIf.explain
    monkeypatch.setattr(engine.WhatIf, "explain", lambda self, w: explained.append(w.key) or original(self, w))
    engines["n"] = 0
    ds.suggestions_for(ctx, job, team=job.team, exclude_key=key, budget=0)
    assert len(explained) == 1  # no time left after the first variant: the search stops
    monkeypatch.setattr(ds, "MAX_VARIANTS", 2)
    monkeypatch.setattr(ds, "MAX_SUGGESTIONS", 10)
    engines["n"] = 0
    explained.clear()
    ds.suggestions_for(ctx, job, team=job.team, exclude_key=key, budget=60)
    assert len(explained) == 2
    assert engines["n"] == 1  # one engine for all the variants
    variants = sum(1 for _ in ds._variants(job, team=job.team))
    assert variants > 2  # the cap, not the list, stopped it


def test_a_large_kept_input_is_read_once_then_kept_out_of_the_collectors_sight(monkeypatch):
    """Full collections walked every object of a kept input again (0.5–0.8 CPU-s a refresh at 100,000 pending): a
    large one is frozen once read (``gc.freeze``), and unfrozen when a full read replaces it; a change brought in
    from the journal freezes nothing more. Small inputs are never frozen."""
    pool = busy_pool()
    waiting(pool, 3)
    diagnosis_input.forget_kept_inputs()
    try:
        diagnosis.cluster_diagnosis_refresh(pool.cluster)
        assert gc.get_freeze_count() == 0  # a small input: left to the collector
        monkeypatch.setattr(diagnosis_input, "FREEZE_JOBS", 1)
        diagnosis_input.forget_kept_inputs()
        first = diagnosis.cluster_diagnosis_refresh(pool.cluster)
        assert first.read_everything
        frozen = gc.get_freeze_count()
        assert frozen > 0
        waiting(pool, 1)  # one more job: a journalled change
        second = diagnosis.cluster_diagnosis_refresh(pool.cluster)
        assert not second.read_everything  # brought up to date from the journal
        assert gc.get_freeze_count() <= frozen  # nothing frozen anew (what the change replaced was freed)
        diagnosis_input.forget_kept_inputs()
        diagnosis.cluster_diagnosis_refresh(pool.cluster)  # a full read again: unfrozen, collected, frozen anew
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        diagnosis_input._FROZEN[0] = False
