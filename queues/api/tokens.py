"""API tokens scoped to a team: create (the key is shown once), authenticate, revoke. Only hashes are stored."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from kernel.errors import ValidationFailed
from queues.models import ApiToken, Membership, Team

KEY_PREFIX = "gpp_"
#: ``last_used_at`` is written at most this often per token (a busy script must not write on every call).
TOUCH_EVERY = timedelta(minutes=1)


def hash_key(key: str) -> str:
    """SHA-256 of a key, hex (keys are 256 random bits: a slow hash adds nothing)."""
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass
class IssuedToken:
    """A new token and its key; the key is never stored and cannot be shown again."""

    token: ApiToken
    key: str


@transaction.atomic
def api_token_create(
    *, user: AbstractBaseUser, team: Team, name: str, expires_at: datetime | None = None, now: datetime | None = None
) -> IssuedToken:
    """Issue a token for ``user`` acting in ``team`` (a member only)."""
    now = now or timezone.now()
    errors: dict[str, list[str]] = {}
    if not Membership.objects.filter(user=user, team=team).exists():
        errors["team"] = [f"you are not a member of team {team.slug}"]
    if not name.strip():
        errors["name"] = ["say what the token is for"]
    if expires_at is not None and expires_at <= now:
        errors["expires_at"] = ["the expiry must be in the future"]
    if errors:
        raise ValidationFailed(errors)
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        team=team,
        user=user,
        name=name.strip(),
        prefix=key[: len(KEY_PREFIX) + 6],
        key_hash=hash_key(key),
        created_at=now,
        expires_at=expires_at,
    )
    return IssuedToken(token=token, key=key)


def api_token_authenticate(key: str, *, now: datetime | None = None) -> ApiToken | None:
    """The live token for ``key`` (not revoked, not expired, its user still in its team), marking it used."""
    now = now or timezone.now()
    token = (
        ApiToken.objects.select_related("team", "user")
        .filter(key_hash=hash_key(key), revoked=False, user__is_active=True)
        .first()
    )
    if token is None or (token.expires_at is not None and token.expires_at <= now):
        return None
    if not Membership.objects.filter(user_id=token.user_id, team_id=token.team_id).exists():
        return None
    if token.last_used_at is None or now - token.last_used_at >= TOUCH_EVERY:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def api_token_revoke(*, token: ApiToken, user: AbstractBaseUser) -> ApiToken:
    """Revoke a token (its owner only); revoking twice is harmless."""
    if token.user_id != user.pk:
        raise ValidationFailed({"token": ["only the token's owner can revoke it"]})
    if not token.revoked:
        token.revoked = True
        token.save(update_fields=["revoked"])
    return token
