"""A single sign-on sign-in: find or create the user behind (issuer, subject), refresh the profile, apply the mapping.

Users are matched by the provider's stable subject, never by e-mail or username: a local account (the demo's,
a break-glass admin) is never taken over by a provider account that happens to share its address or name. A new
subject gets a new user (the username from ``preferred_username`` or the e-mail, made unique) with no usable
password.

The mapping (``portal.models.SsoMapping``) is applied at every sign-in: team memberships through
``queues.memberships`` (the provider owns the memberships it granted; an admin's stay), platform admin (staff and
superuser) and the operator group directly on the user, each taken back only if sign-on gave it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from portal.models import SsoIdentity, SsoMapping
from portal.sso.claims import ClaimValues, claim_values, normalise_group, profile, username_base
from queues.memberships import memberships_sync_from_sso, strongest_role
from queues.models import Team
from queues.visibility import OPERATOR_GROUP

logger = logging.getLogger(__name__)


def matching_mappings(values: ClaimValues) -> list[SsoMapping]:
    """The mapping rows the claim values match (a group row with or without a Keycloak path's leading slash)."""
    groups = set(values.groups) | {"/" + g for g in values.groups}
    query = Q(claim=SsoMapping.Claim.GROUP, value__in=groups) | Q(claim=SsoMapping.Claim.ROLE, value__in=values.roles)
    rows = SsoMapping.objects.filter(query | Q(claim=SsoMapping.Claim.DOMAIN)).select_related("team")
    return [
        row
        for row in rows
        if (row.claim == SsoMapping.Claim.DOMAIN and row.value.lower() in values.domains)
        or (row.claim == SsoMapping.Claim.GROUP and normalise_group(row.value) in values.groups)
        or (row.claim == SsoMapping.Claim.ROLE)
    ]


def _unique_username(base: str) -> str:
    """``base``, or ``base-2``, ``base-3``… where it is taken."""
    user_model = get_user_model()
    taken = set(
        user_model.objects.filter(Q(username__iexact=base) | Q(username__istartswith=base + "-")).values_list(
            "username", flat=True
        )
    )
    taken = {name.lower() for name in taken}
    candidate, n = base, 1
    while candidate.lower() in taken:
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def _user_for(*, issuer: str, subject: str, claims: Mapping[str, Any], now: datetime) -> tuple[User, bool]:
    """The user behind (issuer, subject), created on the first sign-in; the identity row locked."""
    identity = SsoIdentity.objects.select_for_update().select_related("user").filter(issuer=issuer, subject=subject)
    found = identity.first()
    if found is not None:
        return found.user, False
    user = get_user_model()(username=_unique_username(username_base(claims)))
    user.set_unusable_password()
    user.save()
    SsoIdentity.objects.create(user=user, issuer=issuer, subject=subject, last_sign_in_at=now)
    return user, True


def _apply_profile(user: User, claims: Mapping[str, Any]) -> list[str]:
    """Copy the e-mail and names the provider sent (a claim it did not send, or one refused as malformed, leaves the
    field as it is; a refusal is logged)."""
    sent = profile(claims)
    if sent.refused:
        logger.warning("single sign-on: %s sent a malformed %s: not copied", user, ", ".join(sent.refused))
    changed = []
    for field, value in sent.fields().items():
        if value and getattr(user, field) != value:
            setattr(user, field, value)
            changed.append(field)
    return changed


def _apply_admin(user: User, identity: SsoIdentity, granted: bool) -> list[str]:
    """Staff and superuser from an admin mapping; taken back when sign-on gave them and no mapping does now."""
    if granted and not (user.is_staff and user.is_superuser):
        user.is_staff = user.is_superuser = True
        identity.admin_from_sso = True
        return ["is_staff", "is_superuser"]
    if not granted and identity.admin_from_sso:
        user.is_staff = user.is_superuser = False
        identity.admin_from_sso = False
        return ["is_staff", "is_superuser"]
    return []


def _apply_operator(user: User, identity: SsoIdentity, granted: bool) -> None:
    """The operator group from an operator mapping; left when sign-on gave it and no mapping does now."""
    group = Group.objects.filter(name=OPERATOR_GROUP).first()  # made with its permission by a queues migration
    if group is None:
        logger.warning("single sign-on: no %r group; operator mappings grant nothing", OPERATOR_GROUP)
        return
    in_group = user.groups.filter(pk=group.pk).exists()
    if granted and not in_group:
        user.groups.add(group)
        identity.operator_from_sso = True
    elif not granted and identity.operator_from_sso:
        user.groups.remove(group)
        identity.operator_from_sso = False


@transaction.atomic
def sso_sign_in(*, claims: Mapping[str, Any], client_id: str, now: datetime | None = None) -> User:
    """The portal user for verified claims (``iss`` and ``sub`` required), with profile and mapping applied."""
    now = now or timezone.now()
    issuer, subject = claims["iss"], claims["sub"]
    user, created = _user_for(issuer=issuer, subject=subject, claims=claims, now=now)
    identity = SsoIdentity.objects.get(user=user)
    values = claim_values(
        claims, client_id=client_id, issuer=settings.OIDC_OP_ISSUER, extra_group_claims=settings.OIDC_EXTRA_GROUP_CLAIMS
    )
    if values.groups_overage:
        logger.warning(
            "single sign-on: %s has too many groups for the token (Entra ID overage); map app roles instead", user
        )
    rows = matching_mappings(values)
    teams: dict[Team, list[str]] = defaultdict(list)
    for row in rows:
        if row.grants in SsoMapping.TEAM_GRANTS and row.team is not None:
            teams[row.team].append(row.grants)
    grants = {row.grants for row in rows}
    changed = _apply_profile(user, claims) + _apply_admin(user, identity, SsoMapping.Grant.ADMIN in grants)
    if changed:
        user.save(update_fields=changed)
    _apply_operator(user, identity, SsoMapping.Grant.OPERATOR in grants)
    memberships = memberships_sync_from_sso(
        user=user, wanted={team: strongest_role(roles) for team, roles in teams.items()}
    )
    identity.last_sign_in_at = now
    identity.last_claim_values = values.as_json()
    identity.save()
    logger.info(
        "single sign-on: %s %s (%s at %s); teams added %s, changed %s, removed %s",
        "created" if created else "signed in",
        user,
        subject,
        issuer,
        memberships.added,
        memberships.changed,
        memberships.removed,
    )
    return user
