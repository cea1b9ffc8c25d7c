"""Cost pages for team leads: thin views that parse the filters, call the billing selectors and render.

One URL serves the page or, for HTMX, its report fragment; the CSV export takes the same filters.
"""

from __future__ import annotations

from datetime import date, timedelta
from urllib.parse import urlencode

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from billing import charts, my_usage, reporting, selectors, statements
from billing.forms import ALL_TEAMS, DEFAULT_DAYS, CostFilterForm, CostQuery, LedgerFilterForm
from billing.pricing import local_day
from billing.services.common import billing_tz, default_currency
from kernel.htmx import htmx_login_required, wants_fragment


def _query(request: HttpRequest) -> tuple[CostFilterForm, CostQuery | None, list]:
    """The filter form over the viewer's teams and its query; a team the viewer may not see is a 404."""
    teams = list(selectors.teams_visible_to(request.user))
    slug = request.GET.get("team", "")
    if slug and slug != ALL_TEAMS and slug not in {t.slug for t in teams}:
        raise Http404("No such team among the teams you may see.")
    today = local_day(timezone.now(), billing_tz())
    data = request.GET.copy()
    defaults = (("start", today - timedelta(days=DEFAULT_DAYS - 1)), ("end", today))
    for name, default in defaults:  # shown in the form, not just used
        if not data.get(name):
            data[name] = default.isoformat()
    form = CostFilterForm(data, teams=teams, today=today, staff=request.user.is_staff)
    return form, form.query(), teams


