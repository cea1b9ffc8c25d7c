"""Writes of notify a user makes: their notification preferences."""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from kernel.errors import ValidationFailed
from notify.kinds import Kind
from notify.models import Preference
from notify.record import Pending, events_record


def webhook_url_errors(url: str) -> list[str]:
    """Why a webhook URL is refused: not http(s), or its host is not in ``NOTIFY_WEBHOOK_ALLOWED_HOSTS`` (when set)."""
    if not url:
        return []
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return ["give an http:// or https:// URL, e.g. https://hooks.slack.com/services/…"]
    allowed = settings.NOTIFY_WEBHOOK_ALLOWED_HOSTS
    if allowed and not any(parts.hostname == h or parts.hostname.endswith("." + h) for h in allowed):
        return [f"webhooks may only go to {', '.join(allowed)} (ask an admin)"]
    return []


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
