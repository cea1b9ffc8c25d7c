"""The engine input's per-row cache (``queues.engine_jobs``): every read equals a read with nothing kept."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from queues import diagnosis_context, engine_input, services
from queues.diagnosis_context import engine_context
from queues.engine_input import cluster_engine_input
from queues.models import Job
from tests.browser.scenarios import occupy, research_pool
from tests.factories import PriorityClassFactory, QuotaLineFactory
from tests.queues.test_diagnosis_store import spec

pytestmark = pytest.mark.django_db


def _uncached(cluster):
    """The engine input and context built with nothing kept from earlier reads."""
    engine_input._ROWS.clear()
    diagnosis_context._WITH_RUNTIME.clear()
    now = timezone.now()
    return cluster_engine_input(cluster=cluster), engine_context(cluster, now=now), now


def _same(cluster) -> None:
    """A read with the cache as earlier reads left it equals one with nothing kept (the input and the context)."""
    inp = cluster_engine_input(cluster=cluster)
    ctx = engine_context(cluster, now=timezone.now())
    fresh, fresh_ctx, _ = _uncached(cluster)
    assert inp.state == fresh.state
    assert ctx.state.workloads == fresh_ctx.state.workloads
    assert {k: (j.pk, j.state, j.team, j.priority_class_id) for k, j in inp.jobs_by_key.items()} == {
        k: (j.pk, j.state, j.team, j.priority_class_id) for k, j in fresh.jobs_by_key.items()
    }
    for key, job in inp.jobs_by_key.items():
        other = fresh.jobs_by_key[key]
        assert {f: getattr(job, f) for f in engine_input.ENGINE_JOB_FIELDS} == {
            f: getattr(other, f) for f in engine_input.ENGINE_JOB_FIELDS
        }
        assert job.team.namespace == other.team.namespace


def _pool_with_jobs():
    pool = research_pool()
    occupy(pool, node=pool.nodes[0], count=4, team=pool.other_team, runtime=900)
    jobs = [
        services.job_submit(
            owner=pool.user, team=pool.team, spec=spec(pool, name=f"w{i}", devices_per_pod=(1, 2, 4)[i % 3])
        )
        for i in range(6)
    ]
    return pool, jobs


def test_a_read_after_changes_equals_an_uncached_read():
    pool, jobs = _pool_with_jobs()
    _uncached(pool.cluster)
    _same(pool.cluster)  # everything reused
    jobs[1].devices_per_pod = 8
    jobs[1].sim_runtime_seconds = 1234
    jobs[1].save()
    _same(pool.cluster)  # one row changed: its workload and runtime follow
    jobs[2].priority_class = PriorityClassFactory(name="high", value=1000)
    jobs[2].priority = 1000
    jobs[2].save()
    _same(pool.cluster)
    jobs[3].state, jobs[3].finished_at = Job.State.CANCELLED, timezone.now()
    jobs[3].save()
    _same(pool.cluster)  # gone from the input
    services.job_submit(owner=pool.user, team=pool.team, spec=spec(pool, name="late", devices_per_pod=2))
    _same(pool.cluster)


def test_what_a_workload_reads_besides_its_row_is_part_of_the_key():
    pool, _ = _pool_with_jobs()
    _uncached(pool.cluster)
    # The queue now declares cpu: every job of the team asks for it, though no job row changed.
    QuotaLineFactory(team_quota=pool.quota, flavor=pool.flavor, resource_name="cpu", nominal="64")
    inp = cluster_engine_input(cluster=pool.cluster)
    assert all("cpu" in ps.requests for wl in inp.state.workloads if wl.namespace == "vision" for ps in wl.pod_sets)
    _same(pool.cluster)
    pool.team.namespace = "vision-2"
    pool.team.save()
    _same(pool.cluster)
    pool.normal.name = "standard"
    pool.normal.save()
    inp = cluster_engine_input(cluster=pool.cluster)
    assert {wl.priority_class for wl in inp.state.workloads} == {"standard"}
    _same(pool.cluster)
    pool.rc.cpu_per_device = "12"
    pool.rc.save()
    _same(pool.cluster)


def test_an_unchanged_row_is_built_once_and_a_changed_one_again():
    pool, jobs = _pool_with_jobs()
    first = {wl.key: wl for wl in cluster_engine_input(cluster=pool.cluster).state.workloads}
    jobs[0].queued_at = jobs[0].queued_at + timedelta(seconds=5)
    jobs[0].save()
    second = {wl.key: wl for wl in cluster_engine_input(cluster=pool.cluster).state.workloads}
    changed = engine_input.workload_key(jobs[0])
    assert second[changed] is not first[changed]
    assert second[changed] != first[changed]
    assert all(second[k] is first[k] for k in first if k != changed)


def test_the_runtime_follows_the_default_runtime_setting(settings):
    pool, jobs = _pool_with_jobs()
    Job.objects.filter(pk=jobs[0].pk).update(sim_runtime_seconds=None)
    before = engine_context(pool.cluster, now=timezone.now())
    settings.SIMULATED_DEFAULT_RUNTIME_SECONDS = 77
    after = engine_context(pool.cluster, now=timezone.now())
    key = engine_input.workload_key(jobs[0])
    assert {wl.key: wl.runtime for wl in after.state.workloads}[key] == 77
    assert {wl.key: wl.runtime for wl in before.state.workloads}[key] != 77
    _same(pool.cluster)
