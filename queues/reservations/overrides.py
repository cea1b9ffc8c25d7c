"""The reservations in force on a cluster as changes to the Kueue objects the portal pushes there."""

from __future__ import annotations

from datetime import datetime, timedelta

from pools.models import Cluster
from queues.engine.reservations import in_force
from queues.engine_input import live_policy_rows, policy_state
from queues.reservations.holds import QuotaOverrides, cluster_holds, quota_overrides


def cluster_quota_overrides(*, cluster: Cluster, at: datetime) -> QuotaOverrides:
    """What the reservations in force on ``cluster`` at ``at`` change in its ClusterQueues and Cohorts (nothing, and
    no policy read, when none is in force)."""
    holds = cluster_holds(cluster=cluster, start=at, end=at + timedelta(seconds=1), now=at)
    if not in_force(holds, at.timestamp()):
        return QuotaOverrides()
    policy, _ = policy_state(live_policy_rows(cluster))
    return quota_overrides(policy=policy, holds=holds, at=at)
