"""Flat views of a ``CostReport`` shared by the cost page, its CSV export and ``manage.py cost_report``.

One row per period, user, class, flavor and reservation plus a total, with the same numbers the page shows. Money
columns are per currency (``cost_EUR``…), so amounts in different currencies are never added together.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from decimal import Decimal

from django.utils import timezone

from billing.reservation_cost import ReservationLine, ReservationUse
from billing.selectors import Capacity, CostReport, Money, ReportJobs, Usage, money_sum
from kernel.csv_cells import csv_dict

CENT = Decimal("0.01")
#: Bars of a breakdown chart; the smallest groups beyond it are summed into one "others" bar.
MAX_BARS = 25
HOUR_PLACES = Decimal("0.001")


def cents(amount: Decimal | None) -> Decimal:
    """An amount rounded to the cent (half-even)."""
    return Decimal(amount or 0).quantize(CENT)


def _cents(amount: Decimal | None) -> Decimal:
    return Decimal(amount or 0).quantize(CENT)


def hours_3(value: Decimal) -> Decimal:
    """Device-hours to 0.001, as the CSV writes them."""
    return Decimal(value).quantize(HOUR_PLACES)


def _hours(value: Decimal) -> Decimal:
    return Decimal(value).quantize(HOUR_PLACES)


def _money_columns(prefix: str, money: Money, currencies: list[str]) -> dict[str, Decimal]:
    return {f"{prefix}_{c}": _cents(money.get(c)) for c in currencies}


def _usage_columns(usage: Usage, currencies: list[str]) -> dict:
    return {
        "owned_hours": _hours(usage.owned_hours),
        "borrowed_hours": _hours(usage.borrowed_hours),
        "used_hours": _hours(usage.used_hours),
        "lost_preemption_hours": _hours(usage.lost_preemption_hours),
        "lost_hardware_hours": _hours(usage.lost_hardware_hours),
        "idle_held_hours": _hours(usage.idle_held_hours),
        **_money_columns("owned_cost", usage.owned_cost, currencies),
        **_money_columns("borrowed_cost", usage.borrowed_cost, currencies),
        **_money_columns("cost", usage.cost, currencies),
    }


def _capacity_columns(capacity: Capacity | None, currencies: list[str]) -> dict:
    capacity = capacity or Capacity()
    net = money_sum(capacity.idle_cost, capacity.lent_credit, sign=[1, -1])
    return {
        "reserved_hours": _hours(capacity.reserved_hours),
        "idle_reserved_hours": _hours(capacity.idle_hours),
        "lent_hours": _hours(capacity.lent_hours),
        "unbacked_hours": _hours(capacity.unbacked_hours),
        **_money_columns("idle_cost", capacity.idle_cost, currencies),
        **_money_columns("lent_credit", capacity.lent_credit, currencies),
        **_money_columns("net_idle_cost", net, currencies),
    }


def _reservation_columns(use: ReservationUse | None, currencies: list[str]) -> dict:
    use = use or ReservationUse()
    return {
        "reservation_hours": _hours(use.reserved_hours),
        "reservation_used_hours": _hours(use.used_hours),
        "reservation_unused_hours": _hours(use.unused_hours),
        **_money_columns("reservation_unused_cost", use.unused_cost, currencies),
    }


def report_columns(report: CostReport) -> list[str]:
    """Column names of ``report_rows``."""
    currencies = report.currencies
    return [
        "section",
        "key",
        "label",
        *_usage_columns(Usage(), currencies),
        *_capacity_columns(None, currencies),
        *(f"settlement_{c}" for c in currencies),
        *_reservation_columns(None, currencies),
        *(f"charge_{c}" for c in currencies),
    ]


def report_rows(report: CostReport) -> list[dict]:
    """Periods, per user, per class, per flavor, per reservation and the total, as flat rows (reserved capacity and
    reservations are per team, so they are given on period, reservation and total rows only)."""
    currencies = report.currencies
    empty_capacity = dict.fromkeys(_capacity_columns(None, currencies), "")
    empty_reservation = dict.fromkeys(_reservation_columns(None, currencies), "")
    empty_usage = dict.fromkeys(_usage_columns(Usage(), currencies), "")
    rows = []
    for p in report.periods:
        booked = report.reservations.period(p.period)
        charge = money_sum(p.charge, booked.unused_cost)
        rows.append(
            {
                "section": report.bucket,
                "key": p.period.isoformat(),
                "label": p.period.isoformat(),
                **_usage_columns(p.usage, currencies),
                **_capacity_columns(p.capacity, currencies),
                **_money_columns("settlement", p.settlement, currencies),
                **_reservation_columns(booked, currencies),
                **{f"charge_{c}": _cents(charge.get(c)) for c in currencies},
            }
        )
    breakdowns = (
        ("team", report.by_team if len(report.by_team) > 1 or report.all_teams else []),
        ("user", report.by_user),
        ("class", report.by_class),
        ("flavor", report.by_flavor),
    )
    for section, groups in breakdowns:
        for g in groups:
            rows.append(
                {
                    "section": section,
                    "key": g.key,
                    "label": g.label,
                    **_usage_columns(g.usage, currencies),
                    **empty_capacity,
                    **{f"settlement_{c}": "" for c in currencies},
                    **empty_reservation,
                    **{f"charge_{c}": "" for c in currencies},
                }
            )
    for line in report.reservations.lines:
        rows.append(
            {
                "section": "reservation",
                "key": str(line.reservation.pk),
                "label": reservation_label(line),
                **empty_usage,
                **empty_capacity,
                **_reservation_columns(line.use, currencies),
                **{f"charge_{c}": _cents(line.use.unused_cost.get(c)) for c in currencies},
            }
        )
    rows.append(
        {
            "section": "total",
            "key": "",
            "label": "Total",
            **_usage_columns(report.totals, currencies),
            **_capacity_columns(report.capacity, currencies),
            **_money_columns("settlement", report.settlement, currencies),
            **_reservation_columns(report.reservations.total, currencies),
            **{f"charge_{c}": _cents(report.charge.get(c)) for c in currencies},
        }
    )
    return rows


def reservation_label(line: ReservationLine) -> str:
    """ "Speech: 8 × H100 from 2026-12-03 09:00 to 17:00 UTC (evaluation run)" (its part within the report)."""
    r = line.reservation
    a, b = timezone.localtime(line.start), timezone.localtime(line.end)
    to = f"{b:%H:%M}" if a.date() == b.date() else f"{b:%Y-%m-%d %H:%M}"
    return f"{r.team.name}: {r.count} × {r.flavor.label} from {a:%Y-%m-%d %H:%M} to {to} {b.tzname()} ({r.purpose})"


def report_csv(report: CostReport) -> str:
    """The report as CSV text."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=report_columns(report), lineterminator="\n")
    writer.writeheader()
    for row in report_rows(report):
        writer.writerow(csv_dict({k: ("" if v == "" else str(v)) for k, v in row.items()}))
    return buffer.getvalue()


