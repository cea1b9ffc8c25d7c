"""Sending one digest on one channel: email through Django's mail backend, or an incoming-webhook POST.

Both carry the digest's key — the email's ``Message-ID`` and an ``X-Portal-Digest`` header, the webhook's
``Idempotency-Key`` header — so a receiver that sees a digest twice (a worker died after the send and before it
could record it) can tell it is the same one.
"""

from __future__ import annotations

import json
import logging

from django.conf import settings
from django.core.mail import EmailMessage

from kernel.egress import EgressRefused, EgressUnavailable, egress_request
from notify.models import Delivery, Digest
from notify.services import webhook_policy

log = logging.getLogger(__name__)


class SendFailed(Exception):
    """The channel did not accept the digest (the delivery is retried later)."""


class SendRefused(SendFailed):
    """The digest may not be sent there at all (the webhook's address is not allowed): not retried."""


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
    """POST ``{"text": …}`` (what Slack, Teams and Mattermost incoming webhooks accept) through the egress guard;
    2xx is accepted. What the receiver answered is never kept beyond its status class: the error is shown to the
    user, and a reply's body (or whether a port is open) must not tell them anything about the network."""
    body = json.dumps({"text": f"*{digest.subject}*\n{digest.text}"}, ensure_ascii=False).encode()
    headers = {
        "Content-Type": "application/json",
        "Idempotency-Key": str(digest.key),
        "User-Agent": "gpu-pool-portal-notify",
    }
    try:
        response = egress_request(
            "POST",
            url,
            policy=webhook_policy(),
            timeout=settings.NOTIFY_WEBHOOK_TIMEOUT_SECONDS,
            body=body,
            headers=headers,
            max_bytes=1024,
        )
    except EgressRefused as exc:
        raise SendRefused(f"webhook not called: {exc.message}") from None
    except EgressUnavailable as exc:
        raise SendFailed(f"webhook unreachable: {exc.message}") from None
    if not 200 <= response.status < 300:
        log.info("webhook of digest %s: %s answered HTTP %s", digest.key, response.address, response.status)
        redirect = " (redirects are not followed)" if 300 <= response.status < 400 else ""
        raise SendFailed(f"webhook answered {response.status_class}{redirect}")


def channel_send(delivery: Delivery) -> None:
    """Send the delivery's digest on its channel (raises SendFailed)."""
    if delivery.channel == Delivery.Channel.EMAIL:
        _email(delivery.digest, delivery.target)
    else:
        _webhook(delivery.digest, delivery.target)
