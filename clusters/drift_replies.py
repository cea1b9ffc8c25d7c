"""The admin's drift buttons ask the worker and wait, briefly, for its answer.

The web process may not change a cluster (deploy/ gives its pods a service account that can only read a job's pods,
logs and events), so a re-apply, an adopt or a check runs on the worker (``clusters.kube_drift_action``). The task
leaves its messages in the cache under a key the page made up; the page waits up to ``KUBE_DRIFT_REPLY_SECONDS``
for them. The cache must be shared by web and worker for that (``CACHE_URL``, a Redis, as production sets for the
API throttles); without it, or when the worker is busy, the page says the action was sent and the list shows its
outcome once it ran. In development Celery is eager: the answer is there at once.
"""

from __future__ import annotations

import time
import uuid

from django.conf import settings
from django.core.cache import cache

from clusters.kube_sync.drift import DriftMessage

_PREFIX = "clusters:drift-reply:"
REPLY_TTL_SECONDS = 600


def reply_key() -> str:
    """A new key for one action's answer."""
    return uuid.uuid4().hex


def reply_store(key: str, messages: list[DriftMessage]) -> None:
    """The worker's side: leave the action's messages for the page that waits for them."""
    cache.set(_PREFIX + key, messages, REPLY_TTL_SECONDS)


def reply_wait(key: str, *, seconds: float | None = None) -> list[DriftMessage] | None:
    """The page's side: the action's messages once the worker has left them, None after ``seconds``."""
    deadline = time.monotonic() + (settings.KUBE_DRIFT_REPLY_SECONDS if seconds is None else seconds)
    while True:
        messages = cache.get(_PREFIX + key)
        if messages is not None:
            cache.delete(_PREFIX + key)
            return [tuple(m) for m in messages]
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.2)
