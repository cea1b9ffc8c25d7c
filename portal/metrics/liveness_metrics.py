"""Liveness metrics: one gauge per component (up or not), when worker and beat were last heard from, and each
periodic task's last run, lag, success, failure and counters (liveness.selectors; five queries and a broker check).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from liveness.selectors import liveness_status

#: The components, in the order ``/status.json`` lists them.
COMPONENTS = ("database", "broker", "worker", "beat", "tasks")


def liveness_families(now: datetime) -> Iterable[Metric]:
    """``portal_component_up`` and the periodic-task families."""
    status = liveness_status(now=now)
    up = GaugeMetricFamily(
        "portal_component_up",
        "1 when the component is ok (database and broker answer; worker and beat heard from within "
        "HEARTBEAT_STALE_SECONDS; no periodic task overdue or failing), else 0.",
        labels=["component"],
    )
    for name in COMPONENTS:
        up.add_metric([name], 1.0 if getattr(status, name).ok else 0.0)
    seen = GaugeMetricFamily(
        "portal_component_last_seen_timestamp_seconds",
        "When the worker or beat last wrote its heartbeat (Unix time).",
        labels=["component"],
    )
    for name in ("worker", "beat"):
        at = getattr(status, name).last_seen
        if at is not None:
            seen.add_metric([name], at.timestamp())
    yield up
    yield seen
    yield from _periodic(status.entries)


def _periodic(entries) -> list[Metric]:
    labels = ["entry"]
    last_run = GaugeMetricFamily(
        "portal_periodic_task_last_run_timestamp_seconds", "When a worker last started the entry.", labels=labels
    )
    lag = GaugeMetricFamily(
        "portal_periodic_task_lag_seconds", "Beat's send to a worker's start, at the last run.", labels=labels
    )
    success = GaugeMetricFamily(
        "portal_periodic_task_last_success_timestamp_seconds", "When a run last succeeded.", labels=labels
    )
    failure = GaugeMetricFamily(
        "portal_periodic_task_last_failure_timestamp_seconds", "When a run last failed.", labels=labels
    )
    overdue = GaugeMetricFamily(
        "portal_periodic_task_overdue", "1 when the entry has not run for two periods plus the margin.", labels=labels
    )
    runs = CounterMetricFamily("portal_periodic_task_runs", "Runs started.", labels=labels)
    late = CounterMetricFamily("portal_periodic_task_late", "Runs started late or expired unrun.", labels=labels)
    failures = CounterMetricFamily("portal_periodic_task_failures", "Runs that failed.", labels=labels)
    for e in entries:
        key = [e.entry]
        if e.last_run is not None:
            last_run.add_metric(key, e.last_run.timestamp())
        if e.lag_seconds is not None:
            lag.add_metric(key, e.lag_seconds)
        if e.last_success is not None:
            success.add_metric(key, e.last_success.timestamp())
        if e.last_failure is not None:
            failure.add_metric(key, e.last_failure.timestamp())
        if not e.is_child:
            overdue.add_metric(key, 1.0 if e.overdue else 0.0)
        runs.add_metric(key, e.runs)
        late.add_metric(key, e.late)
        failures.add_metric(key, e.failures)
    return [last_run, lag, success, failure, overdue, runs, late, failures]
