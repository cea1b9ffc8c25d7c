"""Quota history: the nominal quota (and lending limit) each team had, and when, for idle reserved hours.

Beside the nominal, each period records how much of it healthy devices backed (``backed``: GPUs in repair leave a
guarantee unbacked, queues.guarantees): a team is charged for the reservation that was backed, not for the rest.

Quotas are edited by admins in ``queues``; billing records what it sees on each metering run as
``QuotaPeriod`` rows (a change closes the old period and opens a new one at that run), so a day rolled up
later still uses the nominal that was in force during it. The resolution is the metering interval (5 min).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import Min, Q

from billing.models import QuotaPeriod
from billing.services.common import require_aware
from kernel.quantity import is_device_resource, parse_decimal
from pools.models import Allocation, Cluster
from queues.guarantees.selectors import applied_line_values, cluster_guarantees
from queues.models import QuotaLine

#: Decimal places of a recorded nominal (``QuotaPeriod.nominal``).
PLACES = Decimal("0.001")


@dataclass
class QuotaHistoryReport:
    """What one history sync changed."""

    opened: int = 0
    closed: int = 0


def _backed_by_line() -> dict[int, int]:
    """Per team quota line, how much of its nominal healthy devices back now, where that is not all of it
    (queues.guarantees: GPUs in repair): the reservation a team is charged for."""
    out: dict[int, int] = {}
    cluster_ids = QuotaLine.objects.filter(team_quota__isnull=False).values_list("team_quota__cluster_id", flat=True)
    for cluster in Cluster.objects.filter(pk__in=set(cluster_ids)).order_by("pk"):
        values = applied_line_values(cluster_guarantees(cluster))
        out.update({pk: backed for pk, (base, _applied, backed) in values.items() if backed < base})
    return out


def current_quotas() -> dict[tuple[int, int, int, str], tuple[Decimal, Decimal | None, Decimal | None]]:
    """(nominal, lending limit or None, backed or None: all of it) per (team, cluster, flavor, device resource) from
    the live quota lines and the healthy capacity behind them."""
    out: dict[tuple[int, int, int, str], tuple[Decimal, Decimal | None, Decimal | None]] = {}
    backed = _backed_by_line()
    lines = QuotaLine.objects.filter(team_quota__isnull=False).values_list(
        "pk", "team_quota__team_id", "team_quota__cluster_id", "flavor_id", "resource_name", "nominal", "lending_limit"
    )
    for pk, team_id, cluster_id, flavor_id, resource_name, nominal, lending in lines:
        if not is_device_resource(resource_name):
            continue
        try:
            value = parse_decimal(nominal).quantize(PLACES)
            limit = parse_decimal(lending).quantize(PLACES) if lending else None
        except (ValueError, ArithmeticError):
            continue
        held = Decimal(backed[pk]).quantize(PLACES) if pk in backed else None
        out[(team_id, cluster_id, flavor_id, resource_name)] = (value, limit, held)
    return out


def quota_history_sync(*, now: datetime) -> QuotaHistoryReport:
    """Record quota changes since the last run as ``QuotaPeriod`` rows (caller holds the metering lock).

    The first run on an empty history opens every current quota where its cluster's recorded history begins (its
    first allocation: the past billing backfills), or at ``now`` when the cluster has none yet: nothing is known
    of the time before, so no idle reservation is charged for it. Later runs open new quotas and close changed or
    removed ones at ``now``.
    """
    require_aware(now, "now")
    report = QuotaHistoryReport()
    current = current_quotas()
    empty = not QuotaPeriod.objects.exists()
    starts = history_starts() if empty else {}
    open_periods = {
        (p.team_id, p.cluster_id, p.flavor_id, p.resource_name): p
        for p in QuotaPeriod.objects.filter(valid_to__isnull=True)
    }
    to_close = []
    for key, period in open_periods.items():
        if current.get(key) != (period.nominal, period.lending_limit, period.backed):
            # A lagging worker's clock never closes a period before it began.
            period.valid_to = max(now, period.valid_from) if period.valid_from else now
            to_close.append(period)
    if to_close:
        QuotaPeriod.objects.bulk_update(to_close, ["valid_to"])
    closed = {(p.team_id, p.cluster_id, p.flavor_id, p.resource_name) for p in to_close}
    to_open = [
        QuotaPeriod(
            team_id=key[0],
            cluster_id=key[1],
            flavor_id=key[2],
            resource_name=key[3],
            nominal=nominal,
            lending_limit=lending,
            backed=backed,
            valid_from=min(starts.get(key[1], now), now) if empty else now,
        )
        for key, (nominal, lending, backed) in current.items()
        if key not in open_periods or key in closed
    ]
    QuotaPeriod.objects.bulk_create(to_open)
    report.opened, report.closed = len(to_open), len(to_close)
    return report


def history_starts() -> dict[int, datetime]:
    """Cluster id → when its recorded history begins (its first allocation of a device); one query."""
    rows = Allocation.objects.values("device__node__cluster_id").annotate(first=Min("started_at")).order_by()
    return {r["device__node__cluster_id"]: r["first"] for r in rows if r["first"] is not None}


@dataclass(frozen=True)
class QuotaSpan:
    """Nominal and lending limit of one team's (flavor, resource) over [start, end) (None: unbounded)."""

    team_id: int
    cluster_id: int
    flavor_id: int
    resource_name: str
    nominal: Decimal
    lending_limit: Decimal | None
    start: datetime | None
    end: datetime | None
    backed: Decimal | None = None

    @property
    def reserved(self) -> Decimal:
        """The nominal quota healthy devices backed: what the team reserved and is charged for."""
        return self.nominal if self.backed is None else min(self.backed, self.nominal)


def quota_spans(*, lo: datetime, hi: datetime) -> dict[tuple[int, int, str], list[QuotaSpan]]:
    """The recorded quota periods overlapping [lo, hi), per (team, flavor, resource)."""
    spans: dict[tuple[int, int, str], list[QuotaSpan]] = defaultdict(list)
    rows = (
        QuotaPeriod.objects.filter(Q(valid_from__isnull=True) | Q(valid_from__lt=hi))
        .filter(Q(valid_to__isnull=True) | Q(valid_to__gt=lo))
        .values_list(
            "team_id",
            "cluster_id",
            "flavor_id",
            "resource_name",
            "nominal",
            "lending_limit",
            "valid_from",
            "valid_to",
            "backed",
        )
    )
    for team_id, cluster_id, flavor_id, resource_name, nominal, lending, start, end, backed in rows:
        spans[(team_id, flavor_id, resource_name)].append(
            QuotaSpan(team_id, cluster_id, flavor_id, resource_name, nominal, lending, start, end, backed)
        )
    return spans
