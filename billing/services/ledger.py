"""The borrowing ledger's rows of one billing day, written by ``usage_rollup`` beside the capacity rows.

Who used whose guaranteed quota: each hour, a lender's lent time (the capacity rollup's ``lent``: its idle quota
that other teams of the root cohort consumed by borrowing, capped by its lending limit) is split over the teams
that borrowed that flavor and resource in that hour, in proportion to what each borrowed; the lender's lent credit
of the hour is split the same way. Integer microseconds and 10⁻⁸ of the currency are split by largest remainder,
so a lender's rows of a day add up to its ``lent_us`` and ``lent_credit`` exactly, and the statements add up with
the cost report to the cent.

Reclaims: every preemption of a running job by another team of its cohort (Kueue's reclaim reasons), with the
work it lost.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal

from django.db.models import OuterRef, Subquery

from billing.models import LedgerDaily, LedgerMonthly, ReclaimRecord
from billing.pricing import COST_PLACES
from queues.models import Job, JobEvent

#: Kueue's preemption reasons that take quota back for another queue of the cohort.
RECLAIM_REASONS = ("InCohortReclamation", "InCohortReclaimWhileBorrowing", "InCohortFairSharing")


def split_int(total: int, weights: Sequence[int]) -> list[int]:
    """``total`` split in proportion to ``weights`` (all > 0), in integers that add up to it exactly: each gets its
    floor, the remainder goes one by one to the largest fractional parts (the earlier weight on a tie)."""
    whole = sum(weights)
    parts = [total * w // whole for w in weights]
    rest = total - sum(parts)
    order = sorted(range(len(weights)), key=lambda i: (-(total * weights[i] % whole), i))
    for i in order[:rest]:
        parts[i] += 1
    return parts


def split_money(amount: Decimal, weights: Sequence[int]) -> list[Decimal]:
    """``amount`` (at most ``COST_PLACES`` decimals) split like ``split_int``, in units of ``COST_PLACES``."""
    units = int((amount / COST_PLACES).to_integral_value())
    return [Decimal(p) * COST_PLACES for p in split_int(units, weights)]


def ledger_rows(
    *,
    day: date,
    keys_by_group: Mapping[tuple[int, int, str], Sequence[tuple[int, int, str]]],
    lent: Mapping[tuple[int, int, str], Sequence[int]],
    credit: Mapping[tuple[int, int, str], Sequence[Decimal]],
    currency: Mapping[tuple[int, int, str], str],
    borrowers: Mapping[tuple[int, int, str], Sequence[tuple[int, Sequence[int]]]],
) -> list[LedgerDaily]:
    """The day's ledger rows: per (root cohort, flavor, resource) group, each lender's lent time and credit of each
    hour split over the other teams that borrowed in that hour.

    ``keys_by_group``: the lenders' (team, flavor, resource) keys per group; ``lent`` / ``credit``: per key and
    hour, the lent µs and its credit (``cost_of`` at the hour's price); ``borrowers``: per group, each borrowing
    team's µs per hour.
    """
    cells: dict[tuple, list] = {}
    for group, keys in keys_by_group.items():
        cohort_id, flavor_id, resource_name = group
        series = borrowers.get(group, ())
        for key in keys:
            lender = key[0]
            for h, lent_us in enumerate(lent[key]):
                if lent_us <= 0:
                    continue
                takers = [(team_id, s[h]) for team_id, s in series if team_id != lender and s[h] > 0]
                if not takers:
                    continue
                weights = [w for _, w in takers]
                for (borrower, _), us, value in zip(
                    takers, split_int(lent_us, weights), split_money(credit[key][h], weights), strict=True
                ):
                    cell_key = (cohort_id, lender, borrower, flavor_id, resource_name, currency[key])
                    cell = cells.setdefault(cell_key, [0, Decimal(0)])
                    cell[0] += us
                    cell[1] += value
    return [
        LedgerDaily(
            day=day,
            cohort_id=cohort_id,
            lender_id=lender,
            borrower_id=borrower,
            flavor_id=flavor_id,
            resource_name=resource_name,
            currency=cur,
            lent_us=us,
            value=value,
        )
        for (cohort_id, lender, borrower, flavor_id, resource_name, cur), (us, value) in cells.items()
        if us > 0 or value
    ]


def reclaim_rows(*, day: date, lo: datetime, hi: datetime) -> list[ReclaimRecord]:
    """Reclaims of [lo, hi): running jobs preempted for a job of another team of the cohort, with the device-hours
    of work their requeue reported lost (as known at this rollup)."""
    requeue = JobEvent.objects.filter(job_id=OuterRef("job_id"), kind=JobEvent.Kind.REQUEUED, at__gte=OuterRef("at"))
    query = (
        JobEvent.objects.filter(
            kind=JobEvent.Kind.PREEMPTED, at__gte=lo, at__lt=hi, details__reason__in=list(RECLAIM_REASONS)
        )
        .annotate(requeue_details=Subquery(requeue.order_by("at", "pk").values("details")[:1]))
        .values(
            "job_id", "at", "details", "requeue_details", "job__team_id", "job__devices_per_pod", "job__pod_count",
            "job__companion_pod_sets",
        )
    )  # fmt: skip
    events = list(query)
    preemptors = {e["details"].get("preemptor") for e in events if (e["details"] or {}).get("preemptor")}
    teams = dict(Job.objects.filter(pk__in=preemptors).values_list("pk", "team_id")) if preemptors else {}
    out = []
    for e in events:
        details = e["details"] or {}
        preemptor = details.get("preemptor")
        reclaimer = teams.get(preemptor) if preemptor else None
        if reclaimer == e["job__team_id"]:
            continue  # the team's own job took it: not a reclaim
        requeued = e["requeue_details"] or {}
        if isinstance(requeued, str):  # a backend that answers a subquery's JSON as text
            requeued = json.loads(requeued)
        companions = sum(int(c["count"]) * int(c["devices_per_pod"]) for c in e["job__companion_pod_sets"] or ())
        out.append(
            ReclaimRecord(
                day=day,
                at=e["at"],
                victim_job_id=e["job_id"],
                victim_team_id=e["job__team_id"],
                preemptor_job_id=preemptor if preemptor in teams else None,
                reclaimer_team_id=reclaimer,
                reason=details.get("reason", ""),
                devices=e["job__devices_per_pod"] * e["job__pod_count"] + companions,
                lost_device_hours=Decimal(str(requeued.get("lostDeviceHours") or 0)),
            )
        )
    return out


def ledger_month_rollup(*, first: date, after: date) -> int:
    """Rewrite one month's ``LedgerMonthly`` rows from its daily rows (exact sums); returns how many."""
    cells: dict[tuple, list] = defaultdict(lambda: [0, Decimal(0)])
    daily = LedgerDaily.objects.filter(day__gte=first, day__lt=after).order_by()
    fields = ("cohort_id", "lender_id", "borrower_id", "flavor_id", "resource_name", "currency")
    for *key, us, value in daily.values_list(*fields, "lent_us", "value"):
        cell = cells[tuple(key)]
        cell[0] += us
        cell[1] += value
    LedgerMonthly.objects.filter(month=first).delete()
    LedgerMonthly.objects.bulk_create(
        LedgerMonthly(month=first, **dict(zip(fields, key, strict=True)), lent_us=us, value=value)
        for key, (us, value) in cells.items()
    )
    return len(cells)
