"""Health seen from the node, through the kube sync: NVSentinel's node conditions and taints (fixture
tests/fixtures/nvsentinel/nodes.yaml) make the node's GPUs unhealthy in the portal's health model, a waiting job
whose free capacity sits only there is health_blocked naming the node and why, and a cleared node gives its
devices back only through the repair workflow (validation)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pools.health import tickets
from pools.health.ingest import health_reconcile
from pools.health.nodes import NODE_CONDITION_SIGNAL, NODE_TAINT_SIGNAL
from pools.health.services import Actor
from pools.models import Device, HealthSignal, HealthState, RepairTicket, RepairTicketEvent
from queues.models import Job, WaitReason
from tests.kube.cluster import at, gpu_node

pytestmark = pytest.mark.django_db
NS = "team-vision"
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "nvsentinel" / "nodes.yaml"
BUSY = "0/2 nodes are available: 1 Insufficient nvidia.com/gpu"
PREEMPTION = " preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling."


def moment(name: str) -> dict:
    """gpu-a2 as the fixture's document ``name`` shows it (conditions and spec over the kubelet's node)."""
    docs = [d for d in yaml.safe_load_all(FIXTURE.read_text()) if d]
    doc = next(d for d in docs if d["metadata"]["annotations"]["portal.test/moment"] == name)
    node = gpu_node("gpu-a2")
    node["spec"] = doc["spec"]
    node["status"]["conditions"] = doc["status"]["conditions"]
    return node


def _busy_a1(world, kube) -> Job:
    """A job holding all of gpu-a1."""
    job = world.submit("busy")
    kube.create_workload(job.k8s_name, NS)
    kube.admit(job.k8s_name, NS, cluster_queue="vision", flavor="h100", nodes=["gpu-a1"], gpus_per_pod=8, when=at(1))
    kube.run_pods(job.k8s_name, NS, ["gpu-a1"], when=at(2))
    world.sync()
    assert world.job(job).state == Job.State.RUNNING
    return job


def _unschedulable(world, kube, scheduler: str, *, minute: float) -> Job:
    """A job Kueue admitted (the quota is there) whose pod kube-scheduler cannot place."""
    job = world.submit("train", minute=minute)
    kube.create_workload(job.k8s_name, NS)
    kube.admit(
        job.k8s_name, NS, cluster_queue="vision", flavor="h100", nodes=["gpu-a2"], gpus_per_pod=8, when=at(minute)
    )
    kube.pod(job.k8s_name, NS, 0, phase="Pending", when=at(minute), unschedulable=scheduler)  # not bound after all
    world.sync()
    return world.job(job)


def _states(node: str) -> dict[int, str]:
    return dict(Device.objects.filter(node__name=node).values_list("index", "health"))


def test_fixture_conditions_are_nvsentinels_shapes():
    """The fixture's True conditions carry NVSentinel's reason and message forms (what the matching relies on)."""
    condition = next(c for c in moment("condition")["status"]["conditions"] if c["type"] == "GpuXidError")
    assert (condition["status"], condition["reason"]) == ("True", "GpuXidErrorIsNotHealthy")
    assert condition["message"].startswith("ErrorCode:79 GPU:3 ")
    cleared = next(c for c in moment("cleared")["status"]["conditions"] if c["type"] == "GpuXidError")
    assert (cleared["status"], cleared["reason"], cleared["message"]) == (
        "False",
        "GpuXidErrorIsHealthy",
        "No Health Failures",
    )


def test_a_gpu_condition_takes_out_the_gpu_it_names_and_the_wait_names_node_and_condition(world, kube, emulator):
    _busy_a1(world, kube)
    emulator.put(moment("condition"))  # GpuXidError=True naming GPU:3, node cordoned by the fault quarantine
    world.sync()
    states = _states("gpu-a2")
    assert states[3] == HealthState.QUARANTINED  # unhealthy, ticket opened, nothing to drain: in repair
    assert {i: s for i, s in states.items() if i != 3} == {i: HealthState.HEALTHY for i in range(8) if i != 3}
    ticket = RepairTicket.objects.get()
    assert (ticket.node.name, ticket.device.index) == ("gpu-a2", 3)
    assert "node condition GpuXidError=True: ErrorCode:79 GPU:3 Recommended Action=RESTART_BM" in ticket.reason
    signal = HealthSignal.objects.get(device=ticket.device, signal=NODE_CONDITION_SIGNAL)
    assert signal.level == "unhealthy"

    job = _unschedulable(world, kube, f"{BUSY}, 1 node(s) were unschedulable.{PREEMPTION}", minute=5)
    assert (job.state, job.wait_reason) == (Job.State.PENDING, WaitReason.HEALTH_BLOCKED)
    assert job.wait_message == (
        "Admitted, but the pods cannot start: the free capacity sits on nodes excluded for health: 8 H100 GPUs on "
        "gpu-a2 (condition GpuXidError=True: ErrorCode:79 GPU:3 Recommended Action=RESTART_BM; cordoned)."
    )
    assert job.wait_details["unhealthyNodes"] == ["gpu-a2"]
    assert job.wait_details["healthNodes"][0]["units"] == 8


def test_a_health_taint_takes_out_the_node_and_the_wait_names_the_taint_not_class_full(world, kube, emulator):
    _busy_a1(world, kube)
    emulator.put(moment("taint"))  # nvidia.com/syslog-xid-error=true:NoSchedule + SysLogsXIDError=True (no GPU named)
    world.sync()
    assert set(_states("gpu-a2").values()) == {HealthState.QUARANTINED}
    cards = Device.objects.filter(node__name="gpu-a2", parent__isnull=True)
    assert HealthSignal.objects.filter(device__in=cards, signal=NODE_TAINT_SIGNAL, level="unhealthy").count() == 8
    assert HealthSignal.objects.filter(device__in=cards, signal=NODE_CONDITION_SIGNAL, level="unhealthy").count() == 8

    taint = "{nvidia.com/syslog-xid-error: true}"
    job = _unschedulable(world, kube, f"{BUSY}, 1 node(s) had untolerated taint {taint}.{PREEMPTION}", minute=5)
    assert job.wait_reason == WaitReason.HEALTH_BLOCKED
    assert "8 H100 GPUs on gpu-a2 (tainted nvidia.com/syslog-xid-error=true:NoSchedule by NVSentinel's fault " in (
        job.wait_message
    )
    assert "condition SysLogsXIDError=True: ErrorCode:79 Recommended Action=RESTART_BM)" in job.wait_message


def test_a_prefer_no_schedule_taint_is_a_warning_not_an_exclusion(world, emulator):
    node = gpu_node("gpu-a2", taints=[{"key": "nvidia.com/gpu-error", "value": "true", "effect": "PreferNoSchedule"}])
    emulator.put(node)
    world.sync()
    assert set(_states("gpu-a2").values()) == {HealthState.HEALTHY}
    assert not RepairTicket.objects.exists()


def test_a_cleared_node_gives_its_devices_back_only_through_validation(world, kube, emulator):
    emulator.put(moment("taint"))
    world.sync()
    tickets = RepairTicket.objects.filter(node__name="gpu-a2")
    assert [t.state for t in tickets] == [RepairTicket.State.IN_REPAIR] * 8  # one per card
    ticket = tickets.order_by("pk").first()
    emulator.put(moment("cleared"))  # NVSentinel remediated: conditions False, taint removed, uncordoned
    world.sync()
    assert set(_states("gpu-a2").values()) == {HealthState.QUARANTINED}  # still in repair
    ticket.refresh_from_db()
    assert ticket.state == RepairTicket.State.IN_REPAIR
    notes = list(RepairTicketEvent.objects.filter(ticket=ticket, to_state="").values_list("note", flat=True))
    assert any(n.startswith("The node no longer reports it (node taint nvidia.com/syslog-xid-error") for n in notes)
    assert any("the devices return to the pool once a validation job passes" in n for n in notes)
    cards = Device.objects.filter(node__name="gpu-a2", parent__isnull=True)
    assert set(HealthSignal.objects.filter(device__in=cards).values_list("signal", "level")) >= {
        (NODE_TAINT_SIGNAL, "ok"),
        (NODE_CONDITION_SIGNAL, "ok"),
    }
    world.sync(full=True)  # a relist of the healthy-looking node changes nothing either
    assert set(_states("gpu-a2").values()) == {HealthState.QUARANTINED}
    assert RepairTicketEvent.objects.filter(ticket=ticket, to_state="").count() == len(notes)


#: ILLUSTRATIVE, NOT A CAPTURE (as in tests/pools/test_inventory_vendors.py): the shape of NVSentinel's
#: ``quarantineHealthEvent`` annotation on a node its fault quarantine cordoned, values made up by us.
QUARANTINE_EVENT = '{"checkName": "GpuXidError", "errorCode": ["79"], "message": "GPU has fallen off the bus"}'


def test_a_fault_quarantine_cordon_reaches_the_sync_and_the_wait_says_who_cordoned(world, kube, emulator):
    _busy_a1(world, kube)
    node = gpu_node("gpu-a2")
    node["metadata"]["annotations"] = {"quarantineHealthEvent": QUARANTINE_EVENT, "unrelated": "x" * 50}
    node["spec"] = {"unschedulable": True}
    emulator.put(node)
    world.sync()
    assert set(_states("gpu-a2").values()) == {HealthState.QUARANTINED}
    job = _unschedulable(world, kube, f"{BUSY}, 1 node(s) were unschedulable.{PREEMPTION}", minute=5)
    assert job.wait_reason == WaitReason.HEALTH_BLOCKED
    assert (
        "8 H100 GPUs on gpu-a2 (cordoned by NVSentinel fault quarantine: GpuXidError 79 GPU has fallen off the bus)"
        in job.wait_message
    )


def test_after_the_node_clears_a_passed_validation_returns_the_gpu(
    world, kube, emulator, django_capture_on_commit_callbacks
):
    """The whole clear path: GpuXidError=True on GPU:3 → in repair; NVSentinel clears it → still in repair; the
    operator starts validation, the burn-in Job runs on gpu-a2 and succeeds → the sweep returns the GPU."""
    emulator.put(moment("condition"))
    world.sync()
    ticket = RepairTicket.objects.get()
    emulator.put(moment("cleared"))
    world.sync()
    emulator.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "platform-validation"}})
    with django_capture_on_commit_callbacks(execute=True):
        run = tickets.ticket_start_validation(ticket=ticket, actor=Actor(label="ops"))  # the portal's clock
    assert Device.objects.get(pk=ticket.device_id).health == HealthState.VALIDATING
    job = run.job
    job.refresh_from_db()
    ns = job.team.namespace
    kube.create_workload(job.k8s_name, ns)
    kube.admit(
        job.k8s_name, ns, cluster_queue="validation", flavor="h100", nodes=["gpu-a2"], gpus_per_pod=1, when=at(21)
    )
    kube.run_pods(job.k8s_name, ns, ["gpu-a2"], when=at(22))
    kube.complete(job.k8s_name, ns, ["gpu-a2"], started=at(22), when=at(40))
    world.sync()
    assert world.job(job).state == Job.State.SUCCEEDED
    health_reconcile(cluster=ticket.node.cluster)  # the sweep settles the finished burn-in
    ticket.refresh_from_db()
    assert ticket.state == RepairTicket.State.RETURNED
    assert set(_states("gpu-a2").values()) == {HealthState.HEALTHY}
    moves = ticket.device.health_transitions.order_by("id").values_list("before", "after")
    assert list(moves) == [
        ("healthy", "unhealthy"),
        ("unhealthy", "quarantined"),
        ("quarantined", "validating"),
        (
            "validating",
            "healthy",
        ),
    ]
