"""Reservation pages: the list and request form, a reservation's page with its actions, the week calendar, the
catalogue's "free for the next …" (thin view tests: status, permissions, fragments, what they say)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from queues.models import Reservation, ReservationPreview
from queues.reservations.holds import until_text
from queues.reservations.selectors import capped_use, catalogue_notes, reserved_soon, week_calendar
from tests.browser.scenarios import occupy
from tests.reservations.world import approved, at, reservation_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    return reservation_world()


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_lead_requests_on_the_page_and_lands_on_the_reservation(world):
    client = client_for(world.frank)
    page = client.get(reverse("queues:reservations"))
    assert page.status_code == 200
    assert b'id="reservation-request"' in page.content
    start = at(3, 9)
    answer = client.post(
        reverse("queues:reservations"),
        {
            "team": "speech",
            "resource_class": "h100",
            "count": "8",
            "starts_at": f"{timezone.localtime(start):%Y-%m-%dT%H:%M}",
            "ends_at": f"{timezone.localtime(start + timedelta(hours=8)):%Y-%m-%dT%H:%M}",
            "purpose": "evaluation run",
        },
    )
    row = Reservation.objects.get()
    assert answer.status_code == 302
    assert answer["Location"] == reverse("queues:reservation_detail", args=[row.pk])
    detail = client.get(answer["Location"])
    assert detail.status_code == 200
    assert b"Approved" in detail.content
    assert b'id="reservation-cancel"' in detail.content


def test_bad_input_comes_back_on_the_form_naming_the_field(world):
    client = client_for(world.frank)
    start = at(3, 9)
    page = client.post(
        reverse("queues:reservations"),
        {
            "team": "speech",
            "resource_class": "h100",
            "count": "8",
            "starts_at": f"{timezone.localtime(start):%Y-%m-%dT%H:%M}",
            "ends_at": f"{timezone.localtime(start - timedelta(hours=1)):%Y-%m-%dT%H:%M}",
            "purpose": "x",
        },
    )
    assert page.status_code == 200
    assert b"The window must end after it starts." in page.content
    assert not Reservation.objects.exists()


def test_members_see_no_form_and_may_not_post(world):
    client = client_for(world.pool.user)
    page = client.get(reverse("queues:reservations"))
    assert b'id="reservation-request"' not in page.content
    assert client.post(reverse("queues:reservations"), {"team": "vision"}).status_code == 403


def test_another_teams_reservation_is_not_found_but_its_calendar_entry_is_seen_without_purpose(world):
    row = approved(world, start=at(2, 9), end=at(2, 12))
    outsider = client_for(world.pool.user)  # alice, of vision
    assert outsider.get(reverse("queues:reservation_detail", args=[row.pk])).status_code == 404
    week = outsider.get(reverse("queues:reservation_calendar", args=["h100"]), {"week": f"{at(2, 0):%Y-%m-%d}"})
    assert week.status_code == 200
    assert f'id="week-entry-{row.pk}-'.encode() in week.content
    assert b"evaluation run" not in week.content
    own = client_for(world.frank).get(
        reverse("queues:reservation_calendar", args=["h100"]), {"week": f"{at(2, 0):%Y-%m-%d}"}
    )
    assert b"evaluation run" in own.content


def test_the_calendar_week_shows_reserved_and_free_per_hour_and_answers_a_fragment(world):
    approved(world, count=8, start=at(2, 9), end=at(2, 12))
    approved(world, team=world.vision, count=8, start=at(2, 10), end=at(2, 11), by=world.carol)
    calendar = week_calendar(
        resource_class=world.pool.rc, cluster=world.pool.cluster, week=at(2, 0).date(), user=world.admin
    )
    assert calendar.capacity == 16
    wednesday = 2
    assert [calendar.rows[h][wednesday].reserved for h in (8, 9, 10, 11, 12)] == [0, 8, 16, 8, 0]
    assert [calendar.rows[h][wednesday].free for h in (8, 9, 10, 11, 12)] == [16, 8, 0, 8, 16]
    client = client_for(world.admin)
    url = reverse("queues:reservation_calendar", args=["h100"])
    page = client.get(url, {"week": f"{at(2, 0):%Y-%m-%d}"})
    assert b'data-free="0"' in page.content
    fragment = client.get(url, {"week": f"{at(9, 0):%Y-%m-%d}"}, HTTP_HX_REQUEST="true")
    assert fragment.status_code == 200
    assert fragment.content.startswith(b'<section id="queues-reservation-week"')
    assert b"No reservation holds" in fragment.content
    assert client.get(reverse("queues:reservation_calendar", args=["nope"])).status_code == 404


def test_an_admin_decides_on_the_page_and_previews_first(world, django_capture_on_commit_callbacks, settings):
    waiting = Reservation.objects.create(
        team=world.speech,
        cluster=world.pool.cluster,
        resource_class=world.pool.rc,
        flavor=world.pool.flavor,
        resource_name="nvidia.com/gpu",
        count=12,
        starts_at=at(3, 9),
        ends_at=at(3, 12),
        purpose="release eval",
        requested_by=world.frank,
        requested_at=timezone.now(),
        reasons=["12 H100 GPUs are more than the 8 approved automatically."],
    )
    lead = client_for(world.frank)
    assert lead.post(reverse("queues:reservation_approve", args=[waiting.pk])).status_code == 403
    assert lead.post(reverse("queues:reservation_preview", args=[waiting.pk])).status_code == 403
    admin = client_for(world.admin)
    page = admin.get(reverse("queues:reservations"))
    assert b'id="reservations-waiting"' in page.content
    with django_capture_on_commit_callbacks(execute=True):
        admin.post(reverse("queues:reservation_preview", args=[waiting.pk]))
    preview = ReservationPreview.objects.get()
    assert preview.status == ReservationPreview.Status.DONE, preview.error
    part = admin.get(reverse("queues:reservation_preview_part", args=[waiting.pk, preview.pk]), HTTP_HX_REQUEST="true")
    assert part.status_code == 286
    assert b"would have waited longer" in part.content
    admin.post(reverse("queues:reservation_approve", args=[waiting.pk]), {"note": "release week"})
    waiting.refresh_from_db()
    assert waiting.state == Reservation.State.APPROVED
    assert waiting.decision_note == "release week"


def test_use_of_a_window_is_capped_at_the_count():
    t0 = timezone.now()
    hours = [(t0, t0 + timedelta(hours=2))] * 3 + [(t0 + timedelta(hours=1), None)]
    # 3 devices for 2 h, a 4th from 1 h on: 3 + 4 (capped at 2 → 2) … count 2 caps every instant at 2
    assert capped_use(hours, count=2, start=t0, end=t0 + timedelta(hours=3)) == 2 * 2 * 3600 + 1 * 3600
    assert capped_use(hours, count=8, start=t0, end=t0 + timedelta(hours=3)) == (3 * 2 + 2) * 3600


def test_the_catalogue_says_free_for_the_next_and_what_is_reserved(world):
    now = timezone.now()
    soon = approved(world, count=8, start=now + timedelta(hours=2, minutes=10), end=now + timedelta(hours=5))
    notes = catalogue_notes(
        available=16,
        reserved=reserved_soon(cluster=world.pool.cluster, resource_class=world.pool.rc, team=world.vision),
        now=now,
    )
    assert notes == [
        f"16 free now, for the next 2 h 10 min: reservation #{soon.pk} holds 8 for Speech from "
        f"{until_text(soon.starts_at, now=now)} to {until_text(soon.ends_at, now=now)}."
    ]
    own = catalogue_notes(
        available=16,
        reserved=reserved_soon(cluster=world.pool.cluster, resource_class=world.pool.rc, team=world.speech),
        now=now,
    )
    assert own[0].startswith(f"Your team's reservation #{soon.pk} of 8 starts in 2 h 10 min")
    occupy(world.pool, node=world.pool.nodes[0], count=4)
    page = client_for(world.pool.user).get(reverse("queues:classes"))
    assert b"for the next 2 h" in page.content
    assert f"reservation #{soon.pk} holds 8 for Speech".encode() in page.content
