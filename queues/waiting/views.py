"""The waiting page for team leads and admins: thin views that parse the filters, call the wait selectors and render.

One URL serves the page or, for HTMX, its report fragment; the CSV export and the drill-down take the same filters.
"""

from __future__ import annotations

import csv
import io
from datetime import date

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from kernel.errors import ValidationFailed
from kernel.htmx import STOP_POLLING, htmx_login_required, wants_fragment
from pools.models import Cluster
from queues.models import WaitActionStudy
from queues.waiting import charts
from queues.waiting.causes import CAUSES, cause_label
from queues.waiting.forms import ALL_TEAMS, WaitFilterForm, WaitJobsForm, monday
from queues.waiting.reporting import report_csv_rows, report_tables
from queues.waiting.rollup import attribution_tz
from queues.waiting.selectors import hours, lead_teams_visible_to, wait_jobs, wait_report, wait_sentence
from queues.waiting.study import DEFAULT_DAYS, latest_studies, wait_study_request


def _today() -> date:
    return timezone.now().astimezone(attribution_tz()).date()


def _form(request: HttpRequest, form_class=WaitFilterForm):
    """The filter form over the viewer's teams; a team the viewer may not see is a 404."""
    teams = list(lead_teams_visible_to(request.user).order_by("name"))
    slug = request.GET.get("team", "")
    if slug and slug != ALL_TEAMS and slug not in {t.slug for t in teams}:
        raise Http404("No such team among the teams you may see.")
    today = _today()
    data = request.GET.copy()
    form = form_class(data, teams=teams, today=today, staff=request.user.is_staff)
    first, last = form.default_range()
    for name, default in (("start", first), ("end", last)):  # shown in the form, not just used
        if not data.get(name):
            data[name] = default.isoformat()
    return form, teams


def _who(query) -> str:
    if query.every_team:
        return "All teams"
    return ", ".join(t.name for t in query.teams)


@require_GET
@htmx_login_required
@vary_on_headers("HX-Request")
def waiting(request: HttpRequest) -> HttpResponse:
    """GPU-hours of waiting of the viewer's team(s) per week and cause, with the trend, drill-down links and CSV."""
    form, teams = _form(request)
    query = form.query() if teams else None
    context: dict = {"form": form, "teams": teams, "query": query}
    if query is not None:
        now = timezone.now()
        report = wait_report(
            teams=query.scope,
            first_week=query.first_week,
            last_week=query.last_week,
            now=now,
            resource_class=query.resource_class,
        )
        this_week = monday(_today())
        shown_week = min(query.last_week, this_week)
        context.update(
            report=report,
            tables=report_tables(report, teams={t.pk: t for t in teams}),
            sentence=wait_sentence(report, who=_who(query), week=shown_week, this_week=this_week),
            figure=charts.weekly_causes_figure(report),
            total_hours=hours(report.total_us),
            filters=_filters(form),
            studies=_studies() if request.user.is_staff else None,
            clusters=Cluster.objects.order_by("name") if request.user.is_staff else None,
        )
    if wants_fragment(request):
        return render(request, "queues/partials/waiting_report.html", {**context, "fragment": True})
    return render(request, "queues/waiting.html", context)


def _filters(form: WaitFilterForm) -> str:
    """The filters as a query string (for the CSV and drill-down links)."""
    data = form.data.copy()
    for name in ("week", "cause"):
        data.pop(name, None)
    data["start"] = form.cleaned_data["start"].isoformat()
    data["end"] = form.cleaned_data["end"].isoformat()
    return data.urlencode()


def _studies() -> list[dict]:
    """The latest "what would have helped" study of each cluster, its causes in the closed set's order."""
    out = []
    for study in latest_studies():
        causes = study.results.get("causes", {}) if study.state == WaitActionStudy.State.DONE else {}
        out.append(
            {
                "study": study,
                "causes": [{"cause": c, **causes[c]} for c in CAUSES if c in causes],
            }
        )
    return out


