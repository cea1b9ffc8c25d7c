"""Admin actions on nodes and devices (cordon, quarantine, drain, open a ticket) through the health services; the
repair ticket form's node and device pickers; state names in words in what the admin says."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.urls import reverse

from kernel.errors import Conflict
from pools.health import tickets
from pools.health.services import Actor, active_policy
from pools.models import DeviceHealthTransition, HealthState, RepairTicket
from queues.models import Job
from tests.health.conftest import submit, tick

pytestmark = pytest.mark.django_db


@pytest.fixture
def ops(client, pool):
    client.force_login(pool.admin)
    return client


def act(client, model: str, action: str, pks) -> tuple[object, list[str]]:
    response = client.post(
        reverse(f"admin:pools_{model}_changelist"), {"action": action, "_selected_action": [str(p) for p in pks]}
    )
    return response, [str(m) for m in get_messages(response.wsgi_request)]


def running_job(pool, name="train"):
    job = submit(pool, name, at=0, checkpoint=False)
    tick(pool, 1)
    tick(pool, 2)
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING
    return job, job.allocations.get(ended_at__isnull=True).device


def test_node_cordon_marks_each_card_unhealthy_through_the_service(ops, pool):
    node = pool.nodes[0]
    policy = active_policy()
    policy.auto_open_ticket = False
    policy.save()
    _, said = act(ops, "node", "node_cordon", [node.pk])
    assert said == [f"node {node.name}: 4 cards marked unhealthy: no new work goes there; now 4 unhealthy"]
    assert set(node.devices.values_list("health", flat=True)) == {HealthState.UNHEALTHY}
    assert not RepairTicket.objects.exists()
    moves = DeviceHealthTransition.objects.filter(device__node=node, after=HealthState.UNHEALTHY)
    assert moves.count() == 4
    assert set(moves.values_list("actor_label", flat=True)) == {"ops"}
    assert set(pool.nodes[1].devices.values_list("health", flat=True)) == {HealthState.HEALTHY}


def test_node_cordon_with_the_policy_opening_tickets_says_so(ops, pool):
    node = pool.nodes[1]
    _, said = act(ops, "node", "node_cordon", [node.pk])
    opened = ", ".join(f"#{t.pk}" for t in RepairTicket.objects.order_by("pk"))
    assert said == [
        f"node {node.name}: 4 cards marked unhealthy: no new work goes there; now 4 quarantined; "
        f"repair tickets opened: {opened}"
    ]


def test_node_quarantine_opens_a_ticket_and_quarantines_an_idle_node(ops, pool):
    node = pool.nodes[1]
    _, said = act(ops, "node", "node_quarantine", [node.pk])
    ticket = RepairTicket.objects.get(node=node, device__isnull=True)
    assert ticket.state == RepairTicket.State.IN_REPAIR
    assert said == [f"node {node.name}: ticket #{ticket.pk} is in repair: its devices are quarantined"]
    assert set(node.devices.values_list("health", flat=True)) == {HealthState.QUARANTINED}
    assert ticket.opened_by == pool.admin


def test_node_quarantine_evicts_what_runs_there(ops, pool):
    policy = active_policy()
    policy.drain_without_checkpoint = "wait"  # the job would stay: quarantine forces it off
    policy.save()
    job, device = running_job(pool)
    _, said = act(ops, "node", "node_quarantine", [device.node.pk])
    ticket = RepairTicket.objects.get(node=device.node, device__isnull=True)
    assert said == [
        f"node {device.node.name}: ticket #{ticket.pk} is draining: its devices are quarantined once no job holds "
        "them (1 job evicted)"
    ]
    job.refresh_from_db()
    assert job.state == Job.State.PREEMPTING


def test_drain_without_a_ticket_says_what_to_do(ops, pool):
    node = pool.nodes[0]
    _, said = act(ops, "node", "node_drain", [node.pk])
    assert said == [f"node {node.name}: no repair ticket is open for it: open one first (or quarantine it)"]
    assert not RepairTicket.objects.exists()


def test_drain_evicts_the_jobs_of_a_draining_ticket(ops, pool):
    policy = active_policy()
    policy.drain_without_checkpoint = "wait"
    policy.save()
    job, device = running_job(pool)
    ticket = tickets.ticket_open(device=device, reason="fan noise", actor=Actor.of(pool.admin))
    assert ticket.state == RepairTicket.State.DRAINING
    _, said = act(ops, "device", "device_drain", [device.pk])
    assert said == [f"{device.node.name}/{device.key}: ticket #{ticket.pk}: 1 job evicted"]
    job.refresh_from_db()
    assert job.state == Job.State.PREEMPTING


def test_drain_of_a_ticket_in_repair_names_its_state_in_words(ops, pool):
    node = pool.nodes[1]
    ticket = tickets.ticket_open(node=node, reason="cabling", actor=Actor.of(pool.admin))
    assert ticket.state == RepairTicket.State.IN_REPAIR
    _, said = act(ops, "node", "node_drain", [node.pk])
    assert said == [f"node {node.name}: nothing to drain (#{ticket.pk} is in repair)"]
    with pytest.raises(Conflict) as refused:
        tickets.ticket_drain_now(ticket=ticket, actor=Actor.of(pool.admin))
    assert str(refused.value) == f"ticket #{ticket.pk} is in repair, not draining"


def test_open_ticket_for_one_node_fills_in_the_form(ops, pool):
    node = pool.nodes[0]
    response, _ = act(ops, "node", "node_open_ticket", [node.pk])
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('admin:pools_repairticket_add')}?node={node.pk}"
    form = ops.get(response["Location"]).content.decode()
    assert 'class="admin-autocomplete' in form
    assert f'<option value="{node.pk}" selected>{node.name}</option>' in form
    assert not RepairTicket.objects.exists()


def test_open_ticket_for_several_devices_opens_one_per_card(ops, pool):
    devices = [pool.devices[0], pool.devices[1]]
    _, said = act(ops, "device", "device_open_ticket", [d.pk for d in devices])
    opened = list(RepairTicket.objects.order_by("pk"))
    assert [t.device for t in opened] == devices
    assert all(t.reason == "opened in the admin by ops" for t in opened)
    assert len(said) == 2


def test_device_cordon_acts_on_the_card(ops, pool):
    device = pool.devices[5]
    _, said = act(ops, "device", "device_cordon", [device.pk])
    device.refresh_from_db()
    assert device.health in (HealthState.UNHEALTHY, HealthState.QUARANTINED)
    assert said[0].startswith(f"{device.node.name}/{device.key}: 1 card marked unhealthy")


def test_repair_ticket_form_picks_nodes_and_devices_by_search(ops, pool):
    html = ops.get(reverse("admin:pools_repairticket_add")).content.decode()
    assert html.count('class="admin-autocomplete') == 2
    assert "vForeignKeyRawIdAdminField" not in html
    found = ops.get(
        reverse("admin:autocomplete"),
        {"app_label": "pools", "model_name": "repairticket", "field_name": "node", "term": "node-1"},
    ).json()
    assert [r["text"] for r in found["results"]] == ["gpu-node-1"]
    # opening it with the picked node goes through the service
    response = ops.post(reverse("admin:pools_repairticket_add"), {"node": pool.nodes[1].pk, "reason": "PSU swap"})
    assert response.status_code == 302
    ticket = RepairTicket.objects.get()
    assert ticket.state == RepairTicket.State.IN_REPAIR


def test_ticket_pages_and_admin_show_no_internal_state_names(ops, pool):
    node = pool.nodes[1]
    ticket = tickets.ticket_open(node=node, reason="cabling", actor=Actor.of(pool.admin))
    changelist = ops.get(reverse("admin:pools_repairticket_changelist")).content.decode()
    assert "In repair" in changelist
    page = ops.get(reverse("health:ticket", args=[ticket.pk])).content.decode()
    text = re.sub(r"<[^>]+>", " ", page)  # what a person reads, not class names
    assert "in repair" in text.lower()
    assert "in_repair" not in text
    assert "Quarantined (drained, ticket open)" in text
    assert str(ticket) == f"#{ticket.pk} {node.name}/whole node (in repair)"
    change = ops.get(reverse("admin:pools_repairticket_change", args=[ticket.pk])).content.decode()
    assert "in_repair" not in re.sub(r"<[^>]+>", " ", change)
    assert "in repair" in change


def test_ticket_page_has_a_button_for_each_step_its_state_allows(ops, pool):
    ticket = tickets.ticket_open(node=pool.nodes[1], reason="cabling", actor=Actor.of(pool.admin))
    page = reverse("admin:pools_repairticket_change", args=[ticket.pk])
    html = ops.get(page).content.decode()
    start = reverse("admin:pools_repairticket_step", args=[ticket.pk, "start_validation"])
    rma = reverse("admin:pools_repairticket_step", args=[ticket.pk, "mark_rma"])
    drain = reverse("admin:pools_repairticket_step", args=[ticket.pk, "drain_now"])
    assert f'action="{start}"' in html
    assert 'value="Repair done: start validation"' in html
    assert f'action="{rma}"' in html
    assert f'action="{drain}"' not in html  # in repair: nothing left to drain

    assert ops.get(start).status_code == 405
    response = ops.post(start, follow=True)
    assert response.redirect_chain[-1][0] == page
    run = ticket.validation_runs.get()
    said = [str(m) for m in get_messages(response.wsgi_request)]
    assert said == [f"Ticket #{ticket.pk}: validation started: burn-in job #{run.job_id} submitted."]
    ticket.refresh_from_db()
    assert ticket.state == RepairTicket.State.VALIDATING
    html = response.content.decode()
    assert f'action="{start}"' not in html
    assert f'action="{rma}"' in html

    again = ops.post(start, follow=True)  # a second click (an old page): refused in words, nothing moves
    said = [str(m) for m in get_messages(again.wsgi_request)]
    assert said == [
        f"Ticket #{ticket.pk}: not done: ticket #{ticket.pk} is validating: validation starts from in repair"
    ]


def test_ticket_steps_need_the_change_permission(client, pool):
    ticket = tickets.ticket_open(node=pool.nodes[1], reason="cabling", actor=Actor.of(pool.admin))
    viewer = type(pool.admin).objects.create(username="viewer", is_staff=True)
    viewer.user_permissions.add(*Permission.objects.filter(codename="view_repairticket"))
    client.force_login(viewer)
    html = client.get(reverse("admin:pools_repairticket_change", args=[ticket.pk])).content.decode()
    assert 'id="ticket-steps"' not in html
    step = reverse("admin:pools_repairticket_step", args=[ticket.pk, "mark_rma"])
    assert client.post(step).status_code == 403
    ticket.refresh_from_db()
    assert ticket.state == RepairTicket.State.IN_REPAIR
