"""The closed set of lifecycle notifications, and which timeline events of a job become which (pure: no I/O)."""

from __future__ import annotations

from collections.abc import Mapping

from django.db import models

from queues.idle import IDLE_REASON


class Kind(models.TextChoices):
    """What a notification is about; a user's preferences switch each on or off."""

    ADMITTED = "admitted", "Job admitted or started"
    FIRST_IN_LINE = "first_in_line", "Job is first in line"
    RECLAIM = "reclaim", "Borrowed GPUs will be reclaimed: checkpoint now"
    PREEMPTED = "preempted", "Job preempted or evicted (and work lost)"
    HEALTH = "health", "Job moved off a failing GPU"
    FINISHED = "finished", "Job finished"
    FAILED = "failed", "Job failed or timed out"
    IDLE = "idle", "Job's GPUs are idle"
    BUDGET = "budget", "Team budget threshold reached"
    RESERVATION_UNUSED = "reservation_unused", "Team reservation went unused (charged)"
    SHORTFALL = "shortfall", "Guaranteed quota not backed by healthy GPUs (repairs)"
    TEST = "test", "Test message (asked for on the notifications page)"


#: The kinds a user may switch on or off (a test message they asked for is always sent).
CHOOSABLE = [(k.value, k.label) for k in Kind if k != Kind.TEST]


#: Kueue's preemption reasons that take back capacity a queue borrowed from its cohort.
RECLAIM_REASONS = frozenset({"InCohortReclamation", "InCohortReclaimWhileBorrowing", "InCohortFairSharing"})
#: ``details["reason"]`` of the timeline events health and repair write when they move a job off hardware.
HEALTH_REASONS = frozenset({"device_unhealthy", "repair_drain"})

_BY_EVENT = {
    "admitted": Kind.ADMITTED,
    "started": Kind.ADMITTED,
    "resumed": Kind.ADMITTED,
    "evicted": Kind.PREEMPTED,
    "succeeded": Kind.FINISHED,
    "cancelled": Kind.FINISHED,
    "failed": Kind.FAILED,
    "timed_out": Kind.FAILED,
}


#: The idle-GPU negotiation's steps (queues.idle) its owner is told about.
IDLE_STEPS = frozenset({"warning", "checkpoint"})


def kind_for_event(*, event_kind: str, details: Mapping, borrowing: bool) -> str | None:
    """The notification a job timeline event calls for, or None (most events, e.g. wait-reason changes).

    ``borrowing`` is whether the job held capacity borrowed from its cohort when the event was written.
    """
    reason = (details or {}).get("reason", "")
    if reason == IDLE_REASON:
        return Kind.IDLE if (details or {}).get("step") in IDLE_STEPS else None
    if reason in HEALTH_REASONS and event_kind in ("preempted", "note"):
        return Kind.HEALTH
    if event_kind == "preempted":
        return Kind.RECLAIM if borrowing and reason in RECLAIM_REASONS else Kind.PREEMPTED
    if event_kind == "requeued":
        # the work lost is known only when the job is back in the queue
        return Kind.PREEMPTED if (details or {}).get("lostDeviceHours") else None
    return _BY_EVENT.get(event_kind)
