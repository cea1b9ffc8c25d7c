"""Celery beat's scheduler with liveness: a heartbeat from its loop, and every entry's sends marked and recorded.

``CELERY_BEAT_SCHEDULER = "liveness.beat.HeartbeatScheduler"`` (portal/settings.py). The loop wakes at least every
``HEARTBEAT_SECONDS`` (``CELERY_BEAT_MAX_LOOP_INTERVAL``), so a beat that is frozen or gone stops its heartbeat.
"""

from __future__ import annotations

import logging
import os
import socket
import time

from celery.beat import PersistentScheduler, SchedulingError
from celery.schedules import schedule as interval_schedule
from django.conf import settings
from django.db import connections
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerError

from liveness import services
from liveness.celery_hooks import ENTRY_HEADER, INTERVAL_HEADER, SENT_HEADER, _quietly
from liveness.models import ProcessHeartbeat

log = logging.getLogger(__name__)


def interval_of(entry) -> float | None:
    """The entry's period in seconds, or None for a crontab (or any schedule without a fixed period)."""
    schedule = entry.schedule
    if isinstance(schedule, interval_schedule) and type(schedule) is interval_schedule:
        return schedule.run_every.total_seconds()
    return None


class HeartbeatScheduler(PersistentScheduler):
    """The persistent (shelve) scheduler, writing beat's heartbeat and each entry's sends."""

    def setup_schedule(self) -> None:
        """Forget database connections inherited from a parent (the embedded beat is a worker's child), then set
        up as usual."""
        for conn in connections.all(initialized_only=True):
            conn.connection = None  # dropped, not closed: closing would end the parent's session too
        super().setup_schedule()
        self._beat_key = {
            "kind": ProcessHeartbeat.Kind.BEAT,
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "started_at": timezone.now(),
        }
        self._last_beat = 0.0

    def tick(self, *args, **kwargs) -> float:
        """One pass of the loop: send what is due, write the heartbeat when it is time; sleep at most a heartbeat."""
        interval = super().tick(*args, **kwargs)
        if time.monotonic() - self._last_beat >= settings.HEARTBEAT_SECONDS:
            self._last_beat = time.monotonic()
            try:
                _quietly("beat's heartbeat", services.heartbeat_record, **self._beat_key, now=timezone.now())
            finally:
                connections.close_all()
        return min(interval, settings.HEARTBEAT_SECONDS) if interval else interval

    def apply_async(self, entry, producer=None, advance=True, **kwargs):
        """Send the entry's task with the liveness headers (entry, send time, interval), then record the send."""
        now = timezone.now()
        interval = interval_of(entry)
        headers = {**entry.options.get("headers", {}), ENTRY_HEADER: entry.name, SENT_HEADER: now.timestamp()}
        if interval:
            headers[INTERVAL_HEADER] = interval
        entry.options = {**entry.options, "headers": headers}
        result = super().apply_async(entry, producer, advance, **kwargs)
        _quietly(
            f"the send of {entry.name}",
            services.periodic_sent,
            entry=entry.name,
            task=entry.task,
            interval_seconds=interval,
            now=now,
        )
        return result

    def apply_entry(self, entry, producer=None) -> None:
        """Send a due entry; a broker that is down is logged in one line (the entry is sent again when next due)."""
        log.info("Scheduler: Sending due task %s (%s)", entry.name, entry.task)
        try:
            self.apply_async(entry, producer=producer, advance=False)
        except SchedulingError as exc:
            cause = exc.__cause__ or exc.__context__
            if isinstance(cause, BrokerError | ConnectionError | OSError):
                log.warning("beat: could not send %s, the broker is unreachable: %s", entry.name, cause)
            else:
                log.exception("beat: could not send %s", entry.name)