def _quick_ranges(form: CostFilterForm, *, today: date) -> list[tuple[str, str, bool]]:
    """(label, query string, chosen) of the usual ranges, keeping the other filters."""
    last_month_end = today.replace(day=1) - timedelta(days=1)
    quarter_start = today.replace(month=3 * ((today.month - 1) // 3) + 1, day=1)
    ranges = [
        ("Last 30 days", today - timedelta(days=DEFAULT_DAYS - 1), today),
        ("This month", today.replace(day=1), today),
        ("Last month", last_month_end.replace(day=1), last_month_end),
        ("This quarter", quarter_start, today),
    ]
    out = []
    for label, start, end in ranges:
        data = form.data.copy()
        data["start"], data["end"] = start.isoformat(), end.isoformat()
        chosen = form.data.get("start") == data["start"] and form.data.get("end") == data["end"]
        out.append((label, data.urlencode(), chosen))
    return out


#: ``rows`` of the CSV export: the report's periods and breakdowns (default), or one row per job.
CSV_ROWS = ("", "jobs")


def _figures(report: selectors.CostReport) -> dict:
    """The page's Plotly figures, from ``billing.charts``."""
    currency = reporting.primary_currency(report, default_currency())
    rows = reporting.chart_rows(report, currency=currency)
    return {
        "hours": charts.usage_area_figure(rows["periods"], title=f"GPU-hours per {report.bucket}"),
        "cost": charts.cost_area_figure(rows["periods"], currency=currency, title=f"Cost per {report.bucket}"),
        "users": charts.breakdown_bar_figure(
            rows["users"], title="Per team" if report.all_teams else "Per user", currency=currency
        ),
        "classes": charts.breakdown_bar_figure(rows["classes"], title="Per class", currency=currency),
    }


@require_GET
@htmx_login_required
@vary_on_headers("HX-Request")
def cost(request: HttpRequest) -> HttpResponse:
    """Cost and GPU-hours of the viewer's team(s): totals, charts, per user and class, budgets, notifications."""
    form, query, teams = _query(request)
    context: dict = {"form": form, "teams": teams, "query": query}
    if query is not None:
        now = timezone.now()
        report = selectors.cost_report(
            teams=query.scope,
            start=query.start,
            end=query.end,
            bucket=query.bucket,
            user=query.user,
            resource_class=query.resource_class,
        )
        currency = reporting.primary_currency(report, default_currency())
        context.update(
            report=report,
            figures=_figures(report),
            charge_currency=currency,
            charge_parts=reporting.charge_parts(report, currency),
            budgets=selectors.budget_statuses(
                teams=query.scope, start=query.start, end=query.end, today=local_day(now, billing_tz())
            ),
            notifications=selectors.notifications_for(teams=query.scope),
            demotions=selectors.active_demotions(teams=query.scope),
            # Every team's jobs would be a scan of all usage records: that view lists teams, not jobs.
            jobs=None
            if query.every_team
            else selectors.report_jobs(
                teams=query.scope,
                start=query.start,
                end=query.end,
                user=query.user,
                resource_class=query.resource_class,
            ),
            ranges=_quick_ranges(form, today=local_day(now, billing_tz())),
            # who lent to whom in the range (every team's ledger is on the statements page)
            borrowing=None
            if query.every_team
            else statements.ledger_lines(teams=query.scope, start=query.start, end=query.end),
            ledger_query=urlencode(
                {"team": query.teams[0].slug if len(query.teams) == 1 else "", "month": f"{query.start:%Y-%m}"}
            ),
            csv_query=form.data.urlencode(),
            jobs_csv_query=_with(form.data, rows="jobs"),
        )
    if wants_fragment(request):
        return render(request, "billing/partials/cost_report.html", {**context, "fragment": True})
    return render(request, "billing/cost.html", context)


def _with(data, **values) -> str:
    """The query string of ``data`` with some values replaced."""
    data = data.copy()
    for key, value in values.items():
        data[key] = value
    return data.urlencode()


@require_GET
@htmx_login_required
def cost_csv(request: HttpRequest) -> HttpResponse:
    """The same numbers as the page, as CSV; ``rows=jobs``: one row per job (job, user, class, GPU-hours, cost)."""
    form, query, _ = _query(request)
    rows = request.GET.get("rows", "")
    errors = [f"{k}: {' '.join(v)}" for k, v in form.errors.items()]
    if rows not in CSV_ROWS:
        errors.append(f"rows: must be empty or 'jobs', not {rows!r}")
    if query is None or errors:
        return HttpResponse(
            "Invalid filters: " + "; ".join(errors), status=400, content_type="text/plain; charset=utf-8"
        )
    name = "-".join(t.slug for t in query.teams) if len(query.teams) <= 3 else "teams"
    if rows == "jobs":
        jobs = selectors.report_jobs(
            teams=query.scope,
            start=query.start,
            end=query.end,
            user=query.user,
            resource_class=query.resource_class,
            limit=None,
        )
        response = HttpResponse(reporting.jobs_csv(jobs), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="cost-jobs-{name}-{query.start}-{query.end}.csv"'
        return response
    report = selectors.cost_report(
        teams=query.scope,
        start=query.start,
        end=query.end,
        bucket=query.bucket,
        user=query.user,
        resource_class=query.resource_class,
    )
    response = HttpResponse(reporting.report_csv(report), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="cost-{name}-{query.start}-{query.end}.csv"'
    return response


@require_GET
@htmx_login_required
def usage_mine(request: HttpRequest) -> HttpResponse:
    """The signed-in researcher's own GPU-hours, cost and lost hours per month and per class (any member)."""
    months, error = my_usage.months_param(request.GET.get("months"))
    today = local_day(timezone.now(), billing_tz())
    usage = my_usage.researcher_usage(user=request.user, today=today, months=months)
    context = {
        "usage": usage,
        "report": usage.report,
        "months_error": error,
        "month_choices": (1, 3, 6, 12, my_usage.MAX_MONTHS),
        "is_lead": my_usage.leads_or_staff(request.user),
    }
    return render(request, "billing/usage_mine.html", context, status=400 if error else 200)


def _ledger_query(request: HttpRequest):
    """The statements' filter form over the viewer's teams; a team the viewer may not see is a 404."""
    teams = list(selectors.teams_visible_to(request.user).order_by("name"))
    slug = request.GET.get("team", "")
    if slug and slug != ALL_TEAMS and slug not in {t.slug for t in teams}:
        raise Http404("No such team among the teams you may see.")
    today = local_day(timezone.now(), billing_tz())
    form = LedgerFilterForm(request.GET.copy(), teams=teams, today=today, staff=request.user.is_staff)
    return form, form.query(), teams


@require_GET
@htmx_login_required
@vary_on_headers("HX-Request")
def ledger(request: HttpRequest) -> HttpResponse:
    """The borrowing statement of a team for a month (lent to whom, borrowed from whom, reclaims, settlement), or
    for staff the cohort ledger of every team."""
    form, query, teams = _ledger_query(request)
    context: dict = {"form": form, "teams": teams}
    if query is not None:
        scope, team, month = query
        first, last = statements.month_range(month)
        context.update(first=first, last=last, month=month, csv_query=form.data.urlencode())
        if team is not None:
            context["statement"] = statements.borrowing_statement(team=team, start=first, end=last)
        else:
            context["lines"] = statements.ledger_lines(teams=scope, start=first, end=last)
    if wants_fragment(request):
        return render(request, "billing/partials/ledger_report.html", {**context, "fragment": True})
    return render(request, "billing/ledger.html", context)


@require_GET
@htmx_login_required
def ledger_csv(request: HttpRequest) -> HttpResponse:
    """A team's monthly statement as CSV (lines lent and borrowed, reclaims, totals matching the cost report); for
    every team (staff), the month's ledger: one row per lender → borrower pair."""
    form, query, _teams = _ledger_query(request)
    if query is None:
        errors = [f"{k}: {' '.join(v)}" for k, v in form.errors.items()] or ["no team to report on"]
        return HttpResponse("Invalid filters: " + "; ".join(errors), status=400, content_type="text/plain")
    scope, team, month = query
    first, last = statements.month_range(month)
    if team is not None:
        text = reporting.statement_csv(statements.borrowing_statement(team=team, start=first, end=last))
    else:
        text = reporting.ledger_csv(statements.ledger_lines(teams=scope, start=first, end=last), month=month)
    response = HttpResponse(text, content_type="text/csv; charset=utf-8")
    name = team.slug if team is not None else "all"
    response["Content-Disposition"] = f'attachment; filename="ledger-{name}-{month:%Y-%m}.csv"'
    return response
