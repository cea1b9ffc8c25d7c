"""Repair tickets: draining with checkpoints, validation pass and fail, RMA, manual tickets, directives, wait box."""

from __future__ import annotations

import pytest
from django.core import mail
from django.test import override_settings

from kernel.errors import Conflict
from notify import tasks as notify_tasks
from notify.models import Event as NotifyEvent
from pools.health import tickets
from pools.health.ingest import health_ingest_scrape
from pools.health.selectors import open_tickets_for, validation_pinning
from pools.health.services import Actor
from pools.models import Allocation, Cluster, Device, HealthState, NodeHealthDirective, RepairTicket, ValidationRun
from queues.models import Job, JobEvent
from tests.factories import DeviceFactory
from tests.health.conftest import submit, tick
from tests.health.scrapes import exposition, gpu

pytestmark = pytest.mark.django_db


def xid79(pool, device, at):
    return health_ingest_scrape(text=exposition([gpu(device, DCGM_FI_DEV_XID_ERRORS=79)]), now=pool.at(at))


def running_job(pool, name="train", *, checkpoint=True, at=0):
    job = submit(pool, name, at=at, checkpoint=checkpoint)
    tick(pool, at + 1)
    tick(pool, at + 2)
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING
    return job, job.allocations.get(ended_at__isnull=True).device


def test_running_job_is_checkpointed_moved_and_its_owner_told(pool, django_capture_on_commit_callbacks, settings):
    job, device = running_job(pool)
    with django_capture_on_commit_callbacks(execute=True):
        report = xid79(pool, device, 10)
    assert report.jobs_protected == [job.pk]
    job.refresh_from_db()
    device.refresh_from_db()
    ticket = RepairTicket.objects.get()
    assert job.state == Job.State.PREEMPTING
    assert device.health == HealthState.UNHEALTHY
    assert ticket.state == RepairTicket.State.DRAINING
    kinds = list(job.events.values_list("kind", flat=True))
    assert JobEvent.Kind.CHECKPOINT_REQUESTED in kinds
    moving = job.events.get(kind=JobEvent.Kind.PREEMPTED)
    assert "unhealthy hardware" in moving.message
    assert moving.details["reason"] == "device_unhealthy"
    # the owner is told through the lifecycle outbox: one notification for the move (not one per timeline line)
    assert NotifyEvent.objects.filter(job=job, kind="health").count() == 1
    settings.NOTIFY_BATCH_SECONDS, settings.NOTIFY_STALE_SECONDS = 0, 10**9
    notify_tasks.deliver_pending()
    [message] = mail.outbox  # one digest: admitted, started, and the move
    assert message.to == ["ada@example.org"]
    assert "moved off a failing GPU: Moving off unhealthy hardware" in message.body
    tick(pool, 15)  # checkpoint still being written
    job.refresh_from_db()
    assert job.state == Job.State.PREEMPTING
    tick(pool, 30)  # checkpoint done: requeued, and placed again on a healthy GPU
    job.refresh_from_db()
    ticket.refresh_from_db()
    device.refresh_from_db()
    assert job.events.filter(kind=JobEvent.Kind.CHECKPOINT_DONE).exists()
    assert job.state in (Job.State.ADMITTED, Job.State.RUNNING)
    assert job.allocations.get(ended_at__isnull=True).device != device
    assert ticket.state == RepairTicket.State.IN_REPAIR
    assert device.health == HealthState.QUARANTINED


