"""``health_blocked`` names the excluded devices and links their repair ticket: diagnosis, job page and API."""

from __future__ import annotations

import pytest

from pools.health import tickets
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
