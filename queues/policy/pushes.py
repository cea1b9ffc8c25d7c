"""The portal's side of pushing a saved policy change to the clusters: a status row per cluster, handed to the
cluster integration after commit (``queues.ports``), retried with exponential backoff while a cluster is
unreachable (by the task, and by a beat sweep for pushes whose retry was lost); a refusal is not retried: the
error is shown until a corrected policy is pushed. The push itself runs in :mod:`clusters.push`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from functools import partial

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from pools.models import Cluster
from queues.models import PolicyPush
from queues.ports import cluster_port


def backoff_seconds(attempts: int) -> int:
    """Delay before the next attempt after ``attempts`` failed ones: 30 s, 60 s, 120 s … capped at 30 min."""
    base = int(settings.POLICY_PUSH_BACKOFF_SECONDS)
    return min(base * 2 ** max(attempts - 1, 0), int(settings.POLICY_PUSH_BACKOFF_MAX_SECONDS))


def max_attempts() -> int:
    """Attempts before a push to an unreachable cluster gives up (the next policy change pushes again)."""
    return int(settings.POLICY_PUSH_MAX_ATTEMPTS)


def policy_push_request(
    *, clusters: Iterable[Cluster], reason: str, user=None, now: datetime | None = None
) -> list[PolicyPush]:
    """Record one push per cluster and enqueue it once the surrounding transaction commits."""
    now = now or timezone.now()
    rows = []
    for cluster in {c.pk: c for c in clusters}.values():
        row = PolicyPush.objects.create(
            cluster=cluster,
            reason=reason[:300],
            requested_by=user if getattr(user, "pk", None) else None,
            requested_at=now,
        )
        transaction.on_commit(partial(cluster_port().policy_push_requested, push_id=row.pk))
        rows.append(row)
    return rows


def policy_push_clusters(*, model_name: str, instance=None) -> list[Cluster]:
    """The clusters a change to a policy object reaches: its own cluster where it has one, else all of them."""
    cluster_id = getattr(instance, "cluster_id", None)
    if model_name in ("teamquota", "cluster") and instance is not None:
        return list(Cluster.objects.filter(pk=cluster_id if model_name == "teamquota" else instance.pk))
    return list(Cluster.objects.order_by("name"))


def policy_pushes_due(*, now: datetime | None = None) -> list[int]:
    """Ids of pushes to send again (the beat sweep does): failed ones whose next attempt is due, and pending ones
    asked for more than a first backoff ago (their task was never sent, the broker being down, or its worker died
    mid-push; a push is idempotent)."""
    now = now or timezone.now()
    stuck = now - timedelta(seconds=settings.POLICY_PUSH_BACKOFF_SECONDS)
    due = Q(state=PolicyPush.State.RETRYING, next_attempt_at__lte=now)
    due |= Q(state=PolicyPush.State.PENDING, requested_at__lte=stuck)
    return list(PolicyPush.objects.filter(due).order_by("pk").values_list("pk", flat=True))


def policy_push_retry_now(*, push: PolicyPush, now: datetime | None = None) -> PolicyPush:
    """An admin asks for another attempt of a failed push: it becomes due at once."""
    with transaction.atomic():
        PolicyPush.objects.filter(pk=push.pk).update(
            state=PolicyPush.State.RETRYING, next_attempt_at=now or timezone.now(), finished_at=None
        )
        transaction.on_commit(partial(cluster_port().policy_push_requested, push_id=push.pk))
    push.refresh_from_db()
    return push