def job_columns(currencies: list[str]) -> list[str]:
    """Column names of ``job_rows``."""
    return [
        "job_id", "job", "team", "user", "class", "state", "owned_hours", "borrowed_hours", "gpu_hours",
        *(f"cost_{c}" for c in currencies),
    ]  # fmt: skip


def job_rows(jobs: ReportJobs, currencies: list[str]) -> list[dict]:
    """One row per job behind a report: its device-hours within the range and their cost (per currency)."""
    return [
        {
            "job_id": r.job.pk,
            "job": r.job.name,
            "team": r.job.team.slug,
            "user": r.job.owner.get_username(),
            "class": r.job.resource_class.slug,
            "state": r.job.state,
            "owned_hours": _hours(r.usage.owned_hours),
            "borrowed_hours": _hours(r.usage.borrowed_hours),
            "gpu_hours": _hours(r.usage.used_hours),
            **_money_columns("cost", r.usage.cost, currencies),
        }
        for r in jobs.rows
    ]


def jobs_csv(jobs: ReportJobs) -> str:
    """The jobs behind a report as CSV, one row per job (``job_rows``); their sums are the report's usage."""
    currencies = sorted(set(jobs.totals.cost) | {c for r in jobs.rows for c in r.usage.cost})
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=job_columns(currencies), lineterminator="\n")
    writer.writeheader()
    for row in job_rows(jobs, currencies):
        writer.writerow(csv_dict({k: str(v) for k, v in row.items()}))
    return buffer.getvalue()


@dataclass
class ChargePart:
    """One part of a report's charge in one currency, with its share of the charge."""

    key: str
    label: str
    amount: Decimal
    percent: Decimal | None


def charge_parts(report: CostReport, currency: str) -> list[ChargePart]:
    """What the charge is made of, in ``currency``: owned usage + borrowed usage + idle reservation − lent credit
    (+ the internal settlement's adjustment where the team's cohort settles borrowing between teams)
    (+ unused reservations when the report has booked windows).

    ``percent`` is each part's share of the charge (None when the charge is zero); the parts add up to it.
    """
    charge = report.charge.get(currency, Decimal(0))
    parts = [
        ("owned", "Owned usage (within quota)", report.totals.owned_cost.get(currency, Decimal(0))),
        ("borrowed", "Borrowed usage (from the cohort)", report.totals.borrowed_cost.get(currency, Decimal(0))),
        ("idle", "Idle reservation (quota nobody used)", report.capacity.idle_cost.get(currency, Decimal(0))),
        ("lent", "Credit for idle quota lent to other teams", -report.capacity.lent_credit.get(currency, Decimal(0))),
    ]
    if report.settlement.get(currency):
        parts.append(
            (
                "settlement",
                "Internal settlement (the cohort settles borrowing between teams)",
                report.settlement[currency],
            )
        )
    if report.reservations.lines:  # a part of its own only for teams that booked windows
        unused = report.reservations.total.unused_cost.get(currency, Decimal(0))
        parts.append(("reservation", "Unused reservations (booked windows not used)", unused))
    return [
        ChargePart(key, label, amount, (amount * 100 / charge).quantize(Decimal("0.1")) if charge else None)
        for key, label, amount in parts
    ]