@override_settings(HEALTH_SIMULATED_VALIDATION_OUTCOME="pass")
def test_ticket_lifecycle_with_a_passed_validation_records_each_step(pool):
    device = pool.devices[0]
    xid79(pool, device, 0)
    ticket = RepairTicket.objects.get()
    assert ticket.state == RepairTicket.State.IN_REPAIR
    run = tickets.ticket_start_validation(ticket=ticket, actor=Actor.of(pool.admin), now=pool.at(100))
    device.refresh_from_db()
    assert device.health == HealthState.VALIDATING
    job = run.job
    assert (job.team.slug, job.image, job.command[-1].startswith("dcgmi diag -r 3")) == (
        "platform-validation",
        "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04",
        True,
    )
    assert job.owner == pool.admin
    assert job.sim_fails is False
    pin = validation_pinning(job_id=job.pk)
    assert (pin.node_name, pin.device_uuids) == ("gpu-node-0", (device.uuid,))
    tick(pool, 101)
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING
    assert list(job.allocations.values_list("device_id", flat=True)) == [device.pk]
    tick(pool, 100 + 301)
    ticket.refresh_from_db()
    device.refresh_from_db()
    run.refresh_from_db()
    assert run.result == ValidationRun.Result.PASSED
    assert ticket.state == RepairTicket.State.RETURNED
    assert device.health == HealthState.HEALTHY
    assert device.health_reason == ""
    assert ticket.opened_at == pool.at(0)
    assert ticket.validating_by == pool.admin
    assert ticket.closed_at == pool.at(401)
    assert [ticket.draining_at, ticket.in_repair_at] == [pool.at(0), pool.at(0)]
    steps = [(e.from_state, e.to_state, e.actor_label) for e in ticket.events.exclude(to_state="")]
    assert steps == [
        ("", "opened", "dcgm scrape"),
        ("opened", "draining", "dcgm scrape"),
        ("draining", "in_repair", "dcgm scrape"),
        ("in_repair", "validating", "ops"),
        ("validating", "returned", "repair workflow"),
    ]
    assert [t.after for t in device.health_transitions.order_by("at", "id")] == [
        "unhealthy",
        "quarantined",
        "validating",
        "healthy",
    ]
    # The old XID no longer counts after the repair: the same gauge value is not a new event.
    again = xid79(pool, device, 500)
    assert again.changes == []


@override_settings(HEALTH_SIMULATED_VALIDATION_OUTCOME="fail")
def test_failed_validation_goes_back_to_repair_then_to_rma(pool):
    device = pool.devices[1]
    xid79(pool, device, 0)
    ticket = RepairTicket.objects.get()
    run = tickets.ticket_start_validation(ticket=ticket, actor=Actor.of(pool.admin), now=pool.at(10))
    assert run.job.sim_fails is True
    tick(pool, 11)
    tick(pool, 400)
    ticket.refresh_from_db()
    device.refresh_from_db()
    run.refresh_from_db()
    assert run.result == ValidationRun.Result.FAILED
    assert "failed" in run.message
    assert (ticket.state, ticket.validation_failures) == (RepairTicket.State.IN_REPAIR, 1)
    assert device.health == HealthState.QUARANTINED  # never healthy in between
    run2 = tickets.ticket_start_validation(ticket=ticket, actor=Actor.of(pool.admin), now=pool.at(500))
    assert run2.attempt == 2
    tick(pool, 501)
    tick(pool, 900)
    ticket.refresh_from_db()
    device.refresh_from_db()
    assert ticket.state == RepairTicket.State.RMA
    assert device.health == HealthState.RETIRED
    assert HealthState.HEALTHY not in device.health_transitions.values_list("after", flat=True)
    with pytest.raises(Conflict, match="retired"):
        tickets.ticket_open(device=device, reason="again", actor=Actor())


def test_validating_device_is_never_given_to_normal_jobs(pool):
    device = pool.devices[0]
    xid79(pool, device, 0)
    ticket = RepairTicket.objects.get()
    run = tickets.ticket_start_validation(ticket=ticket, actor=Actor.of(pool.admin), now=pool.at(5))
    jobs = [submit(pool, f"fill-{i}", at=6) for i in range(8)]
    for s in (7, 8, 9, 10):
        tick(pool, s)
    holders = set(Allocation.objects.filter(device=device).values_list("job_id", flat=True))
    assert holders == {run.job_id}
    running = Job.objects.filter(pk__in=[j.pk for j in jobs], state=Job.State.RUNNING).count()
    assert running == 7  # eight GPUs, one validating
    waiting = Job.objects.get(pk__in=[j.pk for j in jobs], state=Job.State.PENDING)
    assert waiting.wait_reason == "health_blocked"


