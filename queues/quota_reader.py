"""queues' side of :mod:`pools.ports`: the teams' quota lines the pool and health pages show beside capacity."""

from __future__ import annotations

from collections.abc import Sequence

from pools.models import Cluster
from pools.ports import QuotaShare
from queues.models import QuotaLine


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