def _money_json(money: Money) -> dict[str, str]:
    return {c: str(_cents(a)) for c, a in sorted(money.items())}


def _usage_json(usage: Usage) -> dict:
    return {
        "ownedHours": str(_hours(usage.owned_hours)),
        "borrowedHours": str(_hours(usage.borrowed_hours)),
        "usedHours": str(_hours(usage.used_hours)),
        "lostPreemptionHours": str(_hours(usage.lost_preemption_hours)),
        "lostHardwareHours": str(_hours(usage.lost_hardware_hours)),
        "idleHeldHours": str(_hours(usage.idle_held_hours)),
        "ownedCost": _money_json(usage.owned_cost),
        "borrowedCost": _money_json(usage.borrowed_cost),
        "cost": _money_json(usage.cost),
    }


def report_json(report: CostReport) -> dict:
    """The report as a JSON-ready dict (amounts as decimal strings, never floats)."""
    cap = report.capacity
    return {
        "teams": "all" if report.all_teams else [t.slug for t in report.teams],
        "from": report.start.isoformat(),
        "to": report.end.isoformat(),
        "bucket": report.bucket,
        "user": report.user.get_username() if report.user else None,
        "class": report.resource_class.slug if report.resource_class else None,
        "total": {
            **_usage_json(report.totals),
            "reservedHours": str(_hours(cap.reserved_hours)),
            "idleReservedHours": str(_hours(cap.idle_hours)),
            "lentHours": str(_hours(cap.lent_hours)),
            "unbackedHours": str(_hours(cap.unbacked_hours)),
            "idleCost": _money_json(cap.idle_cost),
            "lentCredit": _money_json(cap.lent_credit),
            "netIdleCost": _money_json(report.net_idle_cost),
            "settlement": _money_json(report.settlement),
            "reservationHours": str(_hours(report.reservations.total.reserved_hours)),
            "reservationUsedHours": str(_hours(report.reservations.total.used_hours)),
            "reservationUnusedHours": str(_hours(report.reservations.total.unused_hours)),
            "reservationUnusedCost": _money_json(report.reservations.total.unused_cost),
            "charge": _money_json(report.charge),
        },
        "reservations": [
            {
                "id": line.reservation.pk,
                "team": line.reservation.team.slug,
                "flavor": line.reservation.flavor.name,
                "count": line.reservation.count,
                "from": line.start.isoformat(),
                "to": line.end.isoformat(),
                "reservedHours": str(_hours(line.use.reserved_hours)),
                "usedHours": str(_hours(line.use.used_hours)),
                "unusedHours": str(_hours(line.use.unused_hours)),
                "unusedCost": _money_json(line.use.unused_cost),
            }
            for line in report.reservations.lines
        ],
        "byTeam": [{"key": g.key, "label": g.label, **_usage_json(g.usage)} for g in report.by_team],
        "byUser": [{"key": g.key, "label": g.label, **_usage_json(g.usage)} for g in report.by_user],
        "byClass": [{"key": g.key, "label": g.label, **_usage_json(g.usage)} for g in report.by_class],
        "byFlavor": [{"key": g.key, "label": g.label, **_usage_json(g.usage)} for g in report.by_flavor],
        "periods": [
            {
                "period": p.period.isoformat(),
                **_usage_json(p.usage),
                "idleReservedHours": str(_hours(p.capacity.idle_hours)),
                "lentHours": str(_hours(p.capacity.lent_hours)),
                "unbackedHours": str(_hours(p.capacity.unbacked_hours)),
            }
            for p in report.periods
        ],
    }


def primary_currency(report: CostReport, default: str) -> str:
    """The currency charts are drawn in: the one with the largest charge, else the default."""
    charge = report.charge
    if not charge:
        return default
    return max(charge, key=lambda c: (abs(charge[c]), c))


