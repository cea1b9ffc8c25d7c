"""The closed set of wait codes (DESIGN.md), defined once: the models' choices, the engine, the translation of
Kueue's messages and the templates all read it from here.

Pure Python, so the engine and the translation need no Django.
"""

from __future__ import annotations

from typing import Literal, get_args

#: Why a pending job waits; the only spelling of each code.
WaitCode = Literal[
    "quota_exhausted",
    "quota_lent_out",
    "borrow_limit",
    "no_matching_flavor",
    "class_exhausted",
    "topology_fragmented",
    "health_blocked",
    "capacity_reserved",
    "higher_priority_ahead",
    "awaiting_provisioning",
    "preemption_in_progress",
    "exceeds_maximum",
    "misconfigured",
    "cluster_unreachable",
]

#: Every code, in the order the pages list them.
WAIT_CODES: tuple[WaitCode, ...] = get_args(WaitCode)

(
    QUOTA_EXHAUSTED,
    QUOTA_LENT_OUT,
    BORROW_LIMIT,
    NO_MATCHING_FLAVOR,
    CLASS_EXHAUSTED,
    TOPOLOGY_FRAGMENTED,
    HEALTH_BLOCKED,
    CAPACITY_RESERVED,
    HIGHER_PRIORITY_AHEAD,
    AWAITING_PROVISIONING,
    PREEMPTION_IN_PROGRESS,
    EXCEEDS_MAXIMUM,
    MISCONFIGURED,
    CLUSTER_UNREACHABLE,
) = WAIT_CODES

#: Each code in the user's words (the label of the models' choices).
WAIT_CODE_LABELS: dict[str, str] = {
    QUOTA_EXHAUSTED: "Team quota used up",
    QUOTA_LENT_OUT: "Team quota lent to other teams",
    BORROW_LIMIT: "Borrowing limit reached",
    NO_MATCHING_FLAVOR: "No matching hardware",
    CLASS_EXHAUSTED: "Every device of this class is in use",
    TOPOLOGY_FRAGMENTED: "Enough devices, but fragmented",
    HEALTH_BLOCKED: "Capacity blocked by unhealthy devices",
    CAPACITY_RESERVED: "Capacity reserved for another team",
    HIGHER_PRIORITY_AHEAD: "A higher-priority job is ahead",
    AWAITING_PROVISIONING: "Waiting for provisioning",
    PREEMPTION_IN_PROGRESS: "Preemption under way",
    EXCEEDS_MAXIMUM: "Can never fit as configured",
    MISCONFIGURED: "Queue misconfigured",
    CLUSTER_UNREACHABLE: "Cluster unreachable",
}

#: The codes that say "waiting alone never starts this job" (an error to fix, not a wait), most serious first
#: (Kueue's own severity order; the engine checks them first, in this order).
NEVER_FITS_ORDER: tuple[WaitCode, ...] = (MISCONFIGURED, EXCEEDS_MAXIMUM, NO_MATCHING_FLAVOR)
NEVER_FITS: frozenset[str] = frozenset(NEVER_FITS_ORDER)


def never_fits(code: str) -> bool:
    """Whether a wait code means the job can never start as it is (the pages show it as an error)."""
    return code in NEVER_FITS
