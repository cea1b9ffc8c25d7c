"""The bounded, reach-limited replay of a diagnosis equals the full replay where it answers, and follows the change.

Each test compares the stored entries with what the engine gives on the whole state (``engine.diagnose_many``, the
replay of every pending job to the horizon): the same verdict for every job, the same p50 for every job the window
admitted, and a job left behind the window is one the full replay admits no earlier than the window's end.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from pools.state_version import bump, changed_jobs, journal_anchor, state_versions
from queues import diagnosis, diagnosis_input, diagnosis_store, diagnosis_window, engine, services
from queues.diagnosis_context import ETA_HORIZON, context_levels, engine_context, flavor_labels, verdict_of
from queues.diagnosis_pages import page_of
from queues.engine_input import ts, workload_key
from queues.models import ClusterDiagnosis, DiagnosisPage, Job
from queues.services import JobSpec
from tests.browser.scenarios import RACK, occupy, research_pool

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_process_state():
    """Each test starts as a fresh process: nothing kept from another test's cluster."""
    diagnosis_input.forget_kept_inputs()
    diagnosis_store._WINDOWS.clear()
    yield
    diagnosis_input.forget_kept_inputs()
    diagnosis_store._WINDOWS.clear()


def spec(pool, **kw) -> JobSpec:
    values = {"name": "train", "image": "registry.example.org/ml/train:1.0", "resource_class": pool.rc}
    values.update(kw)
    return JobSpec(**values)


def crowded_pool(seed: int = 3, pending: int = 40):
    """Every GPU busy (both teams, ending at different times) and ``pending`` jobs of a few shapes in both queues."""
    pool = research_pool(nominal="8", other_nominal="8")
    rng = random.Random(seed)
    for i, node in enumerate(pool.nodes):
        team = pool.team if i % 2 == 0 else pool.other_team
        occupy(pool, node=node, count=4, name=f"busy-{i}", team=team, runtime=600 * (i + 1))
    jobs = []
    for i in range(pending):
        team, owner = (pool.team, pool.user) if i % 3 else (pool.other_team, pool.other_user)
        size = rng.choice((1, 2, 4))
        extra = (
            {"topology_mode": "required", "topology_level": RACK, "pod_count": 2} if size == 4 and i % 5 == 0 else {}
        )
        jobs.append(
            services.job_submit(
                owner=owner,
                team=team,
                spec=spec(
                    pool, name=f"w{i}", devices_per_pod=size, sim_runtime_seconds=rng.choice((300, 900, 2700)), **extra
                ),
            )
        )
    return pool, jobs


def full_replay(pool, now):
    """Every pending job's explanation (``explain_many``) and when it first holds quota (``estimate_admissions``,
    every pending job watched) on the whole state, replayed to the horizon."""
    ctx = engine_context(pool.cluster, now=now)
    pending = sorted(k for k, j in ctx.inp.jobs_by_key.items() if j.state == Job.State.PENDING)
    explained = engine.explain_many(ctx.state, pending, ts(now))
    admitted_at = engine.estimate_admissions(
        ctx.state, pending, ts(now), ctx.end_times, horizon=ts(now + ETA_HORIZON), default_runtime=ctx.default_runtime
    )
    verdicts = {key: verdict_of(explained[key], flavor_labels(ctx), context_levels(ctx)) for key in pending}
    return verdicts, {key: at for key, at in admitted_at.items() if at is not None}


def stored(job, now):
    version = state_versions(job.cluster_id).total
    entry = diagnosis_store.stored_job_diagnosis(job, version=version, now=now)
    assert entry is not None, job.name
    return entry


def assert_matches_full_replay(pool, jobs, now, window):
    verdicts, admitted_at = full_replay(pool, now)
    replayed = extended = 0
    for job in jobs:
        job.refresh_from_db()
        if job.state != Job.State.PENDING:
            continue
        key = workload_key(job)
        entry = stored(job, now)
        full = verdicts[key]
        assert (entry.verdict.admissible, entry.verdict.code, entry.verdict.message) == (
            full.admissible,
            full.code,
            full.message,
        ), job.name
        at = admitted_at.get(key)
        if key in window.admitted_at:
            assert window.admitted_at[key] == at, job.name  # the window's time is the full replay's
            if not entry.eta.starts_now:
                replayed += 1
                assert entry.eta.p50.timestamp() == pytest.approx(max(at, now.timestamp()))
        elif not entry.eta.starts_now and full.admissible is False and window.window_end is not None:
            extended += 1
            assert at is None or at >= window.window_end, job.name  # behind the window: not admitted before its end
            assert entry.eta.extended or entry.eta.p50 is None
    return replayed, extended


@override_settings(DIAGNOSIS_REPLAY_ADMISSIONS=10)
def test_the_bounded_window_equals_the_full_replay_where_it_answers(monkeypatch):
    monkeypatch.setattr(diagnosis_window, "MIN_PREFIX", 3)
    pool, jobs = crowded_pool()
    now = timezone.now()
    result = diagnosis.cluster_diagnosis_refresh(pool.cluster, now=now)
    window = diagnosis_store._WINDOWS[pool.cluster.pk]
    assert result.jobs == len(jobs)
    assert window.window_end is not None  # the window closed before every job got quota
    assert sum(window.prefix.values()) < len(jobs)  # the engine was not given every pending job
    replayed, extended = assert_matches_full_replay(pool, jobs, now, window)
    assert replayed >= 10
    assert extended > 0


