"""The broker as the web sees it: can it be reached now? And the embedded broker's housekeeping."""

from __future__ import annotations

import sqlite3
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

from celery import current_app
from django.conf import settings

#: The embedded broker's URL scheme (kombu's SQLAlchemy transport on a SQLite file).
EMBEDDED_PREFIX = "sqla+sqlite:///"
#: Messages a worker took longer ago than this are deleted from the embedded broker's file.
TAKEN_KEEP = timedelta(hours=1)
#: A web process checks the broker at most this often for the pages' "live data paused" note.
CHECK_CACHE_SECONDS = 15.0

_cache_lock = threading.Lock()
_cached: tuple[float, str, bool, str] | None = None


def broker_check(url: str | None = None, *, timeout: float | None = None) -> tuple[bool, str]:
    """Whether the broker at ``url`` (default: the configured one) accepts a connection now, and what failed."""
    url = settings.CELERY_BROKER_URL if url is None else url
    if not url:
        return True, "no broker: tasks run in the process that sends them"
    timeout = settings.BROKER_CHECK_TIMEOUT_SECONDS if timeout is None else timeout
    if url.startswith(EMBEDDED_PREFIX):
        path = Path(url.removeprefix(EMBEDDED_PREFIX))
        try:
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=timeout) as conn:
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.Error as exc:
            return False, f"the embedded broker's file {path} cannot be read: {exc}"
        return True, ""
    try:
        with current_app.connection_for_read(url, connect_timeout=timeout) as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=timeout)
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}"
    return True, ""


def broker_check_cached() -> tuple[bool, str]:
    """:func:`broker_check`, answered from this process's memory for :data:`CHECK_CACHE_SECONDS`."""
    global _cached
    url = settings.CELERY_BROKER_URL
    now = time.monotonic()
    with _cache_lock:
        if _cached is not None and _cached[1] == url and now - _cached[0] < CHECK_CACHE_SECONDS:
            return _cached[2], _cached[3]
    ok, detail = broker_check(url)
    with _cache_lock:
        _cached = (now, url, ok, detail)
    return ok, detail


def embedded_broker_prune(*, now: datetime, url: str | None = None) -> int:
    """Delete the messages workers took more than :data:`TAKEN_KEEP` ago from the embedded broker's file (kombu's
    transport keeps them, marked invisible); how many. Nothing to do for another broker."""
    url = settings.CELERY_BROKER_URL if url is None else url
    if not url.startswith(EMBEDDED_PREFIX):
        return 0
    # kombu writes the taken time (its "timestamp" column, updated when a message is taken) in local naive time.
    cutoff = (now.astimezone() - TAKEN_KEEP).replace(tzinfo=None)
    with sqlite3.connect(url.removeprefix(EMBEDDED_PREFIX), timeout=30) as conn:
        cursor = conn.execute(
            "DELETE FROM kombu_message WHERE visible = 0 AND timestamp < ?", (cutoff.isoformat(sep=" "),)
        )
        return cursor.rowcount
