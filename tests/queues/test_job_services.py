"""Job services: all-or-nothing submission with field errors, lifecycle events, allocations always closed."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from kernel.errors import Conflict, ValidationFailed
from pools.models import Allocation
from queues import services
from queues.models import Job, JobEvent, WaitReason
from queues.services import JobSpec
from tests.factories import (
    ClusterFactory,
    DeviceFactory,
    MembershipFactory,
    NodeFactory,
    ResourceClassFactory,
    ResourceFlavorFactory,
    TeamQuotaFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def setup():
    """A member of a team with a quota, a class over one H100 node."""
    flavor = ResourceFlavorFactory(name="h100")
    node = NodeFactory(flavor=flavor)
    devices = DeviceFactory.create_batch(8, node=node)
    rc = ResourceClassFactory(flavors=[flavor], allowed_counts=[1, 2, 4, 8])
    membership = MembershipFactory()
    TeamQuotaFactory(team=membership.team, cluster=ClusterFactory(name="sim"))
    return membership.user, membership.team, rc, devices


def spec(rc, **overrides) -> JobSpec:
    """A valid two-GPU submission."""
    values = {"name": "resnet", "image": "registry.example.org/vision/train:1.2", "resource_class": rc}
    values.update(overrides)
    values.setdefault("devices_per_pod", 2)
    return JobSpec(**values)


def test_job_submit_records_pending_job_and_event(setup):
    user, team, rc, _ = setup
    job = services.job_submit(owner=user, team=team, spec=spec(rc, pod_count=2))
    assert job.state == Job.State.PENDING
    assert job.k8s_name == f"resnet-{job.pk}"
    assert job.cluster.name == "sim"
    [event] = job.events.all()
    assert event.kind == JobEvent.Kind.SUBMITTED
    assert f": 2 pods with 2 GPUs each of {rc.name} = 4 GPUs." in event.message


@pytest.mark.parametrize(
    ("overrides", "field", "text"),
    [
        ({"name": "ResNet_50"}, "name", "DNS-1123"),
        ({"name": "x" * 51}, "name", "at most 50"),
        ({"image": "not an image!"}, "image", "not an image reference"),
        ({"devices_per_pod": 3}, "devices_per_pod", "allows 1, 2, 4, 8 devices per pod, not 3"),
        ({"pod_count": 0}, "pod_count", "between 1 and 512"),
        ({"topology_mode": "required"}, "topology_level", "both a topology mode and a level"),
        ({"max_runtime_seconds": 5}, "max_runtime_seconds", "between 60 s"),
        ({"env": {"1BAD": "x"}}, "env", "not a valid environment variable name"),
        ({"checkpoint_signal": "SIGUSR1"}, "checkpoint_path", "say where checkpoints are written"),
    ],
)
def test_job_submit_rejects_bad_input_naming_field(setup, overrides, field, text):
    user, team, rc, _ = setup
    with pytest.raises(ValidationFailed) as exc:
        services.job_submit(owner=user, team=team, spec=spec(rc, **overrides))
    assert any(text in m for m in exc.value.errors[field]), exc.value.errors
    assert not Job.objects.exists()
    assert not JobEvent.objects.exists()


def test_job_submit_refuses_non_member(setup):
    _, team, rc, _ = setup
    with pytest.raises(ValidationFailed) as exc:
        services.job_submit(owner=UserFactory(), team=team, spec=spec(rc))
    assert "not a member" in exc.value.errors["team"][0]


def test_job_submit_image_references_accepted(setup):
    user, team, rc, _ = setup
    for i, image in enumerate(
        [
            "python:3.11",
            "nvcr.io/nvidia/pytorch:24.05-py3",
            "localhost:5000/a/b",
            "ghcr.io/org/img@sha256:" + "a" * 64,
        ]
    ):
        services.job_submit(owner=user, team=team, spec=spec(rc, name=f"ok-{i}", image=image))
    assert Job.objects.count() == 4


def test_job_lifecycle_closes_allocations_at_the_true_end(setup):
    user, team, rc, devices = setup
    t0 = timezone.now() - timedelta(hours=2)
    job = services.job_submit(owner=user, team=team, spec=spec(rc), now=t0)
    services.job_admit(
        job,
        now=t0 + timedelta(minutes=5),
        cluster_queue=team.slug,
        pod_sets=[{"name": "main", "count": 1, "flavors": {"nvidia.com/gpu": "h100"}, "nodes": [devices[0].node.name]}],
        borrowing=False,
        devices=[devices[:2]],
    )
    assert Allocation.objects.filter(job=job, ended_at__isnull=True).count() == 2
    services.job_start(job, now=t0 + timedelta(minutes=6))
    end = t0 + timedelta(minutes=66)
    services.job_finish(job, state=Job.State.SUCCEEDED, now=end, message="done")
    job.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED
    assert job.finished_at == end
    assert set(Allocation.objects.filter(job=job).values_list("ended_at", flat=True)) == {end}
    kinds = list(job.events.values_list("kind", flat=True))
    assert kinds == ["submitted", "admitted", "started", "succeeded"]


def test_job_admit_twice_is_a_conflict(setup):
    user, team, rc, devices = setup
    job = services.job_submit(owner=user, team=team, spec=spec(rc))
    args = {"cluster_queue": "q", "pod_sets": [], "borrowing": False, "devices": [devices[:2]]}
    services.job_admit(job, now=timezone.now(), **args)
    with pytest.raises(Conflict):
        services.job_admit(job, now=timezone.now(), **args)


def test_job_cancel_releases_devices_and_refuses_twice(setup):
    user, team, rc, devices = setup
    job = services.job_submit(owner=user, team=team, spec=spec(rc))
    services.job_admit(job, now=timezone.now(), cluster_queue="q", pod_sets=[], borrowing=False, devices=[devices[:2]])
    services.job_cancel(job=job, user=user)
    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()
    with pytest.raises(Conflict, match="already ended"):
        services.job_cancel(job=job, user=user)


def test_job_wait_reason_change_is_an_event_repeat_is_not(setup):
    user, team, rc, _ = setup
    job = services.job_submit(owner=user, team=team, spec=spec(rc))
    now = timezone.now()
    assert services.job_set_wait_reason(job, code=WaitReason.QUOTA_EXHAUSTED, message="full", now=now)
    assert not services.job_set_wait_reason(job, code=WaitReason.QUOTA_EXHAUSTED, message="full", now=now)
    assert services.job_set_wait_reason(job, code=WaitReason.QUOTA_EXHAUSTED, message="full, 2 more", now=now)
    assert job.events.filter(kind=JobEvent.Kind.WAIT_REASON).count() == 1
    later = now + timedelta(minutes=3)
    services.job_set_wait_reason(job, code=WaitReason.CLASS_EXHAUSTED, message="busy", now=later)
    job.refresh_from_db()
    assert job.wait_since == later
    assert job.events.filter(kind=JobEvent.Kind.WAIT_REASON).count() == 2


def _wait_rows(jobs: list[Job]) -> tuple[list, list]:
    ids = [j.pk for j in jobs]
    rows = list(
        Job.objects.filter(pk__in=ids)
        .order_by("pk")
        .values_list("wait_reason", "wait_message", "kueue_message", "wait_details", "wait_since")
    )
    events = list(
        JobEvent.objects.filter(job_id__in=ids, kind=JobEvent.Kind.WAIT_REASON)
        .order_by("job_id", "id")
        .values_list("at", "kind", "message", "details")
    )
    return rows, events


def test_wait_reason_batch_writes_what_one_by_one_writes(setup):
    user, team, rc, _ = setup
    now = timezone.now()
    steps = [  # per step, per job: (code, message, kueue message, details) or None for no call
        [
            ("quota_exhausted", "full", "k", {"n": 1}),
            ("quota_exhausted", "full", "k", {"n": 1}),
            ("class_exhausted", "busy", "", None),
            None,
        ],
        [
            ("quota_exhausted", "full", "k", {"n": 1}),  # unchanged: nothing written
            ("quota_exhausted", "full, 2 more", "k", {"n": 2}),  # message only: no event
            ("health_blocked", "taint", "", {}),  # a new code: an event
            ("quota_exhausted", "full", "k", {"n": 1}),
        ],
    ]
    results = []
    for batched in (False, True):
        jobs = [services.job_submit(owner=user, team=team, spec=spec(rc, name=f"j{i}")) for i in range(4)]
        changed = []
        for k, step in enumerate(steps):
            at = now + timedelta(minutes=k)
            batch = services.WaitReasonBatch()
            for job, call in zip(jobs, step, strict=True):
                if call is None:
                    continue
                code, message, kueue, details = call
                write = batch.set_wait_reason if batched else services.job_set_wait_reason
                changed.append(write(job, code=code, message=message, kueue_message=kueue, details=details, now=at))
            batch.flush()
        results.append((changed, _wait_rows(jobs)))
    assert results[0] == results[1]
    changed, (rows, events) = results[1]
    assert changed == [True, True, True, False, True, True, True]
    assert len(events) == 5
    assert [r[:2] for r in rows] == [
        ("quota_exhausted", "full"),
        ("quota_exhausted", "full, 2 more"),
        ("health_blocked", "taint"),
        ("quota_exhausted", "full"),
    ]


def test_wait_reason_batch_discards_a_failed_job_and_refuses_a_second_add(setup):
    user, team, rc, _ = setup
    a, b = (services.job_submit(owner=user, team=team, spec=spec(rc, name=n)) for n in ("a", "b"))
    batch = services.WaitReasonBatch()
    now = timezone.now()
    batch.set_wait_reason(a, code="quota_exhausted", message="full", now=now)
    batch.set_wait_reason(b, code="quota_exhausted", message="full", now=now)
    with pytest.raises(ValueError, match="already in this batch"):
        batch.set_wait_reason(a, code="class_exhausted", message="busy", now=now)
    batch.discard(a)
    assert batch.flush() == 1
    assert Job.objects.get(pk=a.pk).wait_reason == ""
    assert Job.objects.get(pk=b.pk).wait_reason == "quota_exhausted"
    assert not a.events.filter(kind=JobEvent.Kind.WAIT_REASON).exists()
    assert b.events.filter(kind=JobEvent.Kind.WAIT_REASON).count() == 1


def test_job_requeue_without_checkpoint_records_lost_device_hours(setup):
    user, team, rc, devices = setup
    t0 = timezone.now() - timedelta(hours=3)
    job = services.job_submit(owner=user, team=team, spec=spec(rc), now=t0)
    services.job_admit(job, now=t0, cluster_queue="q", pod_sets=[], borrowing=False, devices=[devices[:2]])
    services.job_start(job, now=t0)
    services.job_preempt(job, now=t0 + timedelta(hours=1), preemptor=None, reason="InClusterQueue", message="m")
    services.job_requeue(job, now=t0 + timedelta(hours=1), reason="preempted", message="Evicted.", checkpointed=False)
    job.refresh_from_db()
    assert job.state == Job.State.PENDING
    assert job.preemption_count == 1
    requeued = job.events.get(kind=JobEvent.Kind.REQUEUED)
    assert requeued.details["lostDeviceHours"] == 2.0
    assert "2.00 device-hours of work lost" in requeued.message
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()


def test_job_preempt_with_checkpoint_policy_asks_for_checkpoint(setup):
    user, team, rc, devices = setup
    job = services.job_submit(
        owner=user, team=team, spec=spec(rc, checkpoint_path="/ckpt", checkpoint_signal="SIGUSR1")
    )
    services.job_admit(job, now=timezone.now(), cluster_queue="q", pod_sets=[], borrowing=False, devices=[devices[:2]])
    services.job_preempt(job, now=timezone.now(), preemptor=None, reason="InCohortReclamation", message="m")
    assert job.events.filter(kind=JobEvent.Kind.CHECKPOINT_REQUESTED).exists()
    assert Job.objects.get(pk=job.pk).state == Job.State.PREEMPTING