@override_settings(DIAGNOSIS_REPLAY_ADMISSIONS=10)
def test_a_group_that_runs_out_of_jobs_replays_again_with_more(monkeypatch):
    monkeypatch.setattr(diagnosis_window, "MIN_PREFIX", 1)
    monkeypatch.setattr(diagnosis_window, "PREFIX_GROWTH", 1.0)
    pool, jobs = crowded_pool(seed=5)
    now = timezone.now()
    monkeypatch.setattr(
        diagnosis_window,
        "_first_prefixes",
        lambda kept, groups, previous, change: {queue: max(g.first.values()) + 1 for queue, g in groups.items()},
    )
    diagnosis.cluster_diagnosis_refresh(pool.cluster, now=now)
    window = diagnosis_store._WINDOWS[pool.cluster.pk]
    assert window.replays > 1  # each group's first job only: some group ran out, and the replay ran again
    assert_matches_full_replay(pool, jobs, now, window)


@override_settings(DIAGNOSIS_REPLAY_ADMISSIONS=10)
def test_a_submission_behind_the_window_keeps_it_and_equals_a_fresh_diagnosis(
    monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(diagnosis_window, "MIN_PREFIX", 3)
    pool, jobs = crowded_pool()
    now = timezone.now()
    diagnosis.cluster_diagnosis_refresh(pool.cluster, now=now)
    with django_capture_on_commit_callbacks(execute=True):  # the version moves when the submission commits
        late = services.job_submit(owner=pool.user, team=pool.team, spec=spec(pool, name="late", devices_per_pod=1))
    later = now + timedelta(seconds=30)
    result = diagnosis.cluster_diagnosis_refresh(pool.cluster, now=later)
    assert not result.read_everything  # the kept input took the one new job
    assert result.window_kept  # it joins the back of a group the window did not empty: no replay
    kept_entries = {job.pk: stored(job, later) for job in [*jobs, late]}
    diagnosis_input.forget_kept_inputs()
    diagnosis_store._WINDOWS.clear()
    bump(cluster_ids=[pool.cluster.pk])  # a fresh process, a new version: everything read and replayed anew
    again = diagnosis.cluster_diagnosis_refresh(pool.cluster, now=later)
    assert again.read_everything
    assert not again.window_kept
    for job in [*jobs, late]:
        fresh = stored(job, later)
        kept = kept_entries[job.pk]
        assert (kept.verdict, kept.position) == (fresh.verdict, fresh.position), job.name
        assert (kept.eta.p50, kept.eta.method) == (fresh.eta.p50, fresh.eta.method), job.name


@override_settings(DIAGNOSIS_REPLAY_ADMISSIONS=10)
def test_a_job_that_ends_replays_and_still_equals_the_full_replay(monkeypatch):
    monkeypatch.setattr(diagnosis_window, "MIN_PREFIX", 3)
    pool, jobs = crowded_pool()
    now = timezone.now()
    diagnosis.cluster_diagnosis_refresh(pool.cluster, now=now)
    ending = Job.objects.filter(cluster=pool.cluster, state=Job.State.RUNNING).order_by("pk").first()
    ending.state, ending.finished_at = Job.State.SUCCEEDED, now
    ending.save()
    result = diagnosis.cluster_diagnosis_refresh(pool.cluster, now=now)
    assert not result.read_everything
    assert not result.window_kept  # a holder changed: the window is replayed
    assert_matches_full_replay(pool, jobs, now, diagnosis_store._WINDOWS[pool.cluster.pk])


def test_the_journal_names_the_jobs_a_change_touched_and_only_those():
    pool, jobs = crowded_pool(pending=4)
    before = state_versions(pool.cluster)
    jobs[0].priority = 500
    jobs[0].save()
    after = state_versions(pool.cluster)
    anchor = journal_anchor(pool.cluster, before)
    changed, after_anchor = changed_jobs(pool.cluster, since=before, until=after, anchor=anchor)
    assert changed == {jobs[0].pk}
    assert after_anchor == journal_anchor(pool.cluster, after)
    assert changed_jobs(pool.cluster, since=before, until=after, anchor=(("global", 1, "another journal"),))[0] is None
    pool.quota.save()  # a quota: anything may have changed
    assert changed_jobs(pool.cluster, since=after, until=state_versions(pool.cluster), anchor=after_anchor)[0] is None


def test_the_bumps_of_one_transaction_are_one_step(django_capture_on_commit_callbacks):
    pool, jobs = crowded_pool(pending=3)
    before = state_versions(pool.cluster)
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        for job in jobs:
            job.priority += 1
            job.save()
    after = state_versions(pool.cluster)
    assert after.cluster_version == before.cluster_version + 1
    changed, _ = changed_jobs(pool.cluster, since=before, until=after, anchor=journal_anchor(pool.cluster, before))
    assert changed == {j.pk for j in jobs}


def test_a_poll_reads_one_page_whatever_the_queue(django_assert_max_num_queries):
    pool, jobs = crowded_pool(pending=12)
    now = timezone.now()
    diagnosis.cluster_diagnosis_refresh(pool.cluster, now=now)
    job = jobs[7]
    with django_assert_max_num_queries(2):  # the version, the page (with the queue lengths)
        entry = diagnosis_store.stored_job_diagnosis(job, version=state_versions(pool.cluster).total, now=now)
    assert entry.position[1] == Job.objects.filter(team=job.team, state=Job.State.PENDING).count()
    assert DiagnosisPage.objects.filter(cluster=pool.cluster, page=page_of(job.pk)).exists()
    assert ClusterDiagnosis.objects.get(cluster=pool.cluster).jobs == len(jobs)
