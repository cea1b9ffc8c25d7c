"""A lead's request, the rules it meets (refusals with their reasons, overlaps, limits), an admin's decision, a
cancellation (``queues.reservations.services`` and ``rules``)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from kernel.errors import Conflict, ValidationFailed
from pools.models import HealthState
from queues.models import Reservation, ReservationPolicy, TeamQuota
from queues.reservations.rules import healthy_capacity, week_hours
from queues.reservations.services import (
    ReservationForbidden,
    reservation_approve,
    reservation_cancel,
    reservation_refuse,
    reservation_request,
)
from tests.factories import ResourceClassFactory, ResourceFlavorFactory
from tests.reservations.world import approved, at, reservation_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    return reservation_world()


def ask(world, *, user=None, team=None, count=8, start=None, end=None, purpose="evaluation run", **kw):
    start = start or at(3, 9)
    return reservation_request(
        team=team or world.speech,
        user=user or world.frank,
        resource_class=world.pool.rc,
        count=count,
        starts_at=start,
        ends_at=end or start + timedelta(hours=8),
        purpose=purpose,
        **kw,
    )


def test_a_request_within_the_automatic_limits_is_approved_at_once(world):
    row = ask(world)
    assert row.state == Reservation.State.APPROVED
    assert row.decision == Reservation.Decision.AUTO
    assert row.decided_at is not None
    assert row.reasons == []
    assert (row.flavor, row.resource_name, row.cluster) == (world.pool.flavor, "nvidia.com/gpu", world.pool.cluster)
    assert row.opened_at is None  # the window is days away


def test_only_a_lead_or_an_admin_may_request(world):
    with pytest.raises(ReservationForbidden, match="Only a lead of Speech"):
        ask(world, user=world.pool.other_user)
    assert ask(world, user=world.admin).state == Reservation.State.APPROVED
    assert not Reservation.objects.filter(requested_by=world.pool.other_user).exists()


@pytest.mark.parametrize(
    ("changes", "field", "text"),
    [
        ({"count": 0}, "count", "at least 1 device"),
        ({"end_offset": timedelta(hours=-1)}, "ends_at", "must end after it starts"),
        ({"start_ago": timedelta(days=1)}, "starts_at", "starts in the past"),
        ({"end_offset": timedelta(minutes=10)}, "ends_at", "at least 30 minutes"),
        ({"end_offset": timedelta(hours=100)}, "ends_at", "at most 72 hours (this one 100)"),
        ({"purpose": "  "}, "purpose", "Say what it is for"),
        ({"purpose": "x" * 201}, "purpose", "At most 200 characters"),
    ],
)
def test_bad_input_names_the_field_and_records_nothing(world, changes, field, text):
    # A start in the past is a day before now, whatever the weekday (at() is in next week: 4 to 10 days ahead).
    start = timezone.now() - changes.pop("start_ago") if "start_ago" in changes else at(3, 9)
    end = start + changes.pop("end_offset", timedelta(hours=8))
    with pytest.raises(ValidationFailed) as caught:
        ask(world, start=start, end=end, **changes)
    assert field in caught.value.errors
    assert any(text in message for message in caught.value.errors[field])
    assert not Reservation.objects.exists()


def test_more_than_the_healthy_capacity_is_refused_at_once_with_the_reason(world):
    assert healthy_capacity(cluster=world.pool.cluster, flavor=world.pool.flavor, resource_name="nvidia.com/gpu") == 16
    row = ask(world, count=20)
    assert row.state == Reservation.State.REFUSED
    assert row.decision == Reservation.Decision.RULES
    assert row.reasons == [
        "20 H100 GPUs are more than the healthy capacity of that hardware: cluster sim has 16 H100 GPUs that can run "
        "jobs."
    ]


def test_unhealthy_and_cordoned_devices_do_not_count_as_capacity(world):
    first, second = world.pool.nodes[0], world.pool.nodes[1]
    first.devices.update(health=HealthState.UNHEALTHY)
    second.unschedulable = True
    second.save()
    assert healthy_capacity(cluster=world.pool.cluster, flavor=world.pool.flavor, resource_name="nvidia.com/gpu") == 8
    row = ask(world, count=10)
    assert row.state == Reservation.State.REFUSED
    assert "cluster sim has 8 H100 GPUs that can run jobs" in row.reasons[0]


def test_overlapping_reservations_that_together_exceed_the_capacity_are_refused(world):
    earlier = approved(world, team=world.vision, count=8, start=at(3, 9), end=at(3, 12), by=world.carol)
    row = ask(world, count=12, start=at(3, 11), end=at(3, 13))
    assert row.state == Reservation.State.REFUSED
    (reason,) = row.reasons
    assert reason.startswith(f"Together with #{earlier.pk} (Vision, 8 H100 GPUs, ")
    assert "20 H100 GPUs would be reserved from " in reason
    assert " 11:00 to 12:00 " in reason
    assert "more than the 16 H100 GPUs of cluster sim that can run jobs" in reason
    # right after it, it is within the rules (an admin decides 12, more than the automatic 8); 8 fit beside it
    assert ask(world, count=12, start=at(3, 12), end=at(3, 14)).state == Reservation.State.REQUESTED
    assert ask(world, count=8, start=at(3, 11), end=at(3, 12)).state == Reservation.State.APPROVED


def test_a_cancelled_or_refused_reservation_no_longer_holds_capacity(world):
    earlier = approved(world, team=world.vision, count=12, start=at(3, 9), end=at(3, 12), by=world.carol)
    assert ask(world, count=8, start=at(3, 10), end=at(3, 11)).state == Reservation.State.REFUSED
    reservation_cancel(reservation=earlier, user=world.carol)
    assert ask(world, count=8, start=at(3, 10), end=at(3, 11)).state == Reservation.State.APPROVED


def test_the_cohort_cannot_give_more_quota_than_it_holds(world):
    # vision 12 + cohort 8 may give 20 to speech; the 16 healthy GPUs allow 16: ask 16 with vision's 8 in force
    TeamQuota.objects.filter(team=world.vision).first().lines.update(nominal="2")
    row = ask(world, count=12)
    assert row.state == Reservation.State.REFUSED
    (reason,) = row.reasons
    assert "The rest of cohort org's teams cannot give 12 H100 GPUs of their quota" in reason
    assert "only 10 can move to Speech" in reason
    assert "No capacity is invented" in reason


def test_a_team_without_cohort_or_quota_line_is_refused_with_what_to_do(world):
    quota = TeamQuota.objects.get(team=world.speech)
    quota.cohort = None
    quota.save()
    assert "is in no cohort: no other team's quota can move to it" in ask(world).reasons[0]
    quota.cohort = world.org
    quota.save()
    other = ResourceFlavorFactory(name="h100-b", display_name="H100 B")
    rc = ResourceClassFactory(slug="h100-b", flavors=[other])
    quota.lines.create(flavor=world.pool.flavor, resource_name="nvidia.com/mig-1g.10gb", nominal="1")
    with pytest.raises(ValidationFailed, match="Speech has no quota for class h100-b"):
        reservation_request(
            team=world.speech,
            user=world.frank,
            resource_class=rc,
            count=1,
            starts_at=at(3, 9),
            ends_at=at(3, 10),
            purpose="x",
        )


def test_the_weekly_limit_counts_the_teams_live_reservations_of_each_week(world):
    policy = ReservationPolicy.objects.get()
    policy.max_hours_per_week = 10
    policy.save()
    ask(world, count=2, start=at(1, 9), end=at(1, 17))  # 8 h on Tuesday
    row = ask(world, count=2, start=at(3, 9), end=at(3, 13))  # 4 more that week
    assert row.state == Reservation.State.REFUSED
    assert row.reasons == [
        f"Speech would have 12 h of reservations in the week of {at(0, 0):%a} {at(0, 0).day} {at(0, 0):%b}: a team "
        "may reserve at most 10 h a week."
    ]
    # a window across the week's end counts in each week what falls in it
    across = ask(world, count=2, start=at(6, 22), end=at(7, 6))
    assert across.state == Reservation.State.APPROVED
    assert [h for _, h in week_hours(_request_of(across))] == [10.0, 6.0]


def _request_of(row):
    from queues.reservations.rules import Request

    return Request.of(row)


def test_how_far_ahead_is_limited(world):
    policy = ReservationPolicy.objects.get()
    policy.max_days_ahead = 30
    policy.save()
    start = timezone.now() + timedelta(days=40)
    row = ask(world, start=start, end=start + timedelta(hours=2))
    assert row.state == Reservation.State.REFUSED
    assert row.reasons == ["The window starts 39 days ahead: reservations may start at most 30 days ahead."]


def test_beyond_the_automatic_limits_an_admin_decides(world):
    row = ask(world, count=12)
    assert row.state == Reservation.State.REQUESTED
    assert row.reasons == ["12 H100 GPUs are more than the 8 approved automatically."]
    with pytest.raises(ReservationForbidden):
        reservation_approve(reservation=row, user=world.frank)
    done = reservation_approve(reservation=row, user=world.admin, note="release week")
    assert (done.state, done.decision, done.decided_by, done.decision_note) == (
        Reservation.State.APPROVED,
        Reservation.Decision.ADMIN,
        world.admin,
        "release week",
    )
    with pytest.raises(Conflict, match="only a waiting one can be approved"):
        reservation_approve(reservation=done, user=world.admin)


def test_the_rules_are_checked_again_when_an_admin_approves(world):
    waiting = ask(world, count=12)
    approved(world, team=world.vision, count=8, start=at(3, 10), end=at(3, 11), by=world.carol)
    with pytest.raises(Conflict, match="20 H100 GPUs would be reserved"):
        reservation_approve(reservation=waiting, user=world.admin)
    assert Reservation.objects.get(pk=waiting.pk).state == Reservation.State.REQUESTED
    with pytest.raises(ValidationFailed, match="Say why"):
        reservation_refuse(reservation=waiting, user=world.admin, note=" ")
    refused = reservation_refuse(reservation=waiting, user=world.admin, note="clashes with the release run")
    assert refused.state == Reservation.State.REFUSED
    assert refused.reasons[-1] == "Refused by an admin: clashes with the release run"


def test_automatic_approval_switched_off_leaves_every_request_to_an_admin(world):
    policy = ReservationPolicy.objects.get()
    policy.auto_approve = False
    policy.save()
    row = ask(world, count=1)
    assert row.state == Reservation.State.REQUESTED
    assert row.reasons == ["Automatic approval is off: an admin decides every reservation."]


def test_cancel_by_who_may_and_not_after_the_window(world):
    row = ask(world)
    with pytest.raises(ReservationForbidden):
        reservation_cancel(reservation=row, user=world.pool.user)
    done = reservation_cancel(reservation=row, user=world.frank)
    assert (done.state, done.cancelled_by) == (Reservation.State.CANCELLED, world.frank)
    with pytest.raises(Conflict, match="nothing to cancel"):
        reservation_cancel(reservation=done, user=world.admin)
    past = approved(world, start=timezone.now() - timedelta(hours=3), end=timezone.now() - timedelta(hours=1))
    with pytest.raises(Conflict, match="window is over"):
        reservation_cancel(reservation=past, user=world.admin)


def test_the_first_flavor_of_the_class_that_passes_the_rules_is_chosen(world):
    second = ResourceFlavorFactory(name="h100-b", display_name="H100 B")
    world.pool.rc.flavor_links.create(flavor=second, order=1)
    quota = TeamQuota.objects.get(team=world.speech)
    quota.lines.create(flavor=second, resource_name="nvidia.com/gpu", nominal="0")
    from tests.factories import DeviceFactory, NodeFactory

    node = NodeFactory(cluster=world.pool.cluster, flavor=second, name="b-n0")
    for index in range(8):
        DeviceFactory(node=node, index=index)
    TeamQuota.objects.get(team=world.vision).lines.create(flavor=second, resource_name="nvidia.com/gpu", nominal="8")
    approved(world, team=world.vision, count=16, start=at(3, 9), end=at(3, 17), by=world.carol)
    row = ask(world, count=4)
    assert row.state == Reservation.State.APPROVED
    assert row.flavor == second
