"""Health pages and admin: staff only (a ticket's summary for everyone signed in), admin actions call the services."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from pools.health.ingest import health_ingest_scrape
from pools.models import HealthObservation, HealthPolicy, HealthState, RepairTicket, ValidationRun
from tests.health.scrapes import exposition, gpu

pytestmark = pytest.mark.django_db


@pytest.fixture
def broken(pool):
    health_ingest_scrape(text=exposition([gpu(pool.devices[0], DCGM_FI_DEV_XID_ERRORS=79)]), now=pool.at(0))
    return RepairTicket.objects.get()


@pytest.mark.parametrize("name", ["health:map", "health:tickets", "health:capacity"])
def test_staff_pages_refuse_researchers_and_render_for_staff(client, pool, broken, name, django_assert_max_num_queries):
    client.force_login(pool.user)
    assert client.get(reverse(name)).status_code == 403
    client.force_login(pool.admin)
    with django_assert_max_num_queries(25):
        response = client.get(reverse(name))
    assert response.status_code == 200
    body = response.content.decode()
    if name == "health:map":
        assert "s-quarantined" in body
        assert f"#{broken.pk}" in body
    if name == "health:tickets":
        assert "reboot_node" in body
        assert "H100" in body
    if name == "health:capacity":
        assert "Not covered" in body


def test_health_map_fragment_for_htmx(client, pool, broken):
    client.force_login(pool.admin)
    response = client.get(reverse("health:map"), HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert response.content.decode().lstrip().startswith('<section id="health-map-grid"')
    assert "HX-Request" in response["Vary"]


def test_ticket_page_shows_researchers_the_summary_and_staff_the_evidence(client, pool, broken):
    url = reverse("health:ticket", args=[broken.pk])
    assert client.get(url).status_code == 302  # sign in first
    client.force_login(pool.user)
    body = client.get(url).content.decode()
    assert "In repair" in body
    assert "returns to the pool only after a validation" in body
    assert "Evidence" not in body
    client.force_login(pool.admin)
    body = client.get(url).content.decode()
    assert "Evidence" in body
    assert "reboot_node" in body
    assert "{&#x27;" not in body  # evidence is rows of label and value, not a printed dict
    assert "Device health transitions" in body


def test_admin_action_starts_validation_and_add_form_opens_a_ticket(client, pool, broken):
    client.force_login(pool.admin)
    changelist = reverse("admin:pools_repairticket_changelist")
    response = client.post(
        changelist, {"action": "ticket_ticket_start_validation", "_selected_action": [broken.pk]}, follow=True
    )
    assert response.status_code == 200
    broken.refresh_from_db()
    assert broken.state == RepairTicket.State.VALIDATING
    assert ValidationRun.objects.get().ticket == broken
    device = pool.devices[6]
    response = client.post(
        reverse("admin:pools_repairticket_add"),
        {"node": device.node_id, "device": device.pk, "reason": "fan failure"},
        follow=True,
    )
    assert response.status_code == 200
    ticket = RepairTicket.objects.get(device=device)
    assert ticket.opened_by == pool.admin
    device.refresh_from_db()
    assert device.health == HealthState.QUARANTINED
    rma = {"action": "ticket_ticket_mark_rma", "_selected_action": [ticket.pk]}
    response = client.post(changelist, rma, follow=True)
    ticket.refresh_from_db()
    assert ticket.state == RepairTicket.State.RMA


def test_admin_manual_observation_and_policy_validation(client, pool):
    client.force_login(pool.admin)
    device = pool.devices[3]
    response = client.post(
        reverse("admin:pools_healthobservation_add"),
        {"device": device.pk, "level": "degraded", "note": "slow in burn-in"},
        follow=True,
    )
    assert response.status_code == 200
    device.refresh_from_db()
    assert device.health == HealthState.DEGRADED
    assert HealthObservation.objects.get(device=device).source == "manual"
    from pools.health.services import active_policy

    policy = active_policy()
    url = reverse("admin:pools_healthpolicy_change", args=[policy.pk])
    page = client.get(url)
    assert page.status_code == 200
    form = page.context["adminform"].form
    data = {k: v for k, v in form.initial.items() if v is not None}
    data = {
        **{k: (json.dumps(v) if isinstance(v, (dict, list)) else v) for k, v in data.items()},
        "active": "on",
        "auto_open_ticket": "on",
        "row_remap_failure_unhealthy": "on",
        "xid_overrides": '{"109": "sometimes"}',
    }
    response = client.post(url, data)
    assert response.status_code == 200
    assert "is not one of ok, degraded, unhealthy" in response.content.decode()
    data["xid_overrides"] = '{"109": "ok"}'
    response = client.post(url, data)
    assert response.status_code == 302
    policy.refresh_from_db()
    assert policy.xid_overrides == {"109": "ok"}
    assert policy.updated_by == pool.admin
    assert HealthPolicy.objects.filter(active=True).count() == 1


def test_admin_add_refused_by_the_service_writes_nothing(client, pool):
    device = pool.devices[2]
    from pools.health.services import Actor
    from pools.health.tickets import ticket_mark_rma, ticket_open

    ticket_mark_rma(ticket=ticket_open(device=device, reason="dead", actor=Actor()), actor=Actor())
    client.force_login(pool.admin)
    response = client.post(
        reverse("admin:pools_repairticket_add"), {"node": device.node_id, "device": device.pk, "reason": "again"}
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:pools_repairticket_changelist")
    assert RepairTicket.objects.count() == 1


@pytest.mark.parametrize("name", ["health:map", "health:tickets", "health:capacity"])
def test_operators_read_the_health_pages_without_the_admins_links(client, pool, broken, name):
    """Issue 32: Health and Capacity answered 403 to an operator, whose role is to read the pool."""
    from django.contrib.auth.models import Group

    from tests.factories import UserFactory

    operator = UserFactory(username="oscar")
    operator.groups.add(Group.objects.get(name="operator"))  # made after migrate, with its permissions
    client.force_login(operator)
    response = client.get(reverse(name))
    assert response.status_code == 200
    body = response.content.decode()
    assert "/admin/" not in body  # acting stays with the admins: no link that would refuse an operator
    assert 'href="/health/capacity/"' in body  # the navigation offers the health pages
    ticket = client.get(reverse("health:ticket", args=[broken.pk])).content.decode()
    assert "Evidence" in ticket
    assert "/admin/" not in ticket
