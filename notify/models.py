"""Lifecycle notifications: per-user preferences, the outbox of events, and the digests sent from it.

An :class:`Event` row is written in the same transaction as the change it reports (so none is lost, and a rolled
back change notifies nobody), once: its ``key`` is unique per recipient. The delivery task gathers a recipient's
pending events into one :class:`Digest` and sends it on each of their channels (:class:`Delivery`, one per
channel); a digest's ``key`` travels with every send of it, so a receiver can drop a repeat (docs/operations.md).
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from notify.kinds import CHOOSABLE, Kind


def all_kinds() -> list[str]:
    """Every kind a user can choose (the default: a new user hears about everything)."""
    return [value for value, _ in CHOOSABLE]


class Preference(models.Model):
    """How one user wants to hear about their jobs: email on/off, an incoming webhook, which kinds."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notify_preference")
    email = models.BooleanField(default=True, help_text="Send digests to the account's email address.")
    webhook_url = models.URLField(
        max_length=500, blank=True, help_text='A Slack / Teams / Mattermost incoming webhook (receives {"text": …}).'
    )
    kinds = models.JSONField(default=all_kinds, blank=True, help_text="The kinds of notification wanted.")

    def __str__(self) -> str:
        return f"preferences of {self.user_id}"


class Event(models.Model):
    """One thing to tell one user, recorded with the change it reports (the outbox)."""

    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        DIGESTED = "digested", "In a digest"
        SKIPPED = "skipped", "Not sent (switched off)"

    recipient = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notify_events")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    key = models.CharField(max_length=200, help_text="Idempotency key: the same change is recorded once.")
    job = models.ForeignKey("queues.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    team = models.ForeignKey("queues.Team", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    title = models.CharField(max_length=200)
    message = models.TextField()
    details = models.JSONField(default=dict, blank=True, help_text="E.g. the checkpoint deadline of a reclaim.")
    created_at = models.DateTimeField(help_text="When the change it reports happened.")
    recorded_at = models.DateTimeField(help_text="When it was written (digests wait on this, not on created_at).")
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    digest = models.ForeignKey("Digest", null=True, blank=True, on_delete=models.SET_NULL, related_name="events")

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [models.UniqueConstraint(fields=["recipient", "key"], name="notify_event_once")]
        indexes = [models.Index(fields=["state", "recipient", "id"], name="notify_event_pending")]

    def __str__(self) -> str:
        return f"{self.kind} for {self.recipient_id}: {self.key}"


class Digest(models.Model):
    """The events of one recipient gathered for one send: its text is fixed when it is made, so every retry of
    it is byte for byte the same, and its ``key`` names it to the receiver."""

    recipient = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notify_digests")
    key = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    subject = models.CharField(max_length=200)
    text = models.TextField()
    event_count = models.PositiveIntegerField()
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["recipient", "-created_at"], name="notify_digest_recent")]

    def __str__(self) -> str:
        return f"digest {self.key} ({self.event_count} events)"


class Delivery(models.Model):
    """One digest on one channel: written (``sending``) before the send, ``sent`` once the channel accepted it."""

    class Channel(models.TextChoices):
        EMAIL = "email", "Email"
        WEBHOOK = "webhook", "Webhook"

    class State(models.TextChoices):
        SENDING = "sending", "Sending"
        SENT = "sent", "Sent"
        FAILED = "failed", "Failed (gave up)"

    digest = models.ForeignKey(Digest, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.CharField(max_length=10, choices=Channel.choices)
    target = models.CharField(max_length=500, help_text="The address or webhook URL it went to.")
    state = models.CharField(max_length=10, choices=State.choices, default=State.SENDING)
    attempts = models.PositiveIntegerField(default=0)
    attempted_at = models.DateTimeField(null=True, blank=True, help_text="When the last send began.")
    sent_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ["digest", "channel"]
        verbose_name_plural = "deliveries"
        constraints = [models.UniqueConstraint(fields=["digest", "channel"], name="notify_delivery_once")]
        indexes = [models.Index(fields=["state", "attempted_at"], name="notify_delivery_state")]

    def __str__(self) -> str:
        return f"{self.channel} of {self.digest_id}: {self.state}"
