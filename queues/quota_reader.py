"""queues' side of :mod:`pools.ports`: the teams' quota lines the pool and health pages show beside capacity, and
the pending jobs per flavor and reason that the pool page weighs its free capacity against."""

from __future__ import annotations

from collections.abc import Sequence

from django.db.models import Count

from pools.models import Cluster
from pools.ports import QuotaShare, WaitingShare
from queues.models import Job, QuotaLine, WaitReason


def quota_shares(*, cluster: Cluster | None = None) -> list[QuotaShare]:
    """Every quota line of a team quota (on one cluster, or all), in one query."""
    lines = QuotaLine.objects.filter(team_quota__isnull=False)
    if cluster is not None:
        lines = lines.filter(team_quota__cluster=cluster)
    rows = lines.order_by("pk").values_list("flavor_id", "resource_name", "team_quota__team__slug", "nominal")
    return [QuotaShare(flavor_id=f, resource_name=r, team_slug=t, nominal=n) for f, r, t, n in rows]


class QueuesQuotaReader:
    """Implements :class:`pools.ports.QuotaReader` with :func:`quota_shares`."""

    def quota_shares(self, *, cluster: Cluster | None = None) -> Sequence[QuotaShare]:
        """The teams' quota lines."""
        return quota_shares(cluster=cluster)


#: Reasons that are about the team's quota, not the hardware: free devices do not start these jobs.
QUOTA_REASONS = frozenset({WaitReason.QUOTA_EXHAUSTED, WaitReason.QUOTA_LENT_OUT, WaitReason.BORROW_LIMIT})


def waiting_by_flavor(*, cluster: Cluster | None = None) -> list[WaitingShare]:
    """Pending jobs per flavor their class may land on and per wait reason, in one query."""
    rows = Job.objects.filter(state=Job.State.PENDING, resource_class__flavor_links__isnull=False)
    if cluster is not None:
        rows = rows.filter(cluster=cluster)
    counted = (
        rows.values("resource_class__flavor_links__flavor_id", "wait_reason")
        .annotate(n=Count("id", distinct=True))
        .order_by()
    )
    return [
        WaitingShare(
            flavor_id=r["resource_class__flavor_links__flavor_id"],
            code=r["wait_reason"],
            label=WaitReason(r["wait_reason"]).label if r["wait_reason"] in WaitReason.values else "first decision",
            jobs=r["n"],
            quota=r["wait_reason"] in QUOTA_REASONS,
        )
        for r in counted
    ]


class QueuesWaitingReader:
    """Implements :class:`pools.ports.WaitingReader` with :func:`waiting_by_flavor`."""

    def waiting_by_flavor(self, *, cluster: Cluster | None = None) -> Sequence[WaitingShare]:
        """Pending jobs per flavor and wait reason."""
        return waiting_by_flavor(cluster=cluster)
