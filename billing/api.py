"""REST API of the borrowing ledger (``/api/billing/``): a team's monthly statement and the month's ledger lines, with
the same form, selectors and visibility as the statements page (team leads their teams, staff every team; a token
its own team when its owner leads it). Amounts are decimal strings per currency, never floats."""

from __future__ import annotations

from django.http import QueryDict
from django.urls import path
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from billing import reporting, selectors, statements
from billing.forms import ALL_TEAMS, LedgerFilterForm
from billing.pricing import local_day
from billing.services.common import billing_tz
from queues.api.views import PortalAPIMixin

PARAMS = [
    OpenApiParameter("team", OpenApiTypes.STR, description="Team slug ('all': every team, staff only, ledger only)."),
    OpenApiParameter("month", OpenApiTypes.STR, description="YYYY-MM; default this month."),
]


def _money(money: dict) -> dict[str, str]:
    return {c: str(reporting.cents(a)) for c, a in sorted(money.items()) if a}


class LedgerAPIMixin(PortalAPIMixin):
    """The caller's visible teams and the validated filters."""

    def query(self):
        request: Request = self.request
        teams = selectors.teams_visible_to(request.user)
        token = self.token()
        if token is not None:
            teams = teams.filter(pk=token.team_id)
        teams = list(teams.order_by("name"))
        if not teams:
            raise exceptions.PermissionDenied("you lead no team: statements are for team leads and admins")
        slug = request.query_params.get("team", "")
        if slug and slug != ALL_TEAMS and slug not in {t.slug for t in teams}:
            raise exceptions.NotFound(f"no team {slug} among the teams you may see")
        data = QueryDict(mutable=True)
        data.update(request.query_params)
        form = LedgerFilterForm(
            data, teams=teams, today=local_day(timezone.now(), billing_tz()), staff=request.user.is_staff
        )
        query = form.query()
        if query is None:
            raise exceptions.ValidationError(form.errors)
        return query


class StatementView(LedgerAPIMixin, APIView):
    """A team's borrowing statement for a month: lent to whom, borrowed from whom, reclaims, settlement, charge."""

    @extend_schema(responses=OpenApiTypes.OBJECT, summary="A team's monthly borrowing statement", parameters=PARAMS)
    def get(self, request: Request) -> Response:
        _scope, team, month = self.query()
        if team is None:
            raise exceptions.ValidationError({"team": ["a statement is one team's: name the team"]})
        first, last = statements.month_range(month)
        s = statements.borrowing_statement(team=team, start=first, end=last)
        r = s.report

        def line(ln) -> dict:
            return {
                "team": ln.team.slug if ln.team else None,
                "hours": str(reporting.hours_3(ln.hours)),
                "value": _money(ln.value),
                "settled": _money(ln.settled) if ln.settled is not None else None,
            }

        def reclaim(rc, other) -> dict:
            return {
                "at": rc.at.isoformat(),
                "job": rc.victim_job_id,
                "team": other.slug if other else None,
                "devices": rc.devices,
                "lostDeviceHours": str(rc.lost_device_hours),
                "reason": rc.reason,
            }

        return Response(
            {
                "team": team.slug,
                "month": f"{month:%Y-%m}",
                "cohort": s.cohort.name if s.cohort else None,
                "settlementShare": {f"{m:%Y-%m}": str(v) for m, v in sorted(s.shares.items())},
                "lent": [line(ln) for ln in s.lent],
                "borrowed": [line(ln) for ln in s.borrowed],
                "reclaimsSuffered": [reclaim(rc, rc.reclaimer_team) for rc in s.reclaims_suffered],
                "reclaimsMade": [reclaim(rc, rc.victim_team) for rc in s.reclaims_made],
                "totals": {
                    "lentHours": str(reporting.hours_3(r.capacity.lent_hours)),
                    "lentCredit": _money(r.capacity.lent_credit),
                    "borrowedHours": str(reporting.hours_3(r.totals.borrowed_hours)),
                    "borrowedCost": _money(r.totals.borrowed_cost),
                    "settlementCredit": _money(s.settlement_credit),
                    "settlementCharge": _money(s.settlement_charge),
                    "settlementAdjustment": _money(r.settlement),
                    "charge": _money(r.charge),
                },
            }
        )


class LedgerView(LedgerAPIMixin, APIView):
    """The month's ledger lines (lender → borrower) involving the caller's teams, or every team's ('all', staff)."""

    @extend_schema(responses=OpenApiTypes.OBJECT, summary="The month's borrowing ledger", parameters=PARAMS)
    def get(self, request: Request) -> Response:
        scope, _team, month = self.query()
        first, last = statements.month_range(month)
        lines = statements.ledger_lines(teams=scope, start=first, end=last)
        return Response(
            {
                "month": f"{month:%Y-%m}",
                "lines": [
                    {
                        "lender": ln.lender.slug,
                        "borrower": ln.borrower.slug,
                        "hours": str(reporting.hours_3(ln.hours)),
                        "value": _money(ln.value),
                        "reclaims": ln.reclaims,
                    }
                    for ln in lines
                ],
            }
        )


app_name = "billing_api"
urlpatterns = [
    path("statement/", StatementView.as_view(), name="statement"),
    path("ledger/", LedgerView.as_view(), name="ledger"),
]
