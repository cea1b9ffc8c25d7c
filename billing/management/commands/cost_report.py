"""``manage.py cost_report --team SLUG --from DATE --to DATE [--format table|csv|json]``: a team's costs.

Per user and per class totals and the grand total, from the daily rollups (the numbers of the cost page).
Bad input is an error naming the argument, with exit status 2.
"""

from __future__ import annotations

import json
from datetime import date

from django.core.management.base import BaseCommand, CommandError, CommandParser

from billing import reporting, selectors
from billing.selectors import Usage
from queues.models import Team

FORMATS = ("table", "csv", "json")


def _date(raw: str, option: str) -> date:
    try:
        return date.fromisoformat(raw)
    except (TypeError, ValueError):
        raise CommandError(f"{option}: {raw!r} is not a date; use YYYY-MM-DD, e.g. 2026-03-01", returncode=2) from None


def _money(amounts: dict) -> str:
    return " + ".join(f"{a:,.2f} {c}" for c, a in sorted(amounts.items())) or "0.00"


class Command(BaseCommand):
    help = "Print a team's GPU-hours and cost between two dates (inclusive), per user, per class and in total."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", required=True, help="Team slug.")
        parser.add_argument("--from", dest="start", required=True, help="First day, YYYY-MM-DD.")
        parser.add_argument("--to", dest="end", required=True, help="Last day (inclusive), YYYY-MM-DD.")
        parser.add_argument("--format", dest="fmt", default="table", help="table (default), csv or json.")

    def handle(self, *args, team: str, start: str, end: str, fmt: str, **options) -> None:
        if fmt not in FORMATS:
            raise CommandError(f"--format: {fmt!r} is not one of {', '.join(FORMATS)}", returncode=2)
        team_obj = Team.objects.filter(slug=team).first()
        if team_obj is None:
            raise CommandError(f"--team: no team with slug {team!r}", returncode=2)
        first, last = _date(start, "--from"), _date(end, "--to")
        if last < first:
            raise CommandError(f"--to: {last} is before --from {first}", returncode=2)
        report = selectors.cost_report(teams=[team_obj], start=first, end=last, bucket="day")
        if fmt == "csv":
            self.stdout.write(reporting.report_csv(report), ending="")
        elif fmt == "json":
            self.stdout.write(json.dumps(reporting.report_json(report), indent=2))
        else:
            self.stdout.write(self._table(report, team_obj))

    def _table(self, report: selectors.CostReport, team: Team) -> str:
        """A plain-text table: per user, per class, then the grand total."""
        header = f"{'':32} {'owned h':>12} {'borrowed h':>12} {'lost h':>10}  cost"
        lines = [f"Cost report for {team.name} ({team.slug}), {report.start} to {report.end}", ""]

        def line(label: str, usage: Usage) -> str:
            return (
                f"{label[:32]:32} {usage.owned_hours:>12,.2f} {usage.borrowed_hours:>12,.2f} "
                f"{usage.lost_hours:>10,.2f}  {_money(usage.cost)}"
            )

        for title, groups in (("Per user", report.by_user), ("Per class", report.by_class)):
            lines += [title, header]
            lines += [line(g.label, g.usage) for g in groups] or ["  (no usage)"]
            lines.append("")
        cap = report.capacity
        lines += [
            "Total",
            header,
            line("usage", report.totals),
            f"{'idle reserved':32} {cap.idle_hours:>12,.2f} h{'':25}  {_money(cap.idle_cost)}",
            f"{'lent (credited)':32} {cap.lent_hours:>12,.2f} h{'':25}  -{_money(cap.lent_credit)}",
            f"{'GRAND TOTAL (charge)':32} {'':>12} {'':>12} {'':>10}  {_money(report.charge)}",
        ]
        return "\n".join(lines)
