"""Count Celery task failures in the database, so the count survives worker restarts and adds up over workers."""

from __future__ import annotations

import logging
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from portal.models import TaskFailure

log = logging.getLogger(__name__)

#: Longest stored error text (the class name and the start of the message).
ERROR_CHARS = 500


def task_failure_record(*, task: str, error: BaseException | None) -> None:
    """Add one failure of ``task`` (an atomic increment: concurrent workers never lose a count)."""
    if not task:
        raise ValueError("task: a Celery task name is required")
    text = f"{type(error).__name__}: {error}"[:ERROR_CHARS] if error is not None else ""
    now = timezone.now()
    updated = TaskFailure.objects.filter(task=task).update(count=F("count") + 1, last_failure_at=now, last_error=text)
    if updated:
        return
    try:
        with transaction.atomic():
            TaskFailure.objects.create(task=task, count=1, last_failure_at=now, last_error=text)
    except IntegrityError:  # another worker created the row first
        TaskFailure.objects.filter(task=task).update(count=F("count") + 1, last_failure_at=now, last_error=text)


def on_task_failure(sender: Any = None, exception: BaseException | None = None, **kwargs: Any) -> None:
    """Celery's ``task_failure`` signal handler; a failure to record is logged, never raised into the worker."""
    name = getattr(sender, "name", "") or str(sender or "")
    try:
        task_failure_record(task=name, error=exception)
    except Exception:
        log.exception("could not record the failure of task %s", name)
