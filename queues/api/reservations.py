"""REST API of reservations (``/api/reservations/``): list, read, request, cancel; admins approve and refuse.

The same selectors and services as the pages: a member sees their teams' reservations (a token: its team's), admins
and operators every one; leads request for their team (the rules answer at once: a refusal is 409 with its reasons,
the refused request kept), who asked, the team's leads and admins cancel.
"""

from __future__ import annotations

from datetime import timedelta

from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import exceptions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from pools.models import ResourceClass, ResourceFlavor
from queues.api.views import TEAM_PARAM, PortalAPIMixin
from queues.models import Reservation
from queues.reservations import selectors as rsel
from queues.reservations.services import (
    ReservationForbidden,
    reservation_approve,
    reservation_cancel,
    reservation_refuse,
    reservation_request,
)

#: Reservations listed by default: those whose window ended at most this long ago, and every later one.
RECENT = timedelta(days=30)
STATE_PARAM = OpenApiParameter(
    "state", OpenApiTypes.STR, enum=list(Reservation.State.values), description="Only reservations in this state."
)
PAST_PARAM = OpenApiParameter(
    "days", OpenApiTypes.INT, description="Also windows that ended up to this many days ago (default 30, at most 366)."
)


class ReservationSerializer(serializers.ModelSerializer):
    """A reservation: what was asked, the rules' or the admin's answer, and its window's edges on the cluster."""

    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    resource_class = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    flavor = serializers.SlugRelatedField(slug_field="name", read_only=True)
    requested_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    decided_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    cancelled_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    window_end = serializers.DateTimeField(read_only=True, help_text="Its end, or its cancellation if earlier.")

    class Meta:
        model = Reservation
        fields = [
            "id",
            "team",
            "cluster",
            "resource_class",
            "flavor",
            "resource_name",
            "count",
            "starts_at",
            "ends_at",
            "window_end",
            "purpose",
            "state",
            "decision",
            "reasons",
            "decision_note",
            "requested_by",
            "requested_at",
            "decided_by",
            "decided_at",
            "cancelled_by",
            "cancelled_at",
            "opened_at",
            "closed_at",
        ]
        read_only_fields = fields


class ReservationRequestSerializer(serializers.Serializer):
    """A lead's request: devices of a class (optionally one of its flavors) for a window."""

    team = serializers.SlugField(required=False, help_text="Team slug (a token's team when omitted).")
    resource_class = serializers.SlugRelatedField(
        slug_field="slug", queryset=ResourceClass.objects.filter(active=True), help_text="Class slug, e.g. h100."
    )
    flavor = serializers.SlugRelatedField(
        slug_field="name", queryset=ResourceFlavor.objects.all(), required=False, help_text="One flavor of the class."
    )
    count = serializers.IntegerField(min_value=1, max_value=4096)
    starts_at = serializers.DateTimeField()
    ends_at = serializers.DateTimeField()
    purpose = serializers.CharField(max_length=200)


class ReservationDecisionSerializer(serializers.Serializer):
    """An admin's words with a decision (required to refuse)."""

    note = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")


@extend_schema_view(
    list=extend_schema(summary="Reservations you see", parameters=[TEAM_PARAM, STATE_PARAM, PAST_PARAM]),
    retrieve=extend_schema(summary="One reservation"),
)
class ReservationViewSet(PortalAPIMixin, viewsets.GenericViewSet):
    """Reservations: a team's devices of a class for a time window."""

    serializer_class = ReservationSerializer
    lookup_value_converter = "int"

    def get_queryset(self):
        rows = rsel.reservations_visible_to(self.request.user).select_related("decided_by", "cancelled_by")
        token = self.token()
        return rows.filter(team=token.team) if token is not None else rows

    def get_object(self) -> Reservation:
        return get_object_or_404(self.get_queryset(), pk=self.kwargs["pk"])

    def list(self, request: Request) -> Response:
        rows = self.get_queryset()
        if request.query_params.get("team"):
            rows = rows.filter(team=self.api_team())
        state = request.query_params.get("state", "")
        if state:
            if state not in Reservation.State.values:
                raise exceptions.ValidationError({"state": [f"one of {', '.join(Reservation.State.values)}"]})
            rows = rows.filter(state=state)
        try:
            days = int(request.query_params.get("days", RECENT.days))
        except ValueError as exc:
            raise exceptions.ValidationError({"days": ["must be a whole number of days"]}) from exc
        if not 0 <= days <= 366:
            raise exceptions.ValidationError({"days": ["must be between 0 and 366"]})
        rows = rows.filter(ends_at__gt=timezone.now() - timedelta(days=days)).order_by("starts_at", "pk")
        return Response(ReservationSerializer(rows[:500], many=True).data)

    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(ReservationSerializer(self.get_object()).data)

    @extend_schema(
        summary="Request a reservation (approved at once within the rules, else waiting for an admin)",
        request=ReservationRequestSerializer,
        responses={201: ReservationSerializer, 409: OpenApiTypes.OBJECT},
    )
    def create(self, request: Request) -> Response:
        body = ReservationRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        team = self.api_team(slug=data.get("team"), required=True)
        try:
            row = reservation_request(
                team=team,
                user=request.user,
                resource_class=data["resource_class"],
                flavor=data.get("flavor"),
                count=data["count"],
                starts_at=data["starts_at"],
                ends_at=data["ends_at"],
                purpose=data["purpose"],
            )
        except ReservationForbidden as exc:
            raise exceptions.PermissionDenied(exc.message) from None
        answer = ReservationSerializer(row).data
        if row.state == Reservation.State.REFUSED:  # recorded with its reasons, but nothing is held
            return Response({"detail": " ".join(row.reasons), "reservation": answer}, status=status.HTTP_409_CONFLICT)
        return Response(answer, status=status.HTTP_201_CREATED)

    def _act(self, action) -> Response:
        try:
            done = action(self.get_object())
        except ReservationForbidden as exc:
            raise exceptions.PermissionDenied(exc.message) from None
        return Response(ReservationSerializer(done).data)

    @extend_schema(
        summary="Cancel a reservation (an open window closes now)",
        request=None,
        responses={200: ReservationSerializer, 409: OpenApiTypes.OBJECT},
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        return self._act(lambda r: reservation_cancel(reservation=r, user=request.user))

    @extend_schema(
        summary="Approve a waiting reservation (platform admins)",
        request=ReservationDecisionSerializer,
        responses={200: ReservationSerializer, 409: OpenApiTypes.OBJECT},
    )
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str) -> Response:
        body = ReservationDecisionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        note = body.validated_data["note"]
        return self._act(lambda r: reservation_approve(reservation=r, user=request.user, note=note))

    @extend_schema(
        summary="Refuse a waiting reservation, saying why (platform admins)",
        request=ReservationDecisionSerializer,
        responses={200: ReservationSerializer, 409: OpenApiTypes.OBJECT},
    )
    @action(detail=True, methods=["post"])
    def refuse(self, request: Request, pk: str) -> Response:
        body = ReservationDecisionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        note = body.validated_data["note"]
        return self._act(lambda r: reservation_refuse(reservation=r, user=request.user, note=note))
