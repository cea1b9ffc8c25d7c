"""The diagnosis service: wait reasons in both modes, feasibility, ETA and suggestions verified by the engine."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from django.utils import timezone

from clusters.backends.simulated import simulated_cluster_tick_run
from pools.models import Cluster
from queues import diagnosis, services
from queues.models import Job, JobEvent, WaitReason
from queues.services import JobSpec
from tests.browser.scenarios import RACK, occupy, research_pool
from tests.factories import DeviceFactory, PriorityClassFactory

pytestmark = pytest.mark.django_db


def spec(pool, **kw) -> JobSpec:
    values = {"name": "train", "image": "registry.example.org/ml/train:1.0", "resource_class": pool.rc}
    values.update(kw)
    return JobSpec(**values)


def fragmented(pool):
    """4 GPUs busy in each rack: 8 free in total, never 8 in one rack."""
    occupy(pool, node=pool.nodes[0], count=4, name="a", runtime=1800)
    occupy(pool, node=pool.nodes[2], count=4, name="b", team=pool.other_team, runtime=3600)


def test_feasibility_starts_now_on_an_empty_pool():
    pool = research_pool()
    result = diagnosis.spec_feasibility(owner=pool.user, team=pool.team, spec=spec(pool, devices_per_pod=4))
    assert result.verdict.admissible
    assert result.eta.starts_now
    assert result.verdict.flavors == ["H100"]
    assert len(result.verdict.nodes) == 1
    assert result.suggestions == []


def test_feasibility_fragmented_topology_names_the_reason_in_plain_words():
    pool = research_pool()
    fragmented(pool)
    s = spec(pool, devices_per_pod=4, pod_count=2, topology_mode="required", topology_level=RACK)
    result = diagnosis.spec_feasibility(owner=pool.user, team=pool.team, spec=s)
    assert not result.verdict.admissible
    assert result.verdict.code == WaitReason.TOPOLOGY_FRAGMENTED
    assert "8" in result.verdict.message
    assert "rack" in result.verdict.message
    assert RACK not in result.verdict.message  # label keys are said as people say them
    assert result.eta.p50 is not None
    assert result.eta.p90 >= result.eta.p50


def test_every_suggestion_is_verified_by_the_engine():
    pool = research_pool()
    fragmented(pool)
    s = spec(pool, devices_per_pod=4, pod_count=2, topology_mode="required", topology_level=RACK)
    suggestions = diagnosis.spec_feasibility(owner=pool.user, team=pool.team, spec=s).suggestions
    assert suggestions
    assert {sug.kind for sug in suggestions} >= {"topology", "devices"}
    for sug in suggestions:
        changed = dataclasses.replace(s, **{k: v for k, v in sug.changes.items() if k != "resource_class"})
        again = diagnosis.spec_feasibility(owner=pool.user, team=pool.team, spec=changed, with_suggestions=False)
        assert again.verdict.admissible, (sug.title, again.verdict)


def test_no_suggestion_when_nothing_smaller_would_start():
    pool = research_pool(racks={"rack-a": [2]})
    occupy(pool, node=pool.nodes[0], count=2, team=pool.other_team)
    result = diagnosis.spec_feasibility(owner=pool.user, team=pool.team, spec=spec(pool, devices_per_pod=1))
    assert result.verdict.code == WaitReason.CLASS_EXHAUSTED
    assert result.suggestions == []


def test_eta_p50_is_when_the_running_job_ends():
    pool = research_pool(racks={"rack-a": [4]})
    started = timezone.now() - timedelta(minutes=10)
    occupy(pool, node=pool.nodes[0], count=4, team=pool.other_team, started=started, runtime=1800)
    now = timezone.now()
    result = diagnosis.spec_feasibility(owner=pool.user, team=pool.team, spec=spec(pool, devices_per_pod=4), now=now)
    assert result.verdict.code == WaitReason.CLASS_EXHAUSTED
    expected = started + timedelta(seconds=1800)
    assert abs((result.eta.p50 - expected).total_seconds()) < 2
    assert result.eta.p90 > result.eta.p50  # too little history: widened by half the wait
    assert "too few recent admissions" in result.eta.method


def test_eta_p90_uses_the_spread_of_recent_waits_in_the_queue():
    pool = research_pool(racks={"rack-a": [4]})
    now = timezone.now()
    for i, wait in enumerate([60, 120, 300, 600, 1200, 2400]):
        submitted = now - timedelta(hours=2, minutes=i)
        job = occupy(pool, node=pool.nodes[0], count=1, name=f"old-{i}", started=submitted + timedelta(seconds=wait))
        services.job_finish(job, state=Job.State.SUCCEEDED, now=now - timedelta(minutes=30), message="done")
        Job.objects.filter(pk=job.pk).update(submitted_at=submitted, queued_at=submitted)
    occupy(pool, node=pool.nodes[0], count=4, team=pool.other_team, runtime=1800)
    result = diagnosis.spec_feasibility(owner=pool.user, team=pool.team, spec=spec(pool, devices_per_pod=4), now=now)
    assert result.eta.samples == 6
    assert "spread" in result.eta.method
    assert result.eta.p90 - result.eta.p50 > timedelta(minutes=10)


def test_tick_stores_reason_and_diagnosis_reads_it():
    pool = research_pool(racks={"rack-a": [4]}, nominal="4")
    occupy(pool, node=pool.nodes[0], count=4, runtime=1800)
    job = services.job_submit(owner=pool.user, team=pool.team, spec=spec(pool, devices_per_pod=2))
    simulated_cluster_tick_run(cluster_id=pool.cluster.pk)
    job.refresh_from_db()
    assert job.state == Job.State.PENDING
    assert job.wait_reason == WaitReason.QUOTA_EXHAUSTED
    assert job.events.filter(kind=JobEvent.Kind.WAIT_REASON, details__code="quota_exhausted").exists()
    d = diagnosis.job_diagnosis(job)
    assert d.waiting
    assert d.code == WaitReason.QUOTA_EXHAUSTED
    assert d.source == "engine"
    assert d.message == job.wait_message
    assert d.position == (1, 1)
    assert d.eta.p50 is not None
    recomputed = diagnosis.job_diagnosis(job, recompute=True)
    assert recomputed.source == "recomputed"
    assert recomputed.code == WaitReason.QUOTA_EXHAUSTED


def test_diagnosis_of_a_job_that_is_not_pending():
    pool = research_pool()
    job = occupy(pool, node=pool.nodes[0], count=1)
    d = diagnosis.job_diagnosis(job)
    assert not d.waiting
    assert d.eta is None


def test_priority_suggestion_found_by_preemption():
    pool = research_pool(racks={"rack-a": [4]}, nominal="4")
    pool.quota.within_cluster_queue = "LowerPriority"
    pool.quota.save()
    low = PriorityClassFactory(name="low", value=10)
    blocker = occupy(pool, node=pool.nodes[0], count=4)
    Job.objects.filter(pk=blocker.pk).update(priority_class=low, priority=10)
    result = diagnosis.spec_feasibility(
        owner=pool.user, team=pool.team, spec=spec(pool, devices_per_pod=4, priority_class=low)
    )
    assert result.verdict.code == WaitReason.QUOTA_EXHAUSTED
    [sug] = [s for s in result.suggestions if s.kind == "priority"]
    assert sug.changes == {"priority_class": "normal"}
    assert "preempted" in sug.message


def test_class_suggestion_when_another_class_has_room():
    pool = research_pool(racks={"rack-a": [2]})
    occupy(pool, node=pool.nodes[0], count=2, team=pool.other_team)
    from pools.models import ResourceFlavor
    from tests.factories import NodeFactory, QuotaLineFactory, ResourceClassFactory

    a100 = ResourceFlavor.objects.create(
        name="a100", display_name="A100", node_labels={"nvidia.com/gpu.product": "a100"}
    )
    node = NodeFactory(cluster=pool.cluster, flavor=a100, name="a100-n0")
    for i in range(4):
        DeviceFactory(node=node, index=i, product="NVIDIA A100-SXM4-80GB")
    ResourceClassFactory(slug="a100", name="A100 80GB", flavors=[a100], allowed_counts=[1, 2, 4])
    QuotaLineFactory(team_quota=pool.quota, flavor=a100, nominal="4")
    result = diagnosis.spec_feasibility(owner=pool.user, team=pool.team, spec=spec(pool, devices_per_pod=2))
    [sug] = [s for s in result.suggestions if s.kind == "class"]
    assert sug.changes["resource_class"] == "a100"
    assert "A100" in sug.message


def test_catalogue_wait_estimates():
    from queues import selectors

    pool = research_pool(racks={"rack-a": [4]})
    cards = selectors.class_catalogue(team=pool.team, cluster=pool.cluster)
    diagnosis.catalogue_wait_estimates(team=pool.team, cards=cards, owner=pool.user)
    assert cards[0].eta.starts_now
    occupy(pool, node=pool.nodes[0], count=4, team=pool.other_team, runtime=600)
    cards = selectors.class_catalogue(team=pool.team, cluster=pool.cluster)
    diagnosis.catalogue_wait_estimates(team=pool.team, cards=cards, owner=pool.user)
    assert not cards[0].eta.starts_now
    assert cards[0].eta.p50 > timezone.now()


# --------------------------------------------------------------------------- kubernetes mode


def test_kubernetes_staleness_when_the_last_sync_failed():
    pool = research_pool()
    assert diagnosis.cluster_staleness(pool.cluster) == ""
    now = timezone.now()
    Cluster.objects.filter(pk=pool.cluster.pk).update(
        last_synced_at=now - timedelta(minutes=10), last_sync_error_at=now, last_sync_error="connection refused"
    )
    pool.cluster.refresh_from_db()
    assert "cannot reach cluster" in diagnosis.cluster_staleness(pool.cluster)
    assert "as of" in diagnosis.cluster_staleness(pool.cluster)
    Cluster.objects.filter(pk=pool.cluster.pk).update(last_synced_at=now + timedelta(seconds=1))
    pool.cluster.refresh_from_db()
    assert diagnosis.cluster_staleness(pool.cluster) == ""


def test_kubernetes_mode_shows_what_the_timeline_stored():
    """Excluded devices and a lost cluster do not change the code on display: the backend stores such changes."""
    pool = research_pool(racks={"rack-a": [4]})
    Cluster.objects.filter(pk=pool.cluster.pk).update(backend=Cluster.Backend.KUBERNETES)
    occupy(pool, node=pool.nodes[0], count=2, team=pool.other_team)
    for device in pool.devices(pool.nodes[0])[2:]:
        device.health = "unhealthy"
        device.save()
    job = services.job_submit(owner=pool.user, team=pool.team, spec=spec(pool, devices_per_pod=2))
    services.job_set_wait_reason(job, code="class_exhausted", message="every H100 is in use", now=timezone.now())
    Cluster.objects.filter(pk=pool.cluster.pk).update(last_sync_error_at=timezone.now(), last_sync_error="refused")
    job = Job.objects.select_related("cluster", "team", "resource_class").get(pk=job.pk)
    d = diagnosis.job_diagnosis(job)
    [event] = job.events.filter(kind=JobEvent.Kind.WAIT_REASON)
    assert d.code == event.details["code"] == "class_exhausted"
    assert "cannot reach cluster" in d.stale


def test_job_diagnosis_in_kubernetes_mode_uses_the_stored_reason():
    pool = research_pool()
    Cluster.objects.filter(pk=pool.cluster.pk).update(backend=Cluster.Backend.KUBERNETES)
    job = services.job_submit(owner=pool.user, team=pool.team, spec=spec(pool))
    services.job_set_wait_reason(
        job, code="quota_exhausted", message="Kueue says: quota", kueue_message="insufficient", now=timezone.now()
    )
    job = Job.objects.select_related("cluster", "team", "resource_class").get(pk=job.pk)
    d = diagnosis.job_diagnosis(job)
    assert d.source == "kueue"
    assert d.code == "quota_exhausted"
    assert d.message == "Kueue says: quota"


def test_no_class_suggestion_of_another_sharing_mode():
    from tests.browser.scenarios import add_catalogue_classes

    pool = research_pool(racks={"rack-a": [2]})
    add_catalogue_classes(pool)  # MIG slices and time-shared L4s, free, with quota
    occupy(pool, node=pool.nodes[0], count=2, team=pool.other_team)
    result = diagnosis.spec_feasibility(owner=pool.user, team=pool.team, spec=spec(pool, devices_per_pod=1))
    assert result.verdict.code == WaitReason.CLASS_EXHAUSTED
    assert [s for s in result.suggestions if s.kind == "class"] == []


def test_feasibility_of_a_demoted_team_uses_the_demotion_priority():
    """A budget-demoted team's submission is checked at the class job_submit will record, not the one asked for.

    4 GPUs held by a priority-10 job; the team asks for priority 1000 (which could preempt it) but is demoted to
    a priority-1 class: the check must say it waits (quota used up), with no preemption in view.
    """
    pool = research_pool(racks={"rack-a": [4]}, nominal="4")
    pool.quota.within_cluster_queue = "LowerPriority"
    pool.quota.save()
    low = PriorityClassFactory(name="low", value=10)
    urgent = PriorityClassFactory(name="urgent", value=1000)
    scavenger = PriorityClassFactory(name="scavenger", value=1, may_preempt=False)
    blocker = occupy(pool, node=pool.nodes[0], count=4)
    Job.objects.filter(pk=blocker.pk).update(priority_class=low, priority=10)
    asked = spec(pool, devices_per_pod=4, priority_class=urgent)
    assert diagnosis.spec_feasibility(owner=pool.user, team=pool.team, spec=asked).verdict.preemption_targets
    services.team_priority_override_set(team=pool.team, priority_class=scavenger)
    job = diagnosis.job_from_spec(owner=pool.user, team=pool.team, spec=asked, cluster=pool.cluster, now=timezone.now())
    assert (job.priority_class, job.priority) == (scavenger, 1)
    result = diagnosis.spec_feasibility(owner=pool.user, team=pool.team, spec=asked, with_suggestions=False)
    assert result.verdict.code == WaitReason.QUOTA_EXHAUSTED
    assert not result.verdict.preemption_targets
    submitted = services.job_submit(owner=pool.user, team=pool.team, spec=asked, notify_backend=False)
    assert submitted.priority == job.priority


def test_eta_behind_a_running_session_gives_no_estimate_it_runs_until_stopped():
    """The same pool as above, but the blocker is a development session: it holds its 4 GPUs until stopped, so
    no replay frees room within the horizon (its simulated runtime does not apply)."""
    pool = research_pool(racks={"rack-a": [4]})
    blocker = occupy(pool, node=pool.nodes[0], count=4, team=pool.other_team, runtime=1800)
    Job.objects.filter(pk=blocker.pk).update(kind="session")
    result = diagnosis.spec_feasibility(owner=pool.user, team=pool.team, spec=spec(pool, devices_per_pod=4))
    assert result.verdict.code == WaitReason.CLASS_EXHAUSTED
    assert result.eta.p50 is None
    assert result.eta.method.startswith("No estimate: the running jobs' expected ends do not free room")