def chart_rows(report: CostReport, *, currency: str) -> dict[str, list[dict]]:
    """Rows for ``billing.charts``: one per period (hours and cost), and breakdowns per user / class."""
    periods = [
        {
            "period": p.period,
            "owned": p.usage.owned_hours,
            "borrowed": p.usage.borrowed_hours,
            "idle": p.capacity.idle_hours,
            "lost": p.usage.lost_hours,
            "owned_cost": p.usage.owned_cost.get(currency, Decimal(0)),
            "borrowed_cost": p.usage.borrowed_cost.get(currency, Decimal(0)),
            "idle_cost": p.capacity.idle_cost.get(currency, Decimal(0)) - p.capacity.lent_credit.get(currency, 0),
        }
        for p in report.periods
    ]

    def groups(items):
        rows = [
            {
                "label": g.label,
                "owned": g.usage.owned_hours,
                "borrowed": g.usage.borrowed_hours,
                "cost": g.usage.cost.get(currency, Decimal(0)),
            }
            for g in items
        ]
        if len(rows) <= MAX_BARS:
            return rows
        rest = rows[MAX_BARS - 1 :]
        other = {"label": f"{len(rest)} others", **{k: sum(r[k] for r in rest) for k in ("owned", "borrowed", "cost")}}
        return [*rows[: MAX_BARS - 1], other]

    people = report.by_team if report.all_teams else report.by_user
    return {"periods": periods, "users": groups(people), "classes": groups(report.by_class)}


def ledger_rows(lines, *, month) -> list[dict]:
    """The month's ledger as flat rows: one per lender → borrower pair, hours and value per currency."""
    currencies = sorted({c for ln in lines for c in ln.value})
    return [
        {
            "month": f"{month:%Y-%m}",
            "lender": ln.lender.slug,
            "borrower": ln.borrower.slug,
            "hours": _hours(ln.hours),
            **_money_columns("value", ln.value, currencies),
            "reclaims": ln.reclaims,
        }
        for ln in lines
    ]


def ledger_csv(lines, *, month) -> str:
    """The month's ledger as CSV (``ledger_rows``)."""
    currencies = sorted({c for ln in lines for c in ln.value})
    buffer = io.StringIO()
    fields = ["month", "lender", "borrower", "hours", *(f"value_{c}" for c in currencies), "reclaims"]
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in ledger_rows(lines, month=month):
        writer.writerow({k: str(v) for k, v in row.items()})
    return buffer.getvalue()


def statement_rows(statement) -> list[dict]:
    """A team's monthly statement as flat rows: each line lent and borrowed (the cohort's pool as ``pool``), each
    reclaim, and the totals that match the cost report (lent credit, borrowed cost, settlement, charge)."""
    currencies = sorted(
        {c for ln in (*statement.lent, *statement.borrowed) for c in ln.value} | set(statement.report.charge)
    )
    empty = dict.fromkeys((*(f"value_{c}" for c in currencies), *(f"settled_{c}" for c in currencies)), "")

    def line(section: str, counterpart, value, settled=None, hours="") -> dict:
        return {
            "section": section,
            "counterpart": counterpart,
            "hours": hours,
            **empty,
            **(_money_columns("value", value, currencies) if value is not None else {}),
            **(_money_columns("settled", settled, currencies) if settled is not None else {}),
            "reclaim_at": "",
            "job": "",
            "lost_device_hours": "",
        }

    rows = []
    for ln in statement.lent:
        rows.append(line("lent", ln.team.slug if ln.team else "pool", ln.value, ln.settled, _hours(ln.hours)))
    for ln in statement.borrowed:
        rows.append(line("borrowed", ln.team.slug if ln.team else "pool", ln.value, ln.settled, _hours(ln.hours)))
    for section, records in (
        ("reclaim_suffered", statement.reclaims_suffered),
        ("reclaim_made", statement.reclaims_made),
    ):
        for r in records:
            other = r.reclaimer_team if section == "reclaim_suffered" else r.victim_team
            row = line(section, other.slug if other else "", None)
            row.update(reclaim_at=r.at.isoformat(), job=r.victim_job_id, lost_device_hours=r.lost_device_hours)
            rows.append(row)
    report = statement.report
    rows.append(
        line(
            "total_lent",
            "",
            report.capacity.lent_credit,
            statement.settlement_credit,
            _hours(report.capacity.lent_hours),
        )
    )
    rows.append(
        line(
            "total_borrowed",
            "",
            report.totals.borrowed_cost,
            statement.settlement_charge,
            _hours(report.totals.borrowed_hours),
        )
    )
    rows.append(line("settlement_adjustment", "", report.settlement))
    rows.append(line("charge", "", report.charge))
    return rows


def statement_csv(statement) -> str:
    """A team's monthly statement as CSV (``statement_rows``)."""
    rows = statement_rows(statement)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: str(v) for k, v in row.items()})
    return buffer.getvalue()
