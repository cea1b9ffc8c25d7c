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
