"""The interface every cluster backend implements."""

from __future__ import annotations

from typing import Protocol

from pools.models import Cluster


class ClusterBackend(Protocol):
    """What the portal asks of a cluster. Calls are made after the portal's own transaction commits."""

    cluster: Cluster

    def job_submitted(self, *, job_id: int) -> None:
        """A job was recorded as pending: hand it to the cluster's scheduler."""

    def job_cancelled(self, *, job_id: int) -> None:
        """A job was cancelled in the portal: stop it in the cluster."""

    def sync(self) -> None:
        """Bring the portal's view of the cluster up to date (inventory, workloads, health)."""

    def health_apply(self) -> None:
        """Make the cluster keep new work off devices excluded for health (taints, cordons), and undo released ones."""
