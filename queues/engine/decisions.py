"""Output dataclasses of the admission engine: admissions, preemptions and wait reasons."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from .model import ResourceList
from .wait_codes import (
    AWAITING_PROVISIONING,
    BORROW_LIMIT,
    CAPACITY_RESERVED,
    CLASS_EXHAUSTED,
    HEALTH_BLOCKED,
    HIGHER_PRIORITY_AHEAD,
    NEVER_FITS_ORDER,
    PREEMPTION_IN_PROGRESS,
    QUOTA_EXHAUSTED,
    QUOTA_LENT_OUT,
    TOPOLOGY_FRAGMENTED,
    WaitCode,
)

#: The codes the engine decides, in the order it checks them (the first that applies is the primary reason);
#: ``cluster_unreachable`` is the sync's, never the engine's.
WAIT_CODE_ORDER: tuple[WaitCode, ...] = (
    *NEVER_FITS_ORDER,
    PREEMPTION_IN_PROGRESS,
    AWAITING_PROVISIONING,
    CAPACITY_RESERVED,
    BORROW_LIMIT,
    QUOTA_LENT_OUT,
    QUOTA_EXHAUSTED,
    HIGHER_PRIORITY_AHEAD,
    HEALTH_BLOCKED,
    TOPOLOGY_FRAGMENTED,
    CLASS_EXHAUSTED,
)

PreemptionReason = Literal[
    "InClusterQueue", "InCohortReclamation", "InCohortReclaimWhileBorrowing", "InCohortFairSharing"
]
QueueStopReason = Literal["ClusterQueueStopped", "LocalQueueStopped"]

#: Evicted reasons of a stopPolicy (the workload waits for its queue to restart, Requeued=False).
QUEUE_STOP_REASONS: frozenset[str] = frozenset({"ClusterQueueStopped", "LocalQueueStopped"})


@dataclass(frozen=True, slots=True)
class PodSetAssignment:
    """A pod set's admission: flavor per resource, total usage, and one node name per pod (empty without nodes)."""

    name: str
    count: int
    flavors: Mapping[str, str]
    usage: ResourceList
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AdmissionDecision:
    """A quota reservation made in a cycle; ``pending_checks`` non-empty = reserved, awaiting admission checks."""

    workload: str
    cluster_queue: str
    pod_sets: tuple[PodSetAssignment, ...]
    borrowing: bool
    pending_checks: tuple[str, ...] = ()
    message: str = ""

    @property
    def admitted(self) -> bool:
        """True when the workload is admitted now (no admission check left to pass)."""
        return not self.pending_checks


@dataclass(frozen=True, slots=True)
class Preemption:
    """An eviction issued to make room: the victim, the preemptor, Kueue's reason and exact message."""

    victim: str
    preemptor: str
    reason: PreemptionReason
    message: str
    victim_cluster_queue: str
    preemptor_cluster_queue: str


@dataclass(frozen=True, slots=True)
class QueueStopEviction:
    """A workload whose queue's ``stopPolicy`` takes its quota back (Kueue's workload controller, not a cycle).

    ``admitted`` True: it was admitted and its LocalQueue or ClusterQueue is ``HoldAndDrain``; Kueue sets
    Evicted=True with ``reason`` and ``message`` ("The ClusterQueue is stopped") and the workload keeps its quota
    until its pods are gone. False: it only had quota reserved (admission checks pending) and its queue has any
    stopPolicy; Kueue releases the reservation at once (QuotaReserved=False, "ClusterQueue X is stopped").
    """

    workload: str
    cluster_queue: str
    reason: QueueStopReason
    message: str
    admitted: bool = True


@dataclass(frozen=True, slots=True)
class WaitReason:
    """Why a workload is pending: one primary code, a plain sentence, Kueue's own text and the numbers.

    ``kueue_message`` is the QuotaReserved=False message Kueue would write ("" where Kueue writes none,
    e.g. behind a StrictFIFO head, or when only the portal's node placement blocks it);
    ``kueue_reason`` is the granular condition reason (WaitingForQuota, NoMatchingFlavor, ...).
    """

    code: WaitCode
    message: str
    kueue_message: str
    kueue_reason: str = ""
    details: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CycleResult:
    """The outcome of one scheduling cycle; ``evictions`` are the stop-policy evictions made just before it."""

    now: float
    admitted: tuple[AdmissionDecision, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    pending: Mapping[str, WaitReason] = field(default_factory=dict)
    evictions: tuple[QueueStopEviction, ...] = ()


@dataclass(frozen=True, slots=True)
class Explanation:
    """The engine's verdict on one workload: admissible now (with its assignment) or why not."""

    workload: str
    admissible: bool
    reason: WaitReason | None = None
    assignment: AdmissionDecision | None = None
    preemption_targets: tuple[str, ...] = ()