def test_new_evidence_during_validation_fails_it(pool):
    device = pool.devices[2]
    xid79(pool, device, 0)
    ticket = RepairTicket.objects.get()
    run = tickets.ticket_start_validation(ticket=ticket, actor=Actor.of(pool.admin), now=pool.at(5))
    tick(pool, 6)
    health_ingest_scrape(text=exposition([gpu(device, DCGM_FI_DEV_ECC_DBE_VOL_TOTAL=3)]), now=pool.at(60))
    run.refresh_from_db()
    ticket.refresh_from_db()
    device.refresh_from_db()
    assert run.result == ValidationRun.Result.FAILED
    assert "double-bit" in run.message
    assert run.job.state == Job.State.CANCELLED
    assert ticket.state == RepairTicket.State.IN_REPAIR
    assert device.health == HealthState.QUARANTINED


def test_job_without_checkpoint_keeps_running_when_policy_waits_and_drain_now_evicts(pool):
    from pools.health.services import active_policy

    policy = active_policy()
    policy.drain_without_checkpoint = "wait"
    policy.save()
    job, device = running_job(pool, checkpoint=False)
    xid79(pool, device, 10)
    job.refresh_from_db()
    ticket = RepairTicket.objects.get()
    assert job.state == Job.State.RUNNING
    assert "keeps running" in job.events.filter(kind=JobEvent.Kind.NOTE).last().message
    tick(pool, 20)
    ticket.refresh_from_db()
    assert ticket.state == RepairTicket.State.DRAINING
    with pytest.raises(Conflict, match="validation starts from in repair"):
        tickets.ticket_start_validation(ticket=ticket, actor=Actor.of(pool.admin))
    assert tickets.ticket_drain_now(ticket=ticket, actor=Actor.of(pool.admin), now=pool.at(30)) == [job.pk]
    tick(pool, 31)
    ticket.refresh_from_db()
    job.refresh_from_db()
    assert ticket.state == RepairTicket.State.IN_REPAIR
    assert job.events.filter(kind=JobEvent.Kind.REQUEUED).exists()
    assert job.allocations.filter(ended_at__isnull=True, device=device).count() == 0


def test_job_without_checkpoint_is_evicted_at_once_by_default(pool):
    job, device = running_job(pool, checkpoint=False)
    xid79(pool, device, 10)
    tick(pool, 11)
    job.refresh_from_db()
    requeued = job.events.get(kind=JobEvent.Kind.REQUEUED)
    assert "device-hours of work lost" in requeued.message
    assert RepairTicket.objects.get().state == RepairTicket.State.IN_REPAIR


def test_manual_ticket_on_a_healthy_device_and_rma(pool):
    device = pool.devices[5]
    ticket = tickets.ticket_open(device=device, reason="fans noisy", actor=Actor.of(pool.admin), now=pool.at(0))
    device.refresh_from_db()
    assert ticket.opened_by == pool.admin
    assert device.health == HealthState.QUARANTINED
    assert [t.after for t in device.health_transitions.order_by("at", "id")] == ["unhealthy", "quarantined"]
    assert tickets.ticket_open(device=device, reason="still noisy", actor=Actor()) == ticket  # reused
    tickets.ticket_mark_rma(ticket=ticket, actor=Actor.of(pool.admin), now=pool.at(60))
    ticket.refresh_from_db()
    device.refresh_from_db()
    assert (ticket.state, ticket.closed_by, device.health) == ("rma", pool.admin, "retired")
    with pytest.raises(Conflict, match="cannot go to validating"):
        tickets._move(ticket, "validating", now=pool.at(70), actor=Actor(), note="x")


def test_node_ticket_validates_all_devices_in_one_pod(pool):
    node = pool.nodes[1]
    ticket = tickets.ticket_open(node=node, reason="PSU replaced", actor=Actor.of(pool.admin), now=pool.at(0))
    assert set(Device.objects.filter(node=node).values_list("health", flat=True)) == {"quarantined"}
    run = tickets.ticket_start_validation(ticket=ticket, actor=Actor.of(pool.admin), now=pool.at(1))
    assert (run.job.pod_count, run.job.devices_per_pod) == (1, 4)
    tick(pool, 2)
    tick(pool, 400)
    ticket.refresh_from_db()
    assert ticket.state == "returned"
    assert set(Device.objects.filter(node=node).values_list("health", flat=True)) == {"healthy"}


