"""The causes waiting is attributed to, and the one mapping of every wait code onto them.

A cause is what an operator can act on: several wait codes can share one (``higher_priority_ahead`` and
``preemption_in_progress`` both mean "someone of higher priority had it"), and a cause may have no code yet
(``reservation``: capacity reserved for another team). Pure Python, so the pages, the charts and the tests read it
without the database.
"""

from __future__ import annotations

from typing import Literal, get_args

from queues.engine import wait_codes as wc

Cause = Literal[
    "quota",
    "borrow_limit",
    "lent_out",
    "no_hardware",
    "class_full",
    "fragmentation",
    "health",
    "priority",
    "reservation",
    "provisioning",
    "configuration",
    "unknown",
]

#: Every cause, in the order the pages, the CSV and the charts list them.
CAUSES: tuple[Cause, ...] = get_args(Cause)

#: Each cause in a team lead's words (the legend of the chart, the columns of the table).
CAUSE_LABELS: dict[str, str] = {
    "quota": "own quota used up",
    "borrow_limit": "borrowing limit reached",
    "lent_out": "own quota lent out",
    "no_hardware": "no matching hardware",
    "class_full": "class full",
    "fragmentation": "fragmentation",
    "health": "unhealthy devices",
    "priority": "higher priority ahead",
    "reservation": "reserved for others",
    "provisioning": "waiting for provisioning",
    "configuration": "queue misconfigured",
    "unknown": "no reason recorded",
}

#: The chart's colour of each cause (colour-blind safe where it matters: quota, fragmentation, health apart).
CAUSE_COLOURS: dict[str, str] = {
    "quota": "#4e79a7",
    "borrow_limit": "#a0cbe8",
    "lent_out": "#f28e2b",
    "no_hardware": "#8c564b",
    "class_full": "#59a14f",
    "fragmentation": "#b07aa1",
    "health": "#e15759",
    "priority": "#edc948",
    "reservation": "#76b7b2",
    "provisioning": "#9c755f",
    "configuration": "#bab0ac",
    "unknown": "#d4d4d4",
}

#: Every wait code's cause. A code missing here is a test failure (``test_every_wait_code_has_a_cause`` in
#: ``tests/queues/test_wait_attribution.py``), so a new code cannot be added without saying where its waiting goes.
CAUSE_OF_CODE: dict[str, Cause] = {
    wc.QUOTA_EXHAUSTED: "quota",
    wc.QUOTA_LENT_OUT: "lent_out",
    wc.BORROW_LIMIT: "borrow_limit",
    wc.NO_MATCHING_FLAVOR: "no_hardware",
    wc.EXCEEDS_MAXIMUM: "no_hardware",
    wc.CLASS_EXHAUSTED: "class_full",
    wc.TOPOLOGY_FRAGMENTED: "fragmentation",
    wc.HEALTH_BLOCKED: "health",
    wc.HIGHER_PRIORITY_AHEAD: "priority",
    wc.PREEMPTION_IN_PROGRESS: "priority",
    wc.CAPACITY_RESERVED: "reservation",
    wc.AWAITING_PROVISIONING: "provisioning",
    wc.MISCONFIGURED: "configuration",
    wc.CLUSTER_UNREACHABLE: "unknown",
}

#: Causes whose waiting is about a kind of hardware: the summary names the class when one class dominates.
HARDWARE_CAUSES = frozenset({"no_hardware", "class_full", "fragmentation", "health"})


def cause_of(code: str) -> Cause:
    """The cause a wait code's time counts toward (``unknown`` for "" — no reason recorded — or a code the
    portal does not know, such as an unrecognised Kueue message)."""
    return CAUSE_OF_CODE.get(code, "unknown")


def cause_label(cause: str) -> str:
    """A cause in words ("own quota used up")."""
    return CAUSE_LABELS.get(cause, cause)
