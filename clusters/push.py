"""Make clusters follow a saved policy change at once: a status row per cluster, a task after commit, retries.

Kubernetes clusters get the portal's Kueue objects applied (``clusters.kube_sync.config.kube_config_push``);
a simulated cluster runs one scheduling tick, since its engine reads the policy from the database. A
cluster that cannot be reached is retried with exponential backoff (by the task, and by a beat sweep
for pushes whose retry was lost); a request the cluster rejects is not retried: the error is shown
until a corrected policy is pushed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta
from functools import partial

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from pools.models import Cluster
from queues.models import PolicyPush

log = logging.getLogger(__name__)


def backoff_seconds(attempts: int) -> int:
    """Delay before the next attempt after ``attempts`` failed ones: 30 s, 60 s, 120 s … capped at 30 min."""
    base = int(getattr(settings, "POLICY_PUSH_BACKOFF_SECONDS", 30))
    return min(base * 2 ** max(attempts - 1, 0), int(getattr(settings, "POLICY_PUSH_BACKOFF_MAX_SECONDS", 1800)))


def max_attempts() -> int:
    """Attempts before a push to an unreachable cluster gives up (the next policy change pushes again)."""
    return int(getattr(settings, "POLICY_PUSH_MAX_ATTEMPTS", 8))


def policy_push_request(
    *, clusters: Iterable[Cluster], reason: str, user=None, now: datetime | None = None
) -> list[PolicyPush]:
    """Record one push per cluster and enqueue it once the surrounding transaction commits."""
    from queues.tasks import policy_push

    now = now or timezone.now()
    rows = []
    for cluster in {c.pk: c for c in clusters}.values():
        row = PolicyPush.objects.create(
            cluster=cluster,
            reason=reason[:300],
            requested_by=user if getattr(user, "pk", None) else None,
            requested_at=now,
        )
        transaction.on_commit(partial(policy_push.delay, row.pk))
        rows.append(row)
    return rows


def policy_push_clusters(*, model_name: str, instance=None) -> list[Cluster]:
    """The clusters a change to a policy object reaches: its own cluster where it has one, else all of them."""
    cluster_id = getattr(instance, "cluster_id", None)
    if model_name in ("teamquota", "cluster") and instance is not None:
        return list(Cluster.objects.filter(pk=cluster_id if model_name == "teamquota" else instance.pk))
    return list(Cluster.objects.order_by("name"))


def _apply(push: PolicyPush, now: datetime) -> str:
    """Apply the policy to the push's cluster; the report line, or a backend exception."""
    cluster = push.cluster
    if cluster.backend == Cluster.Backend.KUBERNETES:
        from clusters.backends.kubernetes import KubernetesBackend
        from clusters.kube_sync.api import KubeRejected
        from clusters.kube_sync.config import kube_config_push

        report = kube_config_push(cluster=cluster, api=KubernetesBackend(cluster).api, now=now)
        problems = report.errors + [f"{c}: field conflict with another manager" for c in report.conflicts]
        if problems:
            raise KubeRejected("; ".join(problems))
        return f"kubernetes: {report.text()}"
    from clusters.backends.simulated import simulated_cluster_tick_run

    tick = simulated_cluster_tick_run(cluster_id=cluster.pk, now=now)
    return (
        f"simulated cluster rescheduled under the new policy: {len(tick.admitted)} admitted, "
        f"{len(tick.preempted)} preempted, {tick.reasons_changed} wait reasons changed"
    )


def policy_push_run(*, push_id: int, now: datetime | None = None) -> PolicyPush | None:
    """Attempt one push and record its outcome; a push already applied is left alone (idempotent)."""
    from clusters.kube_sync.api import KubeError, KubeUnavailable

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
        report = _apply(push, now)
    except KubeUnavailable as exc:
        push.error = f"cluster unreachable (attempt {push.attempts}): {exc.message}"[:4000]
        if push.attempts >= max_attempts():
            push.state, push.next_attempt_at, push.finished_at = PolicyPush.State.FAILED, None, now
        else:
            push.state = PolicyPush.State.RETRYING
            push.next_attempt_at = now + timedelta(seconds=backoff_seconds(push.attempts))
    except KubeError as exc:
        push.error = f"the cluster rejected the policy: {exc.message}"[:4000]
        push.state, push.next_attempt_at, push.finished_at = PolicyPush.State.FAILED, None, now
    else:
        push.state, push.error, push.report = PolicyPush.State.SUCCEEDED, "", report
        push.next_attempt_at, push.finished_at = None, now
    push.save(update_fields=fields)
    log.info("policy push %s to %s: %s %s", push.pk, push.cluster.name, push.state, push.error or push.report)
    return push


def policy_pushes_due(*, now: datetime | None = None) -> list[int]:
    """Ids of failed pushes whose next attempt is due (the beat sweep retries them)."""
    now = now or timezone.now()
    return list(
        PolicyPush.objects.filter(state=PolicyPush.State.RETRYING, next_attempt_at__lte=now)
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def policy_push_retry_now(*, push: PolicyPush, now: datetime | None = None) -> PolicyPush:
    """An admin asks for another attempt of a failed push: it becomes due at once."""
    from queues.tasks import policy_push

    with transaction.atomic():
        PolicyPush.objects.filter(pk=push.pk).update(
            state=PolicyPush.State.RETRYING, next_attempt_at=now or timezone.now(), finished_at=None
        )
        transaction.on_commit(partial(policy_push.delay, push.pk))
    push.refresh_from_db()
    return push
