"""REST API viewsets: thin, the same selectors and services as the pages, the same visibility rule.

Authentication: a team-scoped token (``Authorization: Token <key>``) or the browser session. The team a
request acts in comes from the token, or from a ``team`` parameter checked against the caller's
memberships (admins and operators read any team's jobs), or, in the browser session, the team chosen in
the portal's team switcher. Another team's job is not found (404). ``DomainError`` → 400, ``Conflict`` → 409.
"""

from __future__ import annotations

import dataclasses
import logging
from urllib.parse import urlencode

from django.conf import settings
from django.shortcuts import get_object_or_404
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import exceptions, status, viewsets
from rest_framework.authentication import SessionAuthentication
from rest_framework.decorators import action
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from kernel.errors import Conflict, DomainError, ValidationFailed
from kernel.outages import RETRY_AFTER_SECONDS, outage_of
from queues import diagnosis, idle, services
from queues import selectors as sel
from queues.api import serializers as s
from queues.api.authentication import TeamTokenAuthentication
from queues.api.tokens import api_token_create, api_token_revoke
from queues.forms import JobFilterForm
from queues.models import ApiToken, Job, Team
from queues.ports import ClusterUnreachable, cluster_port
from queues.privacy import redactor_for
from queues.views import SESSION_TEAM

TEAM_PARAM = OpenApiParameter(
    "team", OpenApiTypes.STR, description="Team slug (must be one of yours; a token is fixed to its team)."
)
MAX_LIMIT = 200
log = logging.getLogger(__name__)


def api_exception_handler(exc, context):
    """The project's domain errors as HTTP: ValidationFailed → 400 by field, Conflict → 409, DomainError → 400; a
    dependency that is down (database, broker, cache) → 503 with Retry-After."""
    dependency = "" if isinstance(exc, exceptions.APIException) else outage_of(exc)
    if dependency:
        log.warning(
            "API %s: the %s is unreachable: %s: %s", context["request"].path, dependency, type(exc).__name__, exc
        )
        body = {
            "detail": f"The portal's {dependency} cannot be reached right now: try again shortly.",
            "unavailable": dependency,
        }
        return Response(
            body, status=status.HTTP_503_SERVICE_UNAVAILABLE, headers={"Retry-After": str(RETRY_AFTER_SECONDS)}
        )
    if isinstance(exc, ValidationFailed):
        return Response(exc.errors, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, Conflict):
        return Response({"detail": exc.message}, status=status.HTTP_409_CONFLICT)
    if isinstance(exc, DomainError):
        body = {"detail": exc.message, **({"field": exc.field} if exc.field else {})}
        return Response(body, status=status.HTTP_400_BAD_REQUEST)
    return drf_exception_handler(exc, context)


#: The most log lines per pod one API call returns.
MAX_LOG_TAIL = 1000


class PortalAPIMixin:
    """Authentication, permissions, error mapping and team resolution shared by every endpoint."""

    authentication_classes = [TeamTokenAuthentication, SessionAuthentication]
    permission_classes = [IsAuthenticated]

    def get_exception_handler(self):
        return api_exception_handler

    def check_permissions(self, request: Request) -> None:
        """Throttles first: an anonymous call is counted (and refused past its rate) before it is told to sign in."""
        self.check_throttles(request)
        super().check_permissions(request)

    def check_throttles(self, request: Request) -> None:
        """DRF's throttles, once per request (check_permissions runs them early)."""
        if getattr(request, "_portal_throttled", False):
            return
        request._portal_throttled = True
        super().check_throttles(request)

    def token(self) -> ApiToken | None:
        """The API token of the request, if it came with one."""
        auth = self.request.auth
        return auth if isinstance(auth, ApiToken) else None

    def api_team(self, *, slug: str | None = None, required: bool = False) -> Team | None:
        """The team the request acts in: the token's, or ``team`` (body or query) if the caller is a member."""
        request: Request = self.request
        slug = slug or request.query_params.get("team") or None
        token = self.token()
        if token is not None:
            if slug and slug != token.team.slug:
                raise exceptions.PermissionDenied(f"this token is scoped to team {token.team.slug}")
            return token.team
        if slug:
            team = sel.team_for(request.user, slug=slug)
            if team is None and not required and sel.sees_every_team(request.user):
                team = Team.objects.filter(slug=slug).first()  # admins and operators read every team's jobs
                if team is None:
                    raise exceptions.NotFound(f"there is no team {slug}")
            if team is None:
                raise exceptions.PermissionDenied(f"you are not a member of team {slug}")
            return team
        if isinstance(request.successful_authenticator, SessionAuthentication):
            # signed in through the browser: the team chosen in the portal's team switcher
            chosen = request.session.get(SESSION_TEAM)
            team = sel.team_for(request.user, pk=chosen) if isinstance(chosen, int) else None
            if team is not None:
                return team
        teams = list(sel.teams_of(request.user)[:2])
        if len(teams) == 1:
            return teams[0]
        if required:
            raise exceptions.ValidationError({"team": ["say which team: you belong to several (or none)"]})
        return None