def test_validation_needs_a_class_that_can_place_the_devices(pool):
    pool.rc.allowed_counts = [8]
    pool.rc.save()
    xid79(pool, pool.devices[0], 0)
    ticket = RepairTicket.objects.get()
    with pytest.raises(Conflict, match="no active resource class offers 1"):
        tickets.ticket_start_validation(ticket=ticket, actor=Actor.of(pool.admin))
    ticket.refresh_from_db()
    assert ticket.state == RepairTicket.State.IN_REPAIR  # nothing half-done


@override_settings(HEALTH_MANAGED_NODE_LABELS={"portal.gpu/managed": "true"}, HEALTH_NODE_ACTION="taint")
def test_kubernetes_directives_only_on_managed_nodes_and_released_on_return(pool):
    Cluster.objects.filter(pk=pool.cluster.pk).update(backend=Cluster.Backend.KUBERNETES)
    managed = pool.nodes[0]
    managed.labels = {**managed.labels, "portal.gpu/managed": "true"}
    managed.save()
    dra = DeviceFactory(
        node=managed, index=7, source=Device.Source.DRA, dra_driver="gpu.nvidia.com", dra_device="gpu-7"
    )
    tickets.ticket_open(device=pool.devices[4], reason="x", actor=Actor(), now=pool.at(0))  # unmanaged node
    assert not NodeHealthDirective.objects.exists()
    t1 = tickets.ticket_open(device=pool.devices[0], reason="XID 79", actor=Actor(), now=pool.at(1))
    t2 = tickets.ticket_open(device=dra, reason="XID 48", actor=Actor(), now=pool.at(2))
    rows = {(d.kind, d.key, d.device_id) for d in NodeHealthDirective.objects.filter(node=managed)}
    assert rows == {("node-taint", "portal.gpu/unhealthy", None), ("device-taint", "portal.gpu/unhealthy", dra.pk)}
    tickets.ticket_mark_rma(ticket=t2, actor=Actor(), now=pool.at(3))
    assert NodeHealthDirective.objects.filter(device=dra, released_at__isnull=True).exists()  # RMA: kept
    tickets.ticket_mark_rma(ticket=t1, actor=Actor(), now=pool.at(4))
    assert not NodeHealthDirective.objects.filter(device=None, node=managed, released_at__isnull=True).exists()


def test_open_tickets_for_the_wait_box(pool):
    xid79(pool, pool.devices[0], 0)
    ticket = RepairTicket.objects.get()
    card = DeviceFactory(node=pool.nodes[1], index=6, partitioned=True)
    unit = DeviceFactory(node=pool.nodes[1], parent=card, mig=True)
    mig_ticket = tickets.ticket_open(device=unit, reason="MIG card bad", actor=Actor(), now=pool.at(1))
    assert mig_ticket.device == card
    [ref] = open_tickets_for(node_names=["gpu-node-0"], now=pool.at(60))
    assert (ref.id, ref.url, ref.state, ref.node, ref.age_seconds) == (
        ticket.pk,
        f"/health/tickets/{ticket.pk}/",
        "in_repair",
        "gpu-node-0",
        60,
    )
    assert [r.id for r in open_tickets_for(device_keys=[unit.key])] == [mig_ticket.pk]
    assert [r.id for r in open_tickets_for(device_keys=[pool.devices[0].uuid])] == [ticket.pk]
    assert open_tickets_for() == []
    tickets.ticket_mark_rma(ticket=ticket, actor=Actor())
    assert open_tickets_for(node_names=["gpu-node-0"]) == []


def test_rma_during_validation_cancels_the_burn_in_job_once_and_stops_it_in_its_cluster(
    pool, django_capture_on_commit_callbacks
):
    xid79(pool, pool.devices[1], 0)
    ticket = RepairTicket.objects.get()
    run = tickets.ticket_start_validation(ticket=ticket, actor=Actor.of(pool.admin), now=pool.at(5))
    tick(pool, 6)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        tickets.ticket_mark_rma(ticket=ticket, actor=Actor.of(pool.admin), now=pool.at(60))
    assert callbacks  # the cluster is told after commit
    run.refresh_from_db()
    job = run.job
    assert (job.state, run.result) == (Job.State.CANCELLED, ValidationRun.Result.FAILED)
    [cancelled] = job.events.filter(kind=JobEvent.Kind.CANCELLED)
    assert cancelled.message == f"Validation cancelled: ticket #{ticket.pk} sent to RMA."
    assert not job.allocations.filter(ended_at__isnull=True).exists()
