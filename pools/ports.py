"""What the resource truth shows of the quotas above it, without importing them (dependency inversion).

The pool and health pages show, next to each flavor's capacity, the teams holding quota on it and how much. The
quotas belong to queues, which registers its reader when Django starts (``QueuesConfig.ready``). Without it
pools shows no teams.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pools.models import Cluster


@dataclass(frozen=True)
class QuotaShare:
    """One team's quota line on a (flavor, resource): its nominal quota as written (a Kubernetes quantity)."""

    flavor_id: int | None
    resource_name: str
    team_slug: str
    nominal: str


class QuotaReader(Protocol):
    """The quotas, as pools sees them."""

    def quota_shares(self, *, cluster: Cluster | None = None) -> Sequence[QuotaShare]:
        """Every quota line of the teams' quotas (on one cluster, or all)."""


class _NoQuotas:
    """No quota app installed: no team holds quota anywhere."""

    def quota_shares(self, *, cluster: Cluster | None = None) -> Sequence[QuotaShare]:
        """None."""
        return []


_reader: QuotaReader = _NoQuotas()


def quota_reader_register(reader: QuotaReader) -> None:
    """Install the quota reader (called once at start-up by the app that owns the quotas)."""
    global _reader
    _reader = reader


def quota_reader() -> QuotaReader:
    """The registered quota reader (one that knows no quota when none is registered)."""
    return _reader


# --------------------------------------------------------------------------- whose job names a viewer reads


class JobVisibility(Protocol):
    """Which teams' job names a viewer of the pool page may read (the rule is queues', in queues.privacy)."""

    def job_teams_seen_by(self, user) -> frozenset[str] | None:
        """Slugs of the teams whose job names ``user`` may read; ``None``: every team's."""


class _NoJobNames:
    """No queues app installed: nobody reads job names, only teams."""

    def job_teams_seen_by(self, user) -> frozenset[str] | None:
        """No team."""
        return frozenset()


_visibility: JobVisibility = _NoJobNames()


def job_visibility_register(visibility: JobVisibility) -> None:
    """Install the job-visibility rule (called once at start-up by the app that owns the teams)."""
    global _visibility
    _visibility = visibility


def job_visibility() -> JobVisibility:
    """The registered job-visibility rule (one that shows no job names when none is registered)."""
    return _visibility


# --------------------------------------------------------------------------- who waits for a flavor, and why


@dataclass(frozen=True)
class WaitingShare:
    """Pending jobs that could land on a flavor, with one wait reason: how many, the code and its label."""

    flavor_id: int
    code: str
    label: str
    jobs: int
    #: a quota reason (the team's quota, its borrowing limit, quota lent out): free devices do not start them
    quota: bool = False


class WaitingReader(Protocol):
    """The pending jobs, as pools sees them: to say what free capacity does (and does not) help."""

    def waiting_by_flavor(self, *, cluster: Cluster | None = None) -> Sequence[WaitingShare]:
        """Pending jobs per flavor their class may use and per wait reason (on one cluster, or all)."""


class _NoWaiting:
    """No queues app installed: nobody waits."""

    def waiting_by_flavor(self, *, cluster: Cluster | None = None) -> Sequence[WaitingShare]:
        """None."""
        return []


_waiting: WaitingReader = _NoWaiting()


def waiting_reader_register(reader: WaitingReader) -> None:
    """Install the waiting-jobs reader (called once at start-up by the app that owns the jobs)."""
    global _waiting
    _waiting = reader


def waiting_reader() -> WaitingReader:
    """The registered waiting-jobs reader (one that knows no waiting job when none is registered)."""
    return _waiting
