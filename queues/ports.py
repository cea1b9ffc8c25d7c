"""What queues asks of the cluster integration above it, without importing it (dependency inversion).

queues records jobs and policy changes; the cluster integration (the ``clusters`` app) makes the clusters follow.
It registers its implementation when Django starts (``ClustersConfig.ready``); queues calls it only after its
own transaction commits, so a slow or unreachable cluster never holds a request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Protocol

from django.core.exceptions import ImproperlyConfigured


@dataclass(frozen=True)
class PodLog:
    """The last lines one pod of a job wrote (``note`` says why there are none, e.g. a container never started)."""

    pod: str
    lines: list[str]
    node: str = ""
    note: str = ""


@dataclass(frozen=True)
class RunEvent:
    """One Kubernetes event about a job, its workload or its pods (``type`` is Normal or Warning)."""

    at: datetime | None
    type: str
    reason: str
    involved: str
    message: str
    count: int = 1


@dataclass(frozen=True)
class SentObjects:
    """The Kubernetes objects the portal creates for a job: its kind's top-level object, then its DRA claim templates.

    Built now from the job's record, the way submission builds them. ``simulated``: the job's cluster is simulated,
    nothing is sent there, and ``objects`` are what a Kubernetes cluster with the same classes would get.
    ``created``: the cluster acknowledged the top-level object (the job has its uid). ``error``: why none could be
    built (the job cannot be its kind's object; nothing was sent).
    """

    objects: list[dict]
    simulated: bool
    created: bool = False
    error: str = ""


class ClusterUnreachable(Exception):
    """The cluster did not answer a read (logs, events) in time; ``message`` says what failed."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ClusterPort(Protocol):
    """The cluster integration, as queues sees it."""

    def job_logs(self, *, job_id: int, tail_lines: int) -> list[PodLog]:
        """The last ``tail_lines`` lines of each of the job's pods, now (raises ClusterUnreachable)."""

    def job_events(self, *, job_id: int) -> list[RunEvent]:
        """The cluster's events about the job, oldest first, now (raises ClusterUnreachable)."""

    def job_sent_objects(self, *, job_id: int) -> SentObjects:
        """The objects the portal creates for the job on a Kubernetes cluster (or would, on a simulated one)."""

    def job_submitted(self, *, job_id: int) -> None:
        """A job was recorded as pending: hand it to its cluster's scheduler."""

    def job_cancelled(self, *, job_id: int) -> None:
        """A job was cancelled in the portal: stop it in its cluster."""

    def policy_push_requested(self, *, push_id: int) -> None:
        """A policy change was recorded for a cluster (a PolicyPush row): apply it there."""


_port: ClusterPort | None = None


def cluster_port_register(port: ClusterPort) -> None:
    """Install the cluster integration (called once at start-up by the app that implements it)."""
    global _port
    _port = port


def cluster_port() -> ClusterPort:
    """The registered cluster integration; a clear error when the app that provides it is not installed."""
    if _port is None:
        raise ImproperlyConfigured("no cluster integration registered: add 'clusters' to INSTALLED_APPS")
    return _port


# --------------------------------------------------------------------------- job cost (billing, above queues)


@dataclass(frozen=True)
class JobCost:
    """What metering recorded for one job: device-hours (all, and borrowed), cost per currency, up to when."""

    device_hours: Decimal
    borrowed_hours: Decimal
    cost: dict[str, Decimal]
    #: End of the latest metered interval (None: nothing metered yet).
    metered_until: datetime | None
    #: Whether some allocation is still open (the figures grow at each metering run).
    still_open: bool
    #: Device-hours per pod index (``Allocation.pod_index``: pods in ``queues.pod_sets`` order), for the pod sets.
    device_hours_by_pod: dict[int, Decimal] = field(default_factory=dict)


class JobCostPort(Protocol):
    """Billing, as the job page sees it."""

    def job_cost(self, *, job_id: int) -> JobCost:
        """Device-hours and cost of the job so far (running) or in all (finished)."""


_job_cost_port: JobCostPort | None = None


def job_cost_port_register(port: JobCostPort) -> None:
    """Install billing's implementation (``BillingConfig.ready``)."""
    global _job_cost_port
    _job_cost_port = port


def job_cost_port() -> JobCostPort | None:
    """The registered billing implementation, or None where billing is not installed (the page omits cost)."""
    return _job_cost_port


# --------------------------------------------------------------------------- job events (notifications, above queues)


class JobEventListener(Protocol):
    """Something above queues that wants to see each timeline event as it is written (lifecycle notifications)."""

    def job_event_recorded(self, *, event: JobEventLike) -> None:
        """Called inside the transaction that writes the event: what it records commits or rolls back with it."""


class JobEventLike(Protocol):
    """The parts of a ``queues.models.JobEvent`` a listener reads (the model itself is passed)."""

    pk: int
    job_id: int
    kind: str
    at: datetime
    message: str
    details: dict


_job_event_listener: JobEventListener | None = None


def job_event_listener_register(listener: JobEventListener | None) -> None:
    """Install the listener (``NotifyConfig.ready``); None removes it."""
    global _job_event_listener
    _job_event_listener = listener


def job_event_listener() -> JobEventListener | None:
    """The registered listener, or None (no notifications app installed)."""
    return _job_event_listener


# --------------------------------------------------------------------------- quota shortfalls (notifications, above)


class ShortfallListener(Protocol):
    """Something above queues that tells people when a group's guaranteed quota stops (or starts again) being backed
    by healthy capacity (queues.guarantees)."""

    def shortfall_changed(self, *, shortfall: ShortfallLike, change: str) -> None:
        """Called inside the transaction that records it; ``change`` is "opened", "changed" or "closed"."""


class ShortfallLike(Protocol):
    """The parts of a ``queues.models.QuotaShortfall`` a listener reads (the model itself is passed)."""

    pk: int
    cluster_id: int
    cohort_id: int | None
    resource_name: str
    policy: str
    guaranteed: int
    backed: int
    healthy: int
    reductions: list


_shortfall_listener: ShortfallListener | None = None


def shortfall_listener_register(listener: ShortfallListener | None) -> None:
    """Install the listener (``NotifyConfig.ready``); None removes it."""
    global _shortfall_listener
    _shortfall_listener = listener


def shortfall_listener() -> ShortfallListener | None:
    """The registered listener, or None (no notifications app installed)."""
    return _shortfall_listener
