"""``health_blocked`` names the excluded devices and links their repair ticket: diagnosis, job page and API."""

from __future__ import annotations

import pytest

from pools.health import tickets
from pools.health.nodes import health_nodes_reconcile
from pools.health.selectors import health_blocked_details
from pools.health.services import Actor
from pools.models import Device, HealthState, RepairTicket
from queues.diagnosis import job_diagnosis
from queues.models import Job, WaitReason
from tests.health.conftest import submit, tick

pytestmark = pytest.mark.django_db


def _blocked_job(pool):
    """A 4-GPU job runs on one node; a GPU of the other node goes to repair; a second 4-GPU job waits for health."""
    first = submit(pool, "first", at=0, devices=4)
    tick(pool, 1)
    tick(pool, 2)
    first.refresh_from_db()
    assert first.state == Job.State.RUNNING
    busy_node = first.allocations.first().device.node
    other = next(n for n in pool.nodes if n.pk != busy_node.pk)
    device = Device.objects.get(node=other, index=2)
    ticket = tickets.ticket_open(device=device, reason="XID 79 by hand", actor=Actor(label="ops"), now=pool.at(3))
    second = submit(pool, "second", at=4, devices=4)
    tick(pool, 5)
    second.refresh_from_db()
    assert second.state == Job.State.PENDING
    assert second.wait_reason == WaitReason.HEALTH_BLOCKED
    return second, device, ticket


def test_health_blocked_diagnosis_names_devices_and_links_the_ticket(pool):
    job, device, ticket = _blocked_job(pool)
    device.refresh_from_db()
    assert device.health == HealthState.QUARANTINED
    diagnosis = job_diagnosis(job, now=pool.at(6))
    assert diagnosis.code == WaitReason.HEALTH_BLOCKED
    assert diagnosis.details["excludedDevices"] == [
        {"node": device.node.name, "device": device.key, "health": "quarantined", "reason": device.health_reason}
    ]
    [ref] = diagnosis.details["repairTickets"]
    assert ref["id"] == ticket.pk
    assert ref["url"] == f"/health/tickets/{ticket.pk}/"
    assert ref["state"] == RepairTicket.State.IN_REPAIR
    assert (ref["node"], ref["device"]) == (device.node.name, device.key)


