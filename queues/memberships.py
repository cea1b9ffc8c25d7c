"""Team memberships written from outside the admin: the single sign-on sync (portal.sso) at every sign-in.

A membership carries its source. ``sso`` memberships belong to the identity provider: each sign-in makes them
exactly what the provider's groups say (added, role changed, removed). ``manual`` memberships (the admin's) are
never touched by a sign-in, even when the provider names the same team: an admin who wants the provider to own
one deletes it (the next sign-in adds it back as ``sso``) or sets its source to ``sso``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from queues.models import Membership, Team

#: Higher wins when several groups grant one team.
ROLE_RANK = {Membership.Role.MEMBER: 1, Membership.Role.LEAD: 2}


@dataclass
class MembershipChanges:
    """What one sync did, by team slug (for the sign-in log)."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    kept_manual: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.removed)


def strongest_role(roles: list[str]) -> str:
    """The strongest of several roles granted for one team (lead over member)."""
    return max(roles, key=lambda role: ROLE_RANK[Membership.Role(role)])


@transaction.atomic
def memberships_sync_from_sso(*, user: AbstractBaseUser, wanted: Mapping[Team, str]) -> MembershipChanges:
    """Make the user's ``sso`` memberships exactly ``wanted`` (team → role); leave ``manual`` ones alone.

    Each write goes through the model (one audit-trail record per change). Rows are locked so two sign-ins of one
    user at once do not both add the same membership.
    """
    for role in wanted.values():
        Membership.Role(role)  # ValueError on an unknown role
    changes = MembershipChanges()
    current = {m.team_id: m for m in Membership.objects.select_for_update().filter(user=user).select_related("team")}
    for team, role in sorted(wanted.items(), key=lambda item: item[0].slug):
        membership = current.get(team.pk)
        if membership is None:
            Membership.objects.create(user=user, team=team, role=role, source=Membership.Source.SSO)
            changes.added.append(team.slug)
        elif membership.source == Membership.Source.MANUAL:
            changes.kept_manual.append(team.slug)
        elif membership.role != role:
            membership.role = role
            membership.save(update_fields=["role"])
            changes.changed.append(team.slug)
    wanted_ids = {team.pk for team in wanted}
    for team_id, membership in sorted(current.items(), key=lambda item: item[1].team.slug):
        if membership.source == Membership.Source.SSO and team_id not in wanted_ids:
            changes.removed.append(membership.team.slug)
            membership.delete()
    return changes