@require_GET
@htmx_login_required
def waiting_csv(request: HttpRequest) -> HttpResponse:
    """The wait report as CSV: one row per week × team × class × cause, in GPU-hours."""
    form, teams = _form(request)
    query = form.query() if teams else None
    if query is None:
        return HttpResponse(
            "\n".join(str(e) for errors in form.errors.values() for e in errors) or "No team to report on.",
            status=400,
            content_type="text/plain",
        )
    report = wait_report(
        teams=query.scope,
        first_week=query.first_week,
        last_week=query.last_week,
        now=timezone.now(),
        resource_class=query.resource_class,
        cells=True,
    )
    buffer = io.StringIO()
    rows = report_csv_rows(report, teams={t.pk: t for t in teams})
    writer = csv.DictWriter(
        buffer,
        fieldnames=["week", "team", "class", "cause", "cause_label", "gpu_hours", "share_of_week"],
        lineterminator="\n",
    )
    writer.writeheader()
    writer.writerows(rows)
    name = "all" if query.every_team else "-".join(t.slug for t in query.teams)
    response = HttpResponse(buffer.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = (
        f'attachment; filename="waiting-{name}-{query.first_week:%Y-%m-%d}-{query.last_week:%Y-%m-%d}.csv"'
    )
    return response


@require_GET
@htmx_login_required
@vary_on_headers("HX-Request")
def waiting_jobs(request: HttpRequest) -> HttpResponse:
    """The jobs behind one week and cause of the wait report, most GPU-hours first (the drill-down)."""
    form, teams = _form(request, WaitJobsForm)
    query = form.query() if teams else None
    context: dict = {"form": form, "teams": teams, "query": query}
    if query is not None:
        week, cause = form.cleaned_data["week"], form.cleaned_data["cause"]
        drill = wait_jobs(
            teams=query.scope, week=week, cause=cause, now=timezone.now(), resource_class=query.resource_class
        )
        context.update(drill=drill, cause_label=cause_label(cause), who=_who(query), filters=_filters(form))
    if wants_fragment(request):
        return render(request, "queues/partials/waiting_jobs_list.html", {**context, "fragment": True})
    return render(request, "queues/waiting_jobs.html", context)


@require_POST
@htmx_login_required
def waiting_study(request: HttpRequest) -> HttpResponse:
    """Staff: queue a "what would have helped" study of one cluster's recent history (a what-if replay per cause)."""
    if not request.user.is_staff:
        raise Http404("Only platform admins run studies.")
    cluster = get_object_or_404(Cluster, pk=request.POST.get("cluster") or 0)
    raw = request.POST.get("days") or str(DEFAULT_DAYS)
    errors: list[str] = []
    try:
        wait_study_request(cluster=cluster, days=int(raw))
    except ValueError:
        errors.append(f"days: {raw!r} is not a whole number of days")
    except ValidationFailed as exc:
        errors += [f"{field}: {msg}" for field, msgs in exc.errors.items() for msg in msgs]
    return render(
        request,
        "queues/partials/waiting_study.html",
        {"studies": _studies(), "clusters": Cluster.objects.order_by("name"), "errors": errors},
        status=400 if errors else 200,
    )


@require_GET
@htmx_login_required
def waiting_study_status(request: HttpRequest) -> HttpResponse:
    """Staff: the studies panel, polled while a study runs (286 stops the polling once none does)."""
    if not request.user.is_staff:
        raise Http404("Only platform admins see studies.")
    studies = _studies()
    running = any(s["study"].state in (WaitActionStudy.State.QUEUED, WaitActionStudy.State.RUNNING) for s in studies)
    response = render(
        request,
        "queues/partials/waiting_study.html",
        {"studies": studies, "clusters": Cluster.objects.order_by("name")},
    )
    if not running:
        response.status_code = STOP_POLLING
    return response
