"""What the translation yields besides the closed set (queues.engine.wait_codes): the "unrecognised" code, and the
code each condition reason hints at."""

from __future__ import annotations

from queues.engine.wait_codes import (
    AWAITING_PROVISIONING,
    EXCEEDS_MAXIMUM,
    HIGHER_PRIORITY_AHEAD,
    MISCONFIGURED,
    NO_MATCHING_FLAVOR,
    PREEMPTION_IN_PROGRESS,
    QUOTA_EXHAUSTED,
    TOPOLOGY_FRAGMENTED,
)

#: What a text that matches nothing yields: never a code of the closed set (``WAIT_CODES``).
UNRECOGNISED = "unrecognised"

#: Granular and legacy QuotaReserved=False reasons → the code they suggest (a hint only).
REASON_HINTS = {
    "NoMatchingFlavor": NO_MATCHING_FLAVOR,
    "ExceedsMaxQuota": EXCEEDS_MAXIMUM,
    "WaitingForQuota": QUOTA_EXHAUSTED,
    "TopologyPlacementFailed": TOPOLOGY_FRAGMENTED,
    "WaitingForPreemptedWorkloads": PREEMPTION_IN_PROGRESS,
    "WaitingForPodsReady": HIGHER_PRIORITY_AHEAD,
    "Misconfigured": MISCONFIGURED,
    "Suspended": MISCONFIGURED,
    "AdmissionGated": AWAITING_PROVISIONING,
    "Deactivated": MISCONFIGURED,
    "OnHold": MISCONFIGURED,
    "PendingEvaluation": HIGHER_PRIORITY_AHEAD,
    "Inadmissible": MISCONFIGURED,
    "Waiting": HIGHER_PRIORITY_AHEAD,
}


def reason_hint(reason: str) -> str:
    """The code a condition reason suggests ("" when unknown)."""
    return REASON_HINTS.get(reason, "")
