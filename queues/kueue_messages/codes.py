"""The wait codes the translation yields, the order it weighs them in, and what condition reasons hint at."""

from __future__ import annotations

UNRECOGNISED = "unrecognised"

# Codes of the closed set (queues.models.WaitReason), repeated here so the module needs no Django.
QUOTA_EXHAUSTED = "quota_exhausted"
BORROW_LIMIT = "borrow_limit"
NO_MATCHING_FLAVOR = "no_matching_flavor"
CLASS_EXHAUSTED = "class_exhausted"
TOPOLOGY_FRAGMENTED = "topology_fragmented"
HEALTH_BLOCKED = "health_blocked"
HIGHER_PRIORITY_AHEAD = "higher_priority_ahead"
AWAITING_PROVISIONING = "awaiting_provisioning"
PREEMPTION_IN_PROGRESS = "preemption_in_progress"
EXCEEDS_MAXIMUM = "exceeds_maximum"
MISCONFIGURED = "misconfigured"
CLUSTER_UNREACHABLE = "cluster_unreachable"
WAIT_CODES = (
    QUOTA_EXHAUSTED,
    BORROW_LIMIT,
    NO_MATCHING_FLAVOR,
    CLASS_EXHAUSTED,
    TOPOLOGY_FRAGMENTED,
    HEALTH_BLOCKED,
    HIGHER_PRIORITY_AHEAD,
    AWAITING_PROVISIONING,
    PREEMPTION_IN_PROGRESS,
    EXCEEDS_MAXIMUM,
    MISCONFIGURED,
    CLUSTER_UNREACHABLE,
)
#: Codes that say "waiting will help" — a flavor with one of these wins over flavors that can never fit.
WAITABLE = (
    QUOTA_EXHAUSTED,
    BORROW_LIMIT,
    CLASS_EXHAUSTED,
    TOPOLOGY_FRAGMENTED,
    HEALTH_BLOCKED,
    HIGHER_PRIORITY_AHEAD,
    PREEMPTION_IN_PROGRESS,
)
#: How serious a never-fits code is when no flavor can wait (Kueue's own severity order).
NEVER_ORDER = (MISCONFIGURED, EXCEEDS_MAXIMUM, NO_MATCHING_FLAVOR)

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


# --- the pool view ----------------------------------------------------------------------------------------------


def reason_hint(reason: str) -> str:
    """The code a condition reason suggests ("" when unknown)."""
    return REASON_HINTS.get(reason, "")
