"""REST API of the wait attribution (``/api/waiting/``): the same form, selectors and visibility as the waiting page.

Team leads read the teams they lead, staff every team; a token reads its own team only (when its owner leads it).
"""

from __future__ import annotations

from django.http import QueryDict
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from queues.api.views import PortalAPIMixin
from queues.models import Team
from queues.waiting.causes import cause_label
from queues.waiting.forms import ALL_TEAMS, WaitFilterForm, WaitJobsForm, monday
from queues.waiting.rollup import attribution_tz
from queues.waiting.selectors import hours, lead_teams_visible_to, wait_jobs, wait_report, wait_sentence

FILTERS = [
    OpenApiParameter("team", OpenApiTypes.STR, description="Team slug, or 'all' (every team you may see)."),
    OpenApiParameter("start", OpenApiTypes.DATE, description="First week (any day of it); default 11 weeks ago."),
    OpenApiParameter("end", OpenApiTypes.DATE, description="Last week (any day of it); default this week."),
    OpenApiParameter("resource_class", OpenApiTypes.STR, description="Class slug."),
]


def _hours(us_by_cause: dict[str, int]) -> dict[str, str]:
    return {cause: str(hours(us)) for cause, us in us_by_cause.items() if us}


class WaitingAPIMixin(PortalAPIMixin):
    """The visible teams of the caller (a token: its team, if its owner leads it) and the validated form."""

    def visible(self) -> list[Team]:
        teams = lead_teams_visible_to(self.request.user)
        token = self.token()
        if token is not None:
            teams = teams.filter(pk=token.team_id)
        return list(teams.order_by("name"))

    def form(self, form_class):
        request: Request = self.request
        teams = self.visible()
        if not teams:
            raise exceptions.PermissionDenied("you lead no team: the waiting report is for team leads and admins")
        slug = request.query_params.get("team", "")
        if slug and slug != ALL_TEAMS and slug not in {t.slug for t in teams}:
            raise exceptions.NotFound(f"no team {slug} among the teams you may see")
        data = QueryDict(mutable=True)
        data.update(request.query_params)
        today = timezone.now().astimezone(attribution_tz()).date()
        form = form_class(data, teams=teams, today=today, staff=request.user.is_staff)
        query = form.query()
        if query is None:
            raise exceptions.ValidationError(form.errors)
        return form, query, teams


class WaitingView(WaitingAPIMixin, APIView):
    """GPU-hours of waiting per week and cause (plus per class and team), jobs still waiting counted up to now."""

    @extend_schema(
        responses=OpenApiTypes.OBJECT,
        summary="Where the waiting went: GPU-hours per week and cause",
        parameters=FILTERS,
    )
    def get(self, request: Request) -> Response:
        _form, query, teams = self.form(WaitFilterForm)
        report = wait_report(
            teams=query.scope,
            first_week=query.first_week,
            last_week=query.last_week,
            now=timezone.now(),
            resource_class=query.resource_class,
        )
        names = {t.pk: t.slug for t in teams}
        this_week = monday(timezone.now().astimezone(attribution_tz()).date())
        who = "All teams" if query.every_team else ", ".join(t.name for t in query.teams)
        return Response(
            {
                "teams": "all" if query.every_team else [t.slug for t in query.teams],
                "from": query.first_week.isoformat(),
                "to": query.last_week.isoformat(),
                "class": query.resource_class.slug if query.resource_class else None,
                "sentence": wait_sentence(report, who=who, week=min(query.last_week, this_week), this_week=this_week),
                "causes": [{"cause": c, "label": cause_label(c)} for c in report.causes],
                "weeks": [
                    {
                        "week": w.isoformat(),
                        "gpuHours": _hours(report.by_week.get(w, {})),
                        "total": str(hours(report.week_total(w))),
                    }
                    for w in report.weeks
                ],
                "byClass": [
                    {"class": report.class_names.get(k, str(k)), "gpuHours": _hours(v)}
                    for k, v in sorted(report.by_class.items())
                ],
                "byTeam": [
                    {"team": names.get(k, str(k)), "gpuHours": _hours(v)} for k, v in sorted(report.by_team.items())
                ],
                "total": {"gpuHours": _hours(report.total), "total": str(hours(report.total_us))},
                "waitingJobs": report.waiting_jobs,
            }
        )


class WaitingJobsView(WaitingAPIMixin, APIView):
    """The jobs behind one week and cause of the wait report, most GPU-hours first (at most 200)."""

    @extend_schema(
        responses=OpenApiTypes.OBJECT,
        summary="The jobs behind one week and cause",
        parameters=[
            *FILTERS,
            OpenApiParameter("week", OpenApiTypes.DATE, required=True, description="Any day of the week."),
            OpenApiParameter("cause", OpenApiTypes.STR, required=True, description="A cause (see /api/waiting/)."),
        ],
    )
    def get(self, request: Request) -> Response:
        form, query, _teams = self.form(WaitJobsForm)
        drill = wait_jobs(
            teams=query.scope,
            week=form.cleaned_data["week"],
            cause=form.cleaned_data["cause"],
            now=timezone.now(),
            resource_class=query.resource_class,
            limit=200,
        )
        return Response(
            {
                "week": drill.week.isoformat(),
                "cause": drill.cause,
                "count": drill.count,
                "gpuHours": str(drill.total_hours),
                "results": [
                    {
                        "job": r.job.pk,
                        "name": r.job.name,
                        "team": r.job.team.slug,
                        "class": r.job.resource_class.slug,
                        "devices": r.job.total_devices,
                        "waitHours": str(r.wait_hours),
                        "gpuHours": str(r.device_hours),
                        "stillWaiting": r.still_waiting,
                    }
                    for r in drill.rows
                ],
            }
        )
