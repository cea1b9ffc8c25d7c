"""Done-when of the issue, on the demo: feeding a scrape with an XID 79 quarantines that GPU, opens a ticket, keeps
new jobs off it, shows the effect on capacity and on wait reasons, and the GPU returns only after a passed
validation job."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from clusters.backends.simulated import simulated_cluster_tick_run
from pools.health import selectors as health_selectors
from pools.health.services import Actor
from pools.health.tickets import ticket_start_validation
from pools.models import Allocation, Cluster, Device, HealthState, Node, RepairTicket, ResourceClass
from portal.demo import DEMO_CLUSTER, demo_seed
from queues import services as job_services
from queues.diagnosis import job_diagnosis
from queues.models import Job, Membership, WaitReason
from tests.health.scrapes import exposition

pytestmark = pytest.mark.django_db


def _class_out(slug: str) -> tuple[int, int]:
    [row] = [c for c in health_selectors.class_health() if c.resource_class.slug == slug]
    return row.out, row.effective


def _h100_coverage() -> health_selectors.QuotaCoverage:
    [row] = [
        r
        for r in health_selectors.quota_coverage()
        if r.flavor and r.flavor.name == "h100" and r.resource_name == "nvidia.com/gpu"
    ]
    return row


def _submit_whole_node(rc: ResourceClass, name: str, now, devices: int = 8):
    """One-pod jobs of ``devices`` GPUs, one per demo team member in turn (the caller takes what it needs)."""
    for m in Membership.objects.select_related("team", "user").order_by("team__slug", "user__username"):
        if not m.team.quotas.exists():
            continue
        spec = job_services.JobSpec(
            name=name,
            image="registry.example.org/ml/train:1.0",
            resource_class=rc,
            devices_per_pod=8,
            sim_runtime_seconds=86400,
        )
        yield job_services.job_submit(owner=m.user, team=m.team, spec=spec, now=now, notify_backend=False)


def test_xid_79_in_the_demo_end_to_end(tmp_path):
    now = timezone.now().replace(microsecond=0)
    demo_seed(days=1, now=now)
    cluster = Cluster.objects.get(name=DEMO_CLUSTER)
    t = now

    def tick(seconds: float):
        nonlocal t
        t = t + timedelta(seconds=seconds)
        return simulated_cluster_tick_run(cluster_id=cluster.pk, now=t)

    busy = set(Allocation.objects.filter(ended_at__isnull=True).values_list("device__node_id", flat=True))
    target_node, spare_node = (
        Node.objects.filter(cluster=cluster, flavor__name="h100").exclude(pk__in=busy).order_by("name")[:2]
    )
    target = Device.objects.get(node=target_node, index=3, resource_name="nvidia.com/gpu")
    out_before, effective_before = _class_out("h100")
    healthy_before = _h100_coverage().healthy

    # 1. Feed the scrape (real exporter layout; the demo's device-plugin GPUs have no UUID, so mapping is node + index).
    gpus = [
        {
            "uuid": f"GPU-demo-{i}",
            "gpu": i,
            "host": target_node.name,
            "fields": {"DCGM_FI_DEV_GPU_TEMP": 41, "DCGM_FI_DEV_XID_ERRORS": 0},
        }
        for i in range(8)
    ]
    gpus[3]["fields"]["DCGM_FI_DEV_XID_ERRORS"] = 79
    scrape = tmp_path / "xid79.prom"
    scrape.write_text(exposition(gpus, xid_msg="GPU has fallen off the bus"))
    out = io.StringIO()
    xid_at = t + timedelta(seconds=1)
    call_command("import_health", str(scrape), "--at", xid_at.isoformat(), stdout=out)
    text = out.getvalue()
    assert f"{target_node.name}/{target.key}: healthy → unhealthy" in text
    assert "unhealthy → quarantined" in text
    ticket = RepairTicket.objects.get(device=target)
    assert f"repair ticket #{ticket.pk} open" in text
    assert ticket.recommended_action == "reboot_node"
    target.refresh_from_db()
    assert target.health == HealthState.QUARANTINED
    assert set(Device.objects.filter(node=target_node).exclude(pk=target.pk).values_list("health", flat=True)) == {
        "healthy"
    }

    # 2. Capacity shows it: one H100 fewer in the class and behind the teams' quotas.
    out_after, effective_after = _class_out("h100")
    assert (out_after, effective_after) == (out_before + 1, effective_before - 1)
    assert _h100_coverage().healthy == healthy_before - 1

    # 3. New jobs stay off it. With the other free H100 node cordoned for maintenance, a whole-node job that only
    #    the damaged node could host waits for health, and the wait names the node and links the ticket.
    Node.objects.filter(pk=spare_node.pk).update(unschedulable=True)
    rc = ResourceClass.objects.get(slug="h100")
    waiting = None
    for candidate in _submit_whole_node(rc, "whole-node", t):
        tick(5)
        candidate.refresh_from_db()
        if candidate.state == Job.State.PENDING and candidate.wait_reason == WaitReason.HEALTH_BLOCKED:
            waiting = candidate
            break
        job_services.job_finish(candidate, state=Job.State.CANCELLED, now=t, message="not the one")
    assert waiting is not None, "no team could ask for a whole H100 node"
    assert target_node.name in waiting.wait_details["unhealthyNodes"]
    assert target.key in waiting.wait_message
    refs = health_selectors.open_tickets_for(node_names=waiting.wait_details["unhealthyNodes"])
    assert (ticket.pk, f"/health/tickets/{ticket.pk}/") in [(r.id, r.url) for r in refs]
    diagnosis = job_diagnosis(waiting, now=t)  # what the job page and the API show
    assert diagnosis.code == WaitReason.HEALTH_BLOCKED
    assert ticket.pk in [r["id"] for r in diagnosis.details["repairTickets"]]
    assert {"node": target_node.name, "device": target.key} in [
        {"node": d["node"], "device": d["device"]} for d in diagnosis.details["excludedDevices"]
    ]
    singles = _submit_whole_node(rc, "single", t, devices=1)  # these fit on the node's seven healthy GPUs
    for _ in range(3):
        next(singles)
        tick(10)
    assert not Allocation.objects.filter(device=target, started_at__gte=xid_at).exists()

    # 4. Repair done: the burn-in job runs on the quarantined GPU alone; the GPU is healthy only once it passed.
    run = ticket_start_validation(ticket=ticket, actor=Actor(label="admin"), now=t)
    target.refresh_from_db()
    assert target.health == HealthState.VALIDATING
    tick(5)
    run.refresh_from_db()
    assert run.job.state == Job.State.RUNNING
    holders = Allocation.objects.filter(device=target, started_at__gte=xid_at).values_list("job_id", flat=True)
    assert list(holders) == [run.job_id]
    waiting.refresh_from_db()
    assert waiting.state == Job.State.PENDING  # a validating GPU is not capacity
    tick(200)
    target.refresh_from_db()
    assert target.health == HealthState.VALIDATING  # burn-in still running: not back yet
    tick(200)
    run.refresh_from_db()
    ticket.refresh_from_db()
    target.refresh_from_db()
    assert run.result == "passed"
    assert ticket.state == RepairTicket.State.RETURNED
    assert target.health == HealthState.HEALTHY
    healthy_at = target.health_transitions.get(after=HealthState.HEALTHY).at
    assert healthy_at >= run.job.finished_at
    assert [tr.after for tr in target.health_transitions.order_by("at", "id")] == [
        "unhealthy",
        "quarantined",
        "validating",
        "healthy",
    ]
    assert _class_out("h100") == (out_before, effective_before)

    # 5. Back in the pool: the job that waited for health starts, on the repaired node.
    tick(5)
    tick(5)
    waiting.refresh_from_db()
    assert waiting.state in (Job.State.ADMITTED, Job.State.RUNNING)
    assert target.pk in set(waiting.allocations.values_list("device_id", flat=True))
