"""Billing's checks in the cluster reconciler's report (registered in BillingConfig.ready)."""

from __future__ import annotations

from billing.models import UsageRecord
from clusters.kube_sync.checks import Finding
from pools.models import Cluster


def usage_open_after_end(cluster: Cluster) -> list[Finding]:
    """Metering records still open for allocations that ended (billing closes them on its next run)."""
    n = UsageRecord.objects.filter(job__cluster=cluster, open=True, allocation__ended_at__isnull=False).count()
    if not n:
        return []
    return [
        Finding(
            "usage_open_after_end",
            f"{n} usage record(s) still open for allocations that ended; the next metering run closes them at the "
            "allocations' end",
        )
    ]
