"""Who sees which jobs: a user's teams, the platform admin and operator roles, and the one visibility rule.

``jobs_visible_to`` is the rule: the pages, the REST API and anything else that lists or opens a job go through
it, so a job of another team is simply not found (404), never "forbidden". Platform admins (staff) and operators
(the read-only ``operator`` group, kept by queues.apps) see every team's jobs; acting on a job
(``may_act_on_job``) is for its team's members and platform admins. Re-exported by queues.selectors.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Q, QuerySet

from pools.health.selectors import HEALTH_READ_PERMISSION
from queues.models import Job, Membership, Team


def teams_of(user: AbstractBaseUser | AnonymousUser) -> QuerySet[Team]:
    """The teams a user is a member of, by name."""
    if not user.is_authenticated:
        return Team.objects.none()
    return Team.objects.filter(memberships__user=user).order_by("name", "pk")


def team_for(user: AbstractBaseUser | AnonymousUser, *, slug: str | None = None, pk: int | None = None) -> Team | None:
    """One of the user's teams, by slug or id; ``None`` when the user is not a member of it."""
    teams = teams_of(user)
    if slug:
        return teams.filter(slug=slug).first()
    if pk is not None:
        return teams.filter(pk=pk).first()
    return None


#: The permission of the read-only "operator" role (the ``operator`` group holds it): every team's jobs, no actions.
OPERATOR_PERMISSION = "queues.view_job"
#: The group of the read-only operator role, created by a migration with ``OPERATOR_PERMISSION``.
OPERATOR_GROUP = "operator"
#: Every permission the operator group holds: every team's jobs, and the pool's health pages (read-only).
OPERATOR_PERMISSIONS = (OPERATOR_PERMISSION, HEALTH_READ_PERMISSION)


def is_platform_admin(user: AbstractBaseUser | AnonymousUser) -> bool:
    """Whether the user is a platform admin (staff or superuser, active)."""
    return bool(user.is_authenticated and user.is_active and (user.is_staff or user.is_superuser))


def sees_every_team(user: AbstractBaseUser | AnonymousUser) -> bool:
    """Whether the user sees every team's jobs: a platform admin, or an operator (``OPERATOR_PERMISSION``)."""
    if not (user.is_authenticated and user.is_active):
        return False
    return is_platform_admin(user) or user.has_perm(OPERATOR_PERMISSION)


def users_seeing_every_team(user_ids: Iterable[int]) -> set[int]:
    """Which of these users see every team's jobs (``sees_every_team`` for many at once, in one query): active
    platform admins, and active holders of ``OPERATOR_PERMISSION`` directly or through a group."""
    app_label, codename = OPERATOR_PERMISSION.split(".")
    held = Q(user_permissions__codename=codename, user_permissions__content_type__app_label=app_label) | Q(
        groups__permissions__codename=codename, groups__permissions__content_type__app_label=app_label
    )
    users = get_user_model().objects.filter(pk__in=set(user_ids), is_active=True)
    return set(users.filter(Q(is_staff=True) | Q(is_superuser=True) | held).values_list("pk", flat=True))


def may_act_on_job(user: AbstractBaseUser | AnonymousUser, job: Job) -> bool:
    """Whether the user may act on a job (cancel it): a member of its team or a platform admin, not an operator."""
    if not user.is_authenticated:
        return False
    return is_platform_admin(user) or Membership.objects.filter(user=user, team_id=job.team_id).exists()


def jobs_visible_to(user: AbstractBaseUser | AnonymousUser, team: Team | None = None) -> QuerySet[Job]:
    """Jobs the user may see: those of the teams they belong to (every team's for admins and operators), or of
    ``team`` only (none if the user may not see that team's jobs)."""
    if not user.is_authenticated:
        return Job.objects.none()
    if sees_every_team(user):
        qs = Job.objects.all()
    else:
        qs = Job.objects.filter(team_id__in=Membership.objects.filter(user=user).values("team_id"))
    if team is not None:
        qs = qs.filter(team=team)
    return qs