# --------------------------------------------------------------------------- jobs


class JobPageSchema(AutoSchema):
    """The job list answers one page object (results, next, previous), not a list of them."""

    def _is_list_view(self, serializer=None) -> bool:
        if getattr(self.view, "action", None) == "list":
            return False
        return super()._is_list_view(serializer)


@extend_schema_view(
    list=extend_schema(
        operation_id="jobs_list",
        summary="List jobs (newest first, cursor-paginated)",
        parameters=[
            TEAM_PARAM,
            OpenApiParameter("scope", OpenApiTypes.STR, enum=["team", "mine"]),
            OpenApiParameter("state", OpenApiTypes.STR, enum=[c for c, _ in Job.State.choices]),
            OpenApiParameter("resource_class", OpenApiTypes.STR, description="Class slug."),
            OpenApiParameter("owner", OpenApiTypes.STR, description="Username."),
            OpenApiParameter("submitted_from", OpenApiTypes.DATE),
            OpenApiParameter("submitted_to", OpenApiTypes.DATE),
            OpenApiParameter("cursor", OpenApiTypes.STR, description="From a previous page's next/previous."),
            OpenApiParameter("limit", OpenApiTypes.INT, description=f"Page size, at most {MAX_LIMIT} (default 50)."),
        ],
        responses=s.JobPageSerializer,
    ),
    retrieve=extend_schema(summary="Get a job", responses=s.JobSerializer),
    create=extend_schema(
        summary="Submit a job",
        request=s.JobSubmitSerializer,
        responses={201: s.JobSerializer, 400: OpenApiTypes.OBJECT},
        description="Same validation as the submit form; a 400 lists the problems by field.",
    ),
)
class JobViewSet(PortalAPIMixin, viewsets.GenericViewSet):
    """Jobs of the caller's team(s)."""

    schema = JobPageSchema()

    serializer_class = s.JobSerializer
    lookup_value_converter = "int"

    def get_queryset(self):
        return sel.jobs_visible_to(self.request.user, team=self.api_team()).select_related(
            "team", "owner", "cluster", "resource_class", "priority_class", "assigned_flavor"
        )

    def get_object(self) -> Job:
        return get_object_or_404(self.get_queryset(), pk=self.kwargs["pk"])

    def _private(self) -> dict:
        """Serializer context: the caller's redactor (queues.privacy)."""
        return {"redactor": redactor_for(self.request.user)}

    def list(self, request: Request) -> Response:
        team = self.api_team()
        form = JobFilterForm(request.query_params, team=team, user=request.user)
        if not form.is_valid():
            raise exceptions.ValidationError(form.errors)
        try:
            limit = min(max(int(request.query_params.get("limit", 50)), 1), MAX_LIMIT)
        except ValueError as exc:
            raise exceptions.ValidationError({"limit": ["must be a number"]}) from exc
        qs = sel.filter_jobs(sel.jobs_visible_to(request.user, team=team), form.filters(), user=request.user)
        page = sel.job_list_page(qs, cursor=form.page_cursor(), per_page=limit)
        params = {k: v for k, v in request.query_params.items() if k != "cursor"}

        def link(cursor: str | None) -> str | None:
            if not cursor:
                return None
            return request.build_absolute_uri(f"{request.path}?{urlencode({**params, 'cursor': cursor})}")

        return Response(
            {
                "results": s.JobListSerializer(page.jobs, many=True).data,
                "next": link(page.next_cursor),
                "previous": link(page.prev_cursor),
            }
        )

    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(s.JobSerializer(self.get_object(), context=self._private()).data)

    def create(self, request: Request) -> Response:
        body = s.JobSubmitSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        team = self.api_team(slug=body.validated_data.get("team"), required=True)
        spec = body.spec()
        offer = sel.class_offer_errors(team, spec.resource_class)
        if offer:  # reported with every other problem of the body, all at once
            raise ValidationFailed({**services.job_spec_errors(spec, team=team), **offer})
        job = services.job_submit(owner=request.user, team=team, spec=spec)
        job = Job.objects.select_related(
            "team", "owner", "cluster", "resource_class", "priority_class", "assigned_flavor"
        ).get(pk=job.pk)
        return Response(s.JobSerializer(job, context=self._private()).data, status=status.HTTP_201_CREATED)

    @extend_schema(summary="Cancel a job", request=None, responses={200: s.JobSerializer, 409: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        job = self.get_object()
        if not sel.may_act_on_job(request.user, job):  # an operator: 403, as on the page (not the service's 400)
            raise exceptions.PermissionDenied(
                "operators see every team's jobs read-only: cancelling is for the team's members"
            )
        job = services.job_cancel(job=job, user=request.user)
        return Response(s.JobSerializer(job, context=self._private()).data)

    @extend_schema(
        summary="Snooze the job's idle-GPU warning (once per job, owner only)",
        request=None,
        responses={200: s.JobSerializer, 409: OpenApiTypes.OBJECT},
    )
    @action(detail=True, methods=["post"], url_path="idle-snooze")
    def idle_snooze(self, request: Request, pk: str) -> Response:
        job = self.get_object()
        if not sel.may_act_on_job(request.user, job):  # an operator: 403, as for cancelling
            raise exceptions.PermissionDenied("operators see every team's jobs read-only: snoozing is for its owner")
        idle.job_idle_snooze(job=job, user=request.user)
        return Response(s.JobSerializer(self.get_object(), context=self._private()).data)

    @extend_schema(
        summary="Why the job waits: reason, since, position, ETA, suggestions", responses=s.DiagnosisSerializer
    )
    @action(detail=True, methods=["get"], url_path="wait-reason")
    def wait_reason(self, request: Request, pk: str) -> Response:
        found = redactor_for(request.user).fields(diagnosis.job_diagnosis(self.get_object()))
        return Response(s.DiagnosisSerializer(found).data)

    @extend_schema(
        summary="The job's last log lines per pod, asked of its cluster now",
        parameters=[
            OpenApiParameter(
                "tail", int, description=f"lines per pod, 1 to {MAX_LOG_TAIL} (default: JOB_LOG_TAIL_LINES)"
            )
        ],
        responses={200: s.JobLogsSerializer, 400: OpenApiTypes.OBJECT, 503: OpenApiTypes.OBJECT},
    )
    @action(detail=True, methods=["get"])
    def logs(self, request: Request, pk: str) -> Response:
        job = self.get_object()
        raw = request.query_params.get("tail") or str(settings.JOB_LOG_TAIL_LINES)
        if not raw.isdigit() or not 1 <= int(raw) <= MAX_LOG_TAIL:
            raise exceptions.ValidationError({"tail": [f"a whole number of lines from 1 to {MAX_LOG_TAIL}"]})
        try:
            pods = cluster_port().job_logs(job_id=job.pk, tail_lines=int(raw))
        except ClusterUnreachable as exc:
            return Response(
                {"detail": f"the job's cluster does not answer, so its logs cannot be read now: {exc.message}"},
                status=status.HTTP_503_SERVICE_UNAVAILABLE,
            )
        data = {"job": job.pk, "state": job.state, "tail_lines": int(raw), "pods": pods}
        return Response(s.JobLogsSerializer(data).data)

    @extend_schema(summary="The job's timeline", responses=s.TimelineEntrySerializer(many=True))
    @action(detail=True, methods=["get"])
    def timeline(self, request: Request, pk: str) -> Response:
        entries = sel.job_timeline(self.get_object(), redactor=redactor_for(request.user))
        return Response(s.TimelineEntrySerializer(entries, many=True).data)


class FeasibilityView(PortalAPIMixin, APIView):
    """Would a submission start now? Nothing is recorded."""

    @extend_schema(
        summary="Check a submission without submitting it",
        request=s.JobSubmitSerializer,
        responses={200: s.FeasibilitySerializer, 400: OpenApiTypes.OBJECT},
    )
    def post(self, request: Request) -> Response:
        body = s.JobSubmitSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        team = self.api_team(slug=body.validated_data.get("team"), required=True)
        spec = body.spec()
        errors = {**services.job_spec_errors(spec, team=team), **sel.class_offer_errors(team, spec.resource_class)}
        if errors:
            raise ValidationFailed(errors)
        result = diagnosis.spec_feasibility(owner=request.user, team=team, spec=spec)
        result = dataclasses.replace(result, verdict=redactor_for(request.user).fields(result.verdict))
        return Response(s.FeasibilitySerializer(result).data)


# --------------------------------------------------------------------------- classes, teams, tokens


@extend_schema_view(
    list=extend_schema(summary="Resource classes with availability, quota and expected wait", parameters=[TEAM_PARAM]),
    retrieve=extend_schema(summary="One resource class", parameters=[TEAM_PARAM]),
)
class ClassViewSet(PortalAPIMixin, viewsets.ViewSet):
    """The class catalogue."""

    lookup_field = "slug"
    lookup_value_converter = "slug"
    serializer_class = s.ClassSerializer

    def _cards(self) -> list[sel.ClassCard]:
        team = self.api_team(required=True)
        cards = sel.class_catalogue(team=team, cluster=sel.team_cluster(team))
        diagnosis.catalogue_wait_estimates(team=team, cards=cards, owner=self.request.user)
        return cards

    def list(self, request: Request) -> Response:
        return Response(s.ClassSerializer(self._cards(), many=True).data)

    def retrieve(self, request: Request, slug: str) -> Response:
        card = next((c for c in self._cards() if c.resource_class.slug == slug), None)
        if card is None:
            raise exceptions.NotFound("no active class with that slug")
        return Response(s.ClassSerializer(card).data)


class TeamViewSet(PortalAPIMixin, viewsets.ViewSet):
    """The caller's teams (a token: its team only)."""

    serializer_class = s.TeamSerializer

    @extend_schema(summary="Your teams")
    def list(self, request: Request) -> Response:
        token = self.token()
        teams = [token.team] if token else list(sel.teams_of(request.user))
        return Response(s.TeamSerializer(teams, many=True).data)


class TokenViewSet(PortalAPIMixin, viewsets.ViewSet):
    """Your API tokens. Issuing and revoking needs a signed-in browser session, not a token."""

    authentication_classes = [SessionAuthentication]
    serializer_class = s.ApiTokenSerializer
    lookup_value_converter = "int"

    @extend_schema(summary="Your tokens")
    def list(self, request: Request) -> Response:
        tokens = ApiToken.objects.filter(user=request.user).select_related("team")
        return Response(s.ApiTokenSerializer(tokens, many=True).data)

    @extend_schema(
        summary="Issue a token (the key is shown once)",
        request=s.ApiTokenCreateSerializer,
        responses={201: s.ApiTokenIssuedSerializer},
    )
    def create(self, request: Request) -> Response:
        body = s.ApiTokenCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        team = self.api_team(slug=body.validated_data["team"], required=True)
        issued = api_token_create(
            user=request.user, team=team, name=body.validated_data["name"], expires_at=body.validated_data["expires_at"]
        )
        data = s.ApiTokenSerializer(issued.token).data
        return Response({**data, "key": issued.key}, status=status.HTTP_201_CREATED)

    @extend_schema(summary="Revoke a token", request=None, responses=s.ApiTokenSerializer)
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str) -> Response:
        token = get_object_or_404(ApiToken.objects.filter(user=request.user), pk=pk)
        return Response(s.ApiTokenSerializer(api_token_revoke(token=token, user=request.user)).data)
