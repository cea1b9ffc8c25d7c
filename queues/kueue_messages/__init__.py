"""Kueue's own words → the portal's wait-reason codes, with the numbers parsed out of them.

Kueue explains a pending or evicted Workload in its condition messages (catalogue:
``tests/fixtures/reference/kueue/messages.yaml``, 52 entries, and ``format_strings.yaml``, one instance per
format string Kueue writes, v0.9 to main). This module recognises every one of them, parses their figures
(missing quota, maximum capacity, pods that fit, excluded nodes…) and turns them into one code of the closed set
of DESIGN.md, combined with what the portal knows of the pool (quota use of the team's ClusterQueue and its
cohort, free and health-excluded devices) where the message alone cannot decide:

* ``insufficient unused quota`` → ``quota_exhausted`` (the team is over its nominal quota and cannot borrow),
  ``borrow_limit`` (the cohort has idle quota but the team's borrowing limit is reached), ``class_exhausted``
  (the whole cohort's quota of that flavor is in use), ``quota_lent_out`` (the team is within its own quota and
  queues of its cohort that borrowed hold the rest: who holds how much, and the queue's reclaim policy) or
  ``higher_priority_ahead`` (the team is within its own quota: capacity it is owed is held by others ahead of it);
* TAS placement failures → ``health_blocked`` (health-excluded nodes hold the missing room),
  ``topology_fragmented`` (enough free devices in total, not together) or ``class_exhausted`` (not enough free);
* an admitted workload whose pods the kube-scheduler cannot place → the same three, from the scheduler's message.

Text that matches nothing yields the code :data:`UNRECOGNISED` with the raw message — never silence, and never a
code of the closed set: the sync stores it on the job as ``wait_reason=""`` with the raw text in ``wait_message``
and ``{"unrecognised": true}`` in the details. The reason (granular or legacy ``Pending``/``Inadmissible``/
``Waiting``) is a hint only, kept in the details.

Pure Python: no Django, no ``kubernetes``; the explain command and the sync services share it.

The package, by responsibility: :mod:`.codes` (``unrecognised`` and what condition reasons hint at; the closed
set of codes itself is :mod:`queues.engine.wait_codes`), :mod:`.context` (the pool view and the result types),
:mod:`.patterns` (Kueue's wordings), :mod:`.flavors` (one per-flavor reason → its code, with the pool view),
:mod:`.sentences` (whole messages), :mod:`.translate` (the entry points) and :mod:`.verdict` (a whole Workload).
Importers use the names below.
"""

from queues.engine.model import HEALTH_TAINT_KEYS
from queues.engine.wait_codes import (
    AWAITING_PROVISIONING,
    BORROW_LIMIT,
    CLASS_EXHAUSTED,
    CLUSTER_UNREACHABLE,
    EXCEEDS_MAXIMUM,
    HEALTH_BLOCKED,
    HIGHER_PRIORITY_AHEAD,
    MISCONFIGURED,
    NEVER_FITS,
    NO_MATCHING_FLAVOR,
    PREEMPTION_IN_PROGRESS,
    QUOTA_EXHAUSTED,
    QUOTA_LENT_OUT,
    TOPOLOGY_FRAGMENTED,
    WAIT_CODES,
)

from .codes import REASON_HINTS, UNRECOGNISED, reason_hint
from .context import FlavorReason, HealthNode, MessageContext, PoolFigures, QuotaFigures, Translation
from .patterns import FLAVOR_PATTERNS, WHOLE_PATTERNS
from .translate import pods_unschedulable, translate
from .verdict import Verdict, conditions_of, workload_verdict

__all__ = [
    "AWAITING_PROVISIONING",
    "BORROW_LIMIT",
    "CLASS_EXHAUSTED",
    "CLUSTER_UNREACHABLE",
    "EXCEEDS_MAXIMUM",
    "FLAVOR_PATTERNS",
    "HEALTH_BLOCKED",
    "HEALTH_TAINT_KEYS",
    "HIGHER_PRIORITY_AHEAD",
    "MISCONFIGURED",
    "NEVER_FITS",
    "NO_MATCHING_FLAVOR",
    "PREEMPTION_IN_PROGRESS",
    "QUOTA_EXHAUSTED",
    "QUOTA_LENT_OUT",
    "REASON_HINTS",
    "TOPOLOGY_FRAGMENTED",
    "UNRECOGNISED",
    "WAIT_CODES",
    "WHOLE_PATTERNS",
    "FlavorReason",
    "HealthNode",
    "MessageContext",
    "PoolFigures",
    "QuotaFigures",
    "Translation",
    "Verdict",
    "conditions_of",
    "pods_unschedulable",
    "reason_hint",
    "translate",
    "workload_verdict",
]