def test_health_blocked_job_page_and_api_link_the_ticket(client, pool):
    job, device, ticket = _blocked_job(pool)
    client.force_login(pool.user)
    page = client.get(f"/jobs/{job.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f'href="/health/tickets/{ticket.pk}/"' in html
    assert f"{device.node.name}/{device.key}" in html
    body = client.get(f"/api/jobs/{job.pk}/wait-reason/").json()
    assert body["code"] == "health_blocked"
    assert body["details"]["repairTickets"][0]["url"] == f"/health/tickets/{ticket.pk}/"
    # the researcher can open the ticket's summary page from there
    assert client.get(f"/health/tickets/{ticket.pk}/").status_code == 200


def test_health_blocked_without_named_nodes_uses_the_class_flavors(pool):
    from pools.health.selectors import health_blocked_details

    device = pool.devices[5]
    ticket = tickets.ticket_open(device=device, reason="by hand", actor=Actor(label="ops"), now=pool.at(0))
    details = health_blocked_details(cluster=pool.cluster, resource_class=pool.rc, details={"unhealthy": 1})
    assert details["unhealthy"] == 1
    assert [d["device"] for d in details["excludedDevices"]] == [device.key]
    assert [t["id"] for t in details["repairTickets"]] == [ticket.pk]


def test_device_plugin_gap_job_page_shows_the_engine_sentence(client, pool):
    """3 of gpu-node-1's 4 GPUs out as the importer records a device plugin's allocatable drop; gpu-node-0 busy:
    a 4-GPU job is health_blocked and its page shows the sentence naming the node and the numbers."""
    reason = "node allocatable 1 < capacity 4 (device plugin marked devices unhealthy)"
    other = pool.nodes[1]
    Device.objects.filter(node=other, index__gte=1).update(health=HealthState.UNHEALTHY, health_reason=reason)
    first = submit(pool, "first", at=0, devices=4)
    tick(pool, 1)
    tick(pool, 2)
    first.refresh_from_db()
    assert first.state == Job.State.RUNNING
    assert first.allocations.first().device.node == pool.nodes[0]
    second = submit(pool, "second", at=3, devices=4)
    tick(pool, 4)
    second.refresh_from_db()
    assert second.wait_reason == WaitReason.HEALTH_BLOCKED
    sentence = f"3 H100 GPUs on {other.name} are marked unhealthy by the device plugin (capacity 4, allocatable 1)"
    diagnosis = job_diagnosis(second, now=pool.at(5))
    assert sentence in diagnosis.message
    assert "excluded for health:" not in diagnosis.message  # the importer's note only repeats the numbers
    client.force_login(pool.user)
    html = client.get(f"/jobs/{second.pk}/").content.decode()
    assert sentence in html


def test_fragmented_job_page_shows_the_largest_free_block(client, pool):
    """Two 2-GPU jobs finish, one on each node: 4 GPUs free in total, 2 per node; a 4-GPU job is fragmented."""
    short = [submit(pool, f"short-{i}", at=2 * i, devices=2, runtime=60) for i in range(2)]
    long = [submit(pool, f"long-{i}", at=2 * i + 1, devices=2) for i in range(2)]
    tick(pool, 5)
    tick(pool, 6)
    for job in short + long:
        job.refresh_from_db()
        assert job.state == Job.State.RUNNING
    tick(pool, 200)
    waiting = submit(pool, "wide", at=201, devices=4)
    tick(pool, 202)
    waiting.refresh_from_db()
    assert waiting.state == Job.State.PENDING
    assert waiting.wait_reason == WaitReason.TOPOLOGY_FRAGMENTED
    sentence = "are free in total, enough for this job&#x27;s 4, but the largest free block on one node is 2"
    client.force_login(pool.user)
    html = client.get(f"/jobs/{waiting.pk}/").content.decode()
    assert sentence in html
    diagnosis = job_diagnosis(waiting, now=pool.at(203))
    assert diagnosis.details["largestFreeBlock"] == 2


def test_health_blocked_details_take_node_names_from_lists_only(pool):
    """Kueue's TAS translation puts a count under ``healthExcludedNodes`` and node names under ``nodes``."""
    _job, device, _ticket = _blocked_job(pool)
    other = next(n for n in pool.nodes if n.pk != device.node_id)
    counted = health_blocked_details(cluster=pool.cluster, resource_class=None, details={"healthExcludedNodes": 3})
    assert [d["device"] for d in counted["excludedDevices"]] == [device.key]
    assert counted["healthExcludedNodes"] == 3
    named = health_blocked_details(cluster=pool.cluster, resource_class=None, details={"nodes": [other.name]})
    assert named["excludedDevices"] == []
    named = health_blocked_details(cluster=pool.cluster, resource_class=None, details={"nodes": [device.node.name]})
    assert [d["node"] for d in named["excludedDevices"]] == [device.node.name]


def test_a_node_condition_gap_is_told_as_the_nodes_own_report(pool):
    """A simulated cluster whose inventory carries NVSentinel's GpuXidError=True on gpu-node-1 (naming GPU:1):
    a 4-GPU job that would fit there waits health_blocked, and the sentence says the node reported it."""
    first = submit(pool, "first", at=0, devices=4)
    tick(pool, 1)
    tick(pool, 2)
    first.refresh_from_db()
    busy = first.allocations.first().device.node
    other = next(n for n in pool.nodes if n.pk != busy.pk)
    other.conditions = [
        {
            "type": "GpuXidError",
            "status": "True",
            "reason": "GpuXidErrorIsNotHealthy",
            "message": "ErrorCode:79 GPU:1 Recommended Action=RESTART_BM;",
        }
    ]
    other.save()
    health_nodes_reconcile(cluster=pool.cluster, now=pool.at(3))
    second = submit(pool, "second", at=4, devices=4)
    tick(pool, 5)
    second.refresh_from_db()
    assert second.wait_reason == WaitReason.HEALTH_BLOCKED
    diagnosis = job_diagnosis(second, now=pool.at(6))
    assert f"1 H100 GPU on {other.name} is marked unhealthy by the node's own health reports" in diagnosis.message
    assert "node condition GpuXidError=True: ErrorCode:79 GPU:1 Recommended Action=RESTART_BM" in diagnosis.message
    assert diagnosis.details["healthNodes"][0]["cause"] == "node_reports"
