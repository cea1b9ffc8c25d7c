"""The per-device health state machine: which moves are legal, and the error for the others."""

from __future__ import annotations

from kernel.errors import Conflict
from kernel.labels import state_words, states_words
from pools.models import HealthState

H = HealthState

#: Legal moves. A device leaves quarantine only through validation, and returns to the pool (healthy) only from
#: validating, i.e. after a passed burn-in job. Retired is final.
ALLOWED: dict[str, frozenset[str]] = {
    H.HEALTHY: frozenset({H.DEGRADED, H.UNHEALTHY}),
    H.DEGRADED: frozenset({H.HEALTHY, H.UNHEALTHY}),
    H.UNHEALTHY: frozenset({H.HEALTHY, H.DEGRADED, H.QUARANTINED, H.RETIRED}),
    H.QUARANTINED: frozenset({H.VALIDATING, H.RETIRED}),
    H.VALIDATING: frozenset({H.HEALTHY, H.QUARANTINED, H.RETIRED}),
    H.RETIRED: frozenset(),
}

_WHY = {
    (H.QUARANTINED, H.HEALTHY): "a quarantined device returns to the pool only after a validation job passes",
    (H.QUARANTINED, H.DEGRADED): "a quarantined device returns to the pool only after a validation job passes",
    (H.UNHEALTHY, H.VALIDATING): "a device is validated only after repair (its ticket must be in repair first)",
    (H.HEALTHY, H.VALIDATING): "only a quarantined device can be validated",
    (H.HEALTHY, H.QUARANTINED): "a device is quarantined through a repair ticket after it was marked unhealthy",
    (H.DEGRADED, H.QUARANTINED): "a device is quarantined through a repair ticket after it was marked unhealthy",
}


class IllegalHealthTransition(Conflict):
    """A health change the state machine does not allow."""

    def __init__(self, before: str, after: str, *, device: str = "") -> None:
        self.before = before
        self.after = after
        if before == H.RETIRED:
            why = "a retired device never comes back (a replacement card is a new device)"
        else:
            why = _WHY.get((before, after), "")
        allowed = states_words(H, sorted(ALLOWED.get(before, ()))) or "none"
        who = f"device {device}: " if device else ""
        was, to = state_words(H, before), state_words(H, after)
        text = f"{who}cannot go from {was} to {to}"
        super().__init__(f"{text}: {why} (allowed from {was}: {allowed})" if why else f"{text} (allowed: {allowed})")


def check_transition(before: str, after: str, *, device: str = "") -> None:
    """Raise IllegalHealthTransition unless ``before → after`` is a legal move (staying put is not a move)."""
    if after not in H.values:
        raise IllegalHealthTransition(before, after, device=device)
    if after not in ALLOWED.get(before, frozenset()):
        raise IllegalHealthTransition(before, after, device=device)
