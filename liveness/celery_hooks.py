"""What the Celery processes write for liveness: the worker's heartbeat thread and the periodic-task records.

Beat marks each message it sends for an entry with three headers (:mod:`liveness.beat`); a task such a message
starts marks the messages it sends in turn, under the entry ``"<entry> › <task>"`` (the simulated clusters' tick
fans out one tick per cluster: their failures are seen as the parent's are). The worker records start, lag, end
and expiry of each marked run. Every write here is a statement or two, and a failed write (the database restarting)
is logged in one line and never raised into Celery.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from datetime import UTC, datetime
from typing import Any

from celery import current_task
from celery.signals import (
    before_task_publish,
    task_failure,
    task_prerun,
    task_revoked,
    task_success,
    worker_ready,
    worker_shutdown,
)
from django.conf import settings
from django.db import connection
from django.utils import timezone

from liveness import services
from liveness.models import ProcessHeartbeat

log = logging.getLogger(__name__)

#: Message headers: the beat entry a run belongs to, when it was sent (Unix time), the entry's interval (seconds).
ENTRY_HEADER = "portal_beat_entry"
SENT_HEADER = "portal_sent_at"
INTERVAL_HEADER = "portal_interval"
#: Between an entry's name and the task name of the messages its runs send.
CHILD_SEPARATOR = " › "


def _quietly(what: str, write, **kwargs: Any) -> Any:
    """Run a liveness write; a database error is logged in one line (the next heartbeat or run tries again)."""
    try:
        return write(**kwargs)
    except Exception as exc:
        log.warning("liveness: could not record %s: %s: %s", what, type(exc).__name__, exc)
        return None


class Heartbeat:
    """A daemon thread writing one process's heartbeat every ``HEARTBEAT_SECONDS`` (stops when the process is
    frozen or killed, which is the point)."""

    def __init__(self, *, kind: str, hostname: str) -> None:
        self.key = {"kind": kind, "hostname": hostname, "pid": os.getpid(), "started_at": timezone.now()}
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"liveness-{kind}-heartbeat", daemon=True)

    def start(self) -> None:
        """Write the first heartbeat now, then every interval."""
        self.thread.start()

    def stop(self) -> None:
        """Stop the thread and record a clean stop."""
        self.stopping.set()
        self.thread.join(timeout=10)
        _quietly("a clean stop", services.heartbeat_stopped, **self.key, now=timezone.now())
        connection.close()

    def beat(self) -> None:
        """One heartbeat (its own database connection, closed after: nothing is held between beats)."""
        try:
            _quietly("a heartbeat", services.heartbeat_record, **self.key, now=timezone.now())
        finally:
            connection.close()

    def _run(self) -> None:
        while not self.stopping.is_set():
            self.beat()
            self.stopping.wait(settings.HEARTBEAT_SECONDS)


_worker_heartbeat: Heartbeat | None = None


def on_worker_ready(sender=None, **kwargs: Any) -> None:
    """The worker's consumer is ready: start its heartbeat."""
    global _worker_heartbeat
    if _worker_heartbeat is None:
        hostname = getattr(sender, "hostname", None) or "worker"
        _worker_heartbeat = Heartbeat(kind=ProcessHeartbeat.Kind.WORKER, hostname=hostname)
        _worker_heartbeat.start()


def on_worker_shutdown(sender=None, **kwargs: Any) -> None:
    """The worker stops cleanly: say so (the status then reads "stopped", not "not heard from")."""
    global _worker_heartbeat
    if _worker_heartbeat is not None:
        _worker_heartbeat.stop()
        _worker_heartbeat = None


def _run_of(request: Any) -> tuple[str, datetime | None, float | None] | None:
    """The (entry, sent at, interval) a task request carries, or None for a run beat did not cause."""
    headers = getattr(request, "headers", None) or {}
    entry = headers.get(ENTRY_HEADER) or getattr(request, ENTRY_HEADER, None)
    if not entry:
        return None
    sent = headers.get(SENT_HEADER) or getattr(request, SENT_HEADER, None)
    interval = headers.get(INTERVAL_HEADER) or getattr(request, INTERVAL_HEADER, None)
    sent_at = datetime.fromtimestamp(float(sent), tz=UTC) if sent else None
    return entry, sent_at, float(interval) if interval else None


def on_task_prerun(sender=None, task=None, **kwargs: Any) -> None:
    """A marked run starts: its lag."""
    run = _run_of(getattr(task, "request", None))
    if run is not None:
        entry, sent_at, interval = run
        _quietly(
            f"the start of {entry}",
            services.periodic_started,
            entry=entry,
            task=task.name,
            sent_at=sent_at,
            interval_seconds=interval,
            now=timezone.now(),
        )


def on_task_success(sender=None, **kwargs: Any) -> None:
    """A marked run succeeded."""
    run = _run_of(getattr(sender, "request", None))
    if run is not None:
        _quietly(
            f"the end of {run[0]}",
            services.periodic_finished,
            entry=run[0],
            task=sender.name,
            error=None,
            now=timezone.now(),
        )


def on_task_failure(sender=None, exception: BaseException | None = None, **kwargs: Any) -> None:
    """A marked run failed (after its retries)."""
    run = _run_of(getattr(sender, "request", None))
    if run is not None:
        _quietly(
            f"the failure of {run[0]}",
            services.periodic_finished,
            entry=run[0],
            task=sender.name,
            error=exception or RuntimeError("failed"),
            now=timezone.now(),
        )


def on_task_revoked(sender=None, request=None, expired: bool = False, **kwargs: Any) -> None:
    """A marked send expired before a worker started it: a late run."""
    if not expired or request is None:
        return
    run = _run_of(_Headers(getattr(request, "request_dict", None) or {}))
    if run is not None:
        name = getattr(sender, "name", "") or getattr(request, "name", "")
        _quietly(f"the expiry of {run[0]}", services.periodic_expired, entry=run[0], task=name, now=timezone.now())


class _Headers:
    """A worker request's message headers, read as a task request's."""

    def __init__(self, headers: dict) -> None:
        self.headers = headers


def on_before_task_publish(sender: str | None = None, headers: dict | None = None, **kwargs: Any) -> None:
    """A message sent by a marked run carries its entry on (``"<entry> › <task>"``), with its own send time."""
    if headers is None or ENTRY_HEADER in headers:
        return
    task = current_task
    run = _run_of(getattr(task, "request", None)) if task else None
    if run is None or CHILD_SEPARATOR in run[0]:
        return
    entry, _sent, interval = run
    headers[ENTRY_HEADER] = f"{entry}{CHILD_SEPARATOR}{sender}"
    headers[SENT_HEADER] = time.time()
    if interval:
        headers[INTERVAL_HEADER] = interval


def connect() -> None:
    """Connect the handlers (once per process)."""
    worker_ready.connect(on_worker_ready, weak=False, dispatch_uid="liveness.worker_ready")
    worker_shutdown.connect(on_worker_shutdown, weak=False, dispatch_uid="liveness.worker_shutdown")
    task_prerun.connect(on_task_prerun, weak=False, dispatch_uid="liveness.task_prerun")
    task_success.connect(on_task_success, weak=False, dispatch_uid="liveness.task_success")
    task_failure.connect(on_task_failure, weak=False, dispatch_uid="liveness.task_failure")
    task_revoked.connect(on_task_revoked, weak=False, dispatch_uid="liveness.task_revoked")
    before_task_publish.connect(on_before_task_publish, weak=False, dispatch_uid="liveness.before_task_publish")
