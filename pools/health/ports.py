"""What the health and repair workflow asks of the jobs above it, without importing them (dependency inversion).

pools decides which devices are unhealthy and where a repair ticket stands; the jobs on those devices belong to
queues, and only its services change them. The layer that composes the two (the cluster integration,
``clusters.repair``) registers its implementation when Django starts (``ClustersConfig.ready``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured

from pools.models import Cluster, Device, ResourceClass


@dataclass(frozen=True)
class ValidationJobRequest:
    """The burn-in job a repair ticket asks for: submitted in the platform validation team on the ticket's cluster."""

    cluster: Cluster
    team_slug: str
    user: User | None
    name: str
    image: str
    resource_class: ResourceClass
    devices_per_pod: int
    pod_count: int
    command: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    max_runtime_seconds: int | None = None
    sim_runtime_seconds: int | None = None
    sim_fails: bool = False


@dataclass(frozen=True)
class JobOutcome:
    """Where a (validation) job stands, as the repair workflow needs it."""

    job_id: int
    state: str
    ended: bool
    succeeded: bool
    finished_at: datetime | None
    last_message: str


class RepairJobsPort(Protocol):
    """The jobs side of health and repair, as pools sees it."""

    def jobs_protect(
        self, *, devices: Sequence[Device], reason: str, now: datetime, evict_without_checkpoint: bool
    ) -> list[int]:
        """Move running jobs off devices that turned unhealthy (checkpoint first where they can); returns their ids."""

    def jobs_drain(self, *, job_ids: Sequence[int], ticket_id: int, actor_label: str, now: datetime) -> list[int]:
        """Evict the given jobs to drain a repair ticket's devices; returns the ids of those evicted."""

    def validation_submit(self, *, request: ValidationJobRequest, now: datetime) -> int:
        """Submit a validation job through the normal job path; returns its id."""

    def validation_cancel(self, *, job_id: int, now: datetime, message: str) -> None:
        """Cancel a validation job that has not ended (and stop it in its cluster after commit)."""

    def job_outcomes(self, *, job_ids: Sequence[int]) -> Mapping[int, JobOutcome]:
        """The outcome of each job."""


_port: RepairJobsPort | None = None


def repair_jobs_port_register(port: RepairJobsPort) -> None:
    """Install the jobs side of health and repair (called once at start-up by the app that implements it)."""
    global _port
    _port = port


def repair_jobs_port() -> RepairJobsPort:
    """The registered implementation; a clear error when the app that provides it is not installed."""
    if _port is None:
        raise ImproperlyConfigured("no repair jobs integration registered: add 'clusters' to INSTALLED_APPS")
    return _port
