"""Reads of notify: what was sent to a user, and what is waiting or was not sent."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Prefetch, QuerySet

from notify.models import Delivery, Digest, Event


def digests_of(user: AbstractBaseUser, *, limit: int = 50) -> list[Digest]:
    """The user's latest digests with their deliveries (channel, state, when) and events (two more queries)."""
    return list(
        Digest.objects.filter(recipient=user)
        .prefetch_related(
            Prefetch("deliveries", queryset=Delivery.objects.order_by("channel")),
            Prefetch("events", queryset=Event.objects.order_by("id")),
        )
        .order_by("-created_at", "-id")[:limit]
    )


def events_unsent(user: AbstractBaseUser, *, limit: int = 50) -> QuerySet[Event]:
    """The user's events not in a digest: pending (the next delivery takes them) or skipped, newest first."""
    return Event.objects.filter(recipient=user, digest__isnull=True).order_by("-recorded_at", "-id")[:limit]
