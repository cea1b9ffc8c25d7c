"""Writes of notify a user makes: their notification preferences."""

from __future__ import annotations

from collections.abc import Iterable

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from kernel.egress import EgressPolicy, url_problems
from kernel.errors import ValidationFailed
from notify.kinds import Kind
from notify.models import Preference
from notify.record import Pending, events_record


def webhook_policy() -> EgressPolicy:
    """Where users' webhooks may go: ``NOTIFY_WEBHOOK_ALLOWED_HOSTS`` (empty: any host) on public addresses, plus
    the networks an admin allows in ``NOTIFY_WEBHOOK_ALLOWED_NETWORKS`` (kernel.egress)."""
    return EgressPolicy.from_settings(
        hosts=settings.NOTIFY_WEBHOOK_ALLOWED_HOSTS, networks=settings.NOTIFY_WEBHOOK_ALLOWED_NETWORKS, what="webhooks"
    )


def webhook_url_errors(url: str) -> list[str]:
    """Why a webhook URL is refused (empty: none set, or acceptable as far as can be told without DNS): not a
    strictly well-formed http(s) URL, a host not allowed, or an address literal in a refused range. Where the name
    leads is checked again at each send."""
    if not url:
        return []
    return url_problems(url, webhook_policy())


def preference_get(user: User) -> Preference:
    """The user's preferences, or the defaults (unsaved) when they never set any."""
    return Preference.objects.filter(user=user).first() or Preference(user=user)


@transaction.atomic
def preference_set(*, user: User, email: bool, webhook_url: str, kinds: Iterable[str]) -> Preference:
    """Store how the user wants to be told: email on/off, an incoming webhook (or none), which kinds."""
    kinds = sorted(set(kinds))
    errors: dict[str, list[str]] = {}
    unknown = [k for k in kinds if k not in Kind.values]
    if unknown:
        errors["kinds"] = [f"unknown kinds: {', '.join(unknown)}"]
    if url_errors := webhook_url_errors(webhook_url.strip()):
        errors["webhook_url"] = url_errors
    if errors:
        raise ValidationFailed(errors)
    preference, _ = Preference.objects.update_or_create(
        user=user, defaults={"email": email, "webhook_url": webhook_url.strip(), "kinds": kinds}
    )
    return preference


@transaction.atomic
def test_message_record(*, user: User) -> None:
    """Queue a test message for the user on their channels (with the next digest), to check a webhook works."""
    now = timezone.now()
    events_record(
        [Pending(user.pk, Kind.TEST, f"test:{user.pk}:{now.isoformat()}", "Test message",
                 "This is a test of your notification settings: it reached you.", now)]
    )  # fmt: skip
