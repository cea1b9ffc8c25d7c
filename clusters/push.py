"""Make a cluster follow a saved policy change: one attempt of a recorded push, through the cluster's backend.

Kubernetes clusters get the portal's Kueue objects applied; a simulated cluster runs one scheduling tick, since
its engine reads the policy from the database. The status rows and their retry schedule are
:mod:`queues.policy.pushes`.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from clusters.backends import backend_for
from clusters.errors import ClusterError, ClusterUnavailable
from queues.models import PolicyPush
from queues.policy.pushes import backoff_seconds, max_attempts

log = logging.getLogger(__name__)


def policy_push_run(*, push_id: int, now: datetime | None = None) -> PolicyPush | None:
    """Attempt one push and record its outcome; a push already applied is left alone (idempotent)."""
    now = now or timezone.now()
    with transaction.atomic():
        push = PolicyPush.objects.select_for_update().select_related("cluster").filter(pk=push_id).first()
        if push is None or push.state in (PolicyPush.State.SUCCEEDED, PolicyPush.State.FAILED):
            return push
        push.attempts += 1
        push.last_attempt_at = now
        push.save(update_fields=["attempts", "last_attempt_at"])
    fields = ["state", "error", "report", "next_attempt_at", "finished_at"]
    try:
        report = backend_for(push.cluster).push_policy(now=now)
    except ClusterUnavailable as exc:
        push.error = f"cluster unreachable (attempt {push.attempts}): {exc.message}"[:4000]
        if push.attempts >= max_attempts():
            push.state, push.next_attempt_at, push.finished_at = PolicyPush.State.FAILED, None, now
        else:
            push.state = PolicyPush.State.RETRYING
            push.next_attempt_at = now + timedelta(seconds=backoff_seconds(push.attempts))
    except ClusterError as exc:
        push.error = f"the cluster rejected the policy: {exc.message}"[:4000]
        push.state, push.next_attempt_at, push.finished_at = PolicyPush.State.FAILED, None, now
    else:
        push.state, push.error, push.report = PolicyPush.State.SUCCEEDED, "", report
        push.next_attempt_at, push.finished_at = None, now
    push.save(update_fields=fields)
    log.info("policy push %s to %s: %s %s", push.pk, push.cluster.name, push.state, push.error or push.report)
    return push
