"""Sending one digest on one channel: email through Django's mail backend, or an incoming-webhook POST.

Both carry the digest's key — the email's ``Message-ID`` and an ``X-Portal-Digest`` header, the webhook's
``Idempotency-Key`` header — so a receiver that sees a digest twice (a worker died after the send and before it
could record it) can tell it is the same one.
"""

from __future__ import annotations

import requests
from django.conf import settings
from django.core.mail import EmailMessage

from notify.models import Delivery, Digest


class SendFailed(Exception):
    """The channel did not accept the digest (the delivery is retried later)."""


def _email(digest: Digest, address: str) -> None:
    """Mail the digest; its Message-ID is derived from its key, the same on every retry."""
    message = EmailMessage(
        subject=digest.subject,
        body=digest.text,
        to=[address],
        headers={"Message-ID": f"<digest-{digest.key}@gpu-pool-portal>", "X-Portal-Digest": str(digest.key)},
    )
    try:
        message.send(fail_silently=False)
    except Exception as exc:  # SMTP errors come in many classes; all mean "not accepted"
        raise SendFailed(f"mail to {address} failed: {exc}") from exc


def _webhook(digest: Digest, url: str) -> None:
    """POST ``{"text": …}`` (what Slack, Teams and Mattermost incoming webhooks accept); 2xx is accepted."""
    try:
        response = requests.post(
            url,
            json={"text": f"*{digest.subject}*\n{digest.text}"},
            headers={"Idempotency-Key": str(digest.key), "User-Agent": "gpu-pool-portal-notify"},
            timeout=settings.NOTIFY_WEBHOOK_TIMEOUT_SECONDS,
            allow_redirects=False,
        )
    except requests.RequestException as exc:
        raise SendFailed(f"webhook unreachable: {exc}") from exc
    if not 200 <= response.status_code < 300:
        raise SendFailed(f"webhook answered {response.status_code}: {response.text[:200]}")


def channel_send(delivery: Delivery) -> None:
    """Send the delivery's digest on its channel (raises SendFailed)."""
    if delivery.channel == Delivery.Channel.EMAIL:
        _email(delivery.digest, delivery.target)
    else:
        _webhook(delivery.digest, delivery.target)
