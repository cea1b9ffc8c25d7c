"""The device health state machine: legal moves, clear refusals, nothing written on a refusal."""

from __future__ import annotations

import itertools

import pytest
from django.utils import timezone

from pools.health.services import Actor, device_health_set
from pools.health.state import ALLOWED, IllegalHealthTransition, check_transition
from pools.models import DeviceHealthTransition, HealthState
from tests.factories import DeviceFactory

H = HealthState


@pytest.mark.parametrize(
    ("before", "after", "text"),
    [
        (H.QUARANTINED, H.HEALTHY, "only after a validation job passes"),
        (H.HEALTHY, H.VALIDATING, "only a quarantined device can be validated"),
        (H.UNHEALTHY, H.VALIDATING, "ticket must be in repair first"),
        (H.RETIRED, H.HEALTHY, "never comes back"),
        (H.HEALTHY, H.QUARANTINED, "through a repair ticket"),
    ],
)
def test_check_transition_refuses_with_the_rule_named(before, after, text):
    with pytest.raises(IllegalHealthTransition) as exc:
        check_transition(before, after, device="n1/GPU-1")
    assert text in str(exc.value)
    assert "n1/GPU-1" in str(exc.value)
    assert exc.value.code == "conflict"


def test_the_documented_path_is_legal():
    path = [H.HEALTHY, H.DEGRADED, H.UNHEALTHY, H.QUARANTINED, H.VALIDATING, H.HEALTHY]
    for before, after in itertools.pairwise(path):
        check_transition(before, after)
    check_transition(H.VALIDATING, H.QUARANTINED)
    check_transition(H.VALIDATING, H.RETIRED)
    assert ALLOWED[H.RETIRED] == frozenset()


@pytest.mark.django_db
def test_device_health_set_records_evidence_and_refuses_illegal_moves():
    device = DeviceFactory(health=H.QUARANTINED)
    with pytest.raises(IllegalHealthTransition):
        device_health_set(device, to=H.HEALTHY, reason="looks fine", now=timezone.now(), actor=Actor())
    device.refresh_from_db()
    assert device.health == H.QUARANTINED
    assert not DeviceHealthTransition.objects.exists()
    t = device_health_set(
        device, to=H.VALIDATING, reason="burn-in", now=timezone.now(), actor=Actor(label="ops"), evidence={"job": 1}
    )
    assert (t.before, t.after, t.actor_label, t.evidence) == (H.QUARANTINED, H.VALIDATING, "ops", {"job": 1})
    device.refresh_from_db()
    assert device.health == H.VALIDATING
    assert device_health_set(device, to=H.VALIDATING, reason="burn-in", now=timezone.now(), actor=Actor()) is None
