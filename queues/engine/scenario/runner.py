"""``run_scenario``: run a loaded scenario in one of three modes and return its ``simulate --json`` document."""

from __future__ import annotations

from functools import partial
from typing import Any

from queues.engine.scheduler import Engine
from queues.engine.simulation import Replay, ReplayResult

from .loader import Scenario
from .report import document, reservations_section, timeline_section
from .timeline import apply_event


def _run_once(engine: Engine, replay: Replay, start: float) -> ReplayResult:
    """Exactly one cycle at the start (after draining stopped queues), recorded as a replay would record it."""
    for stop in engine.drain(start):
        rec = replay.records[stop.workload]
        rec.stop_eviction, rec.stopped_at = stop, start
        replay.queues[stop.cluster_queue].drained += int(stop.admitted)
    outcome = engine.cycle(start)
    result = ReplayResult(replay.records, replay.queues, start, start, 1)
    for decision in outcome.admitted:
        rec = result.records[decision.workload]
        rec.admitted_at = rec.first_admitted_at = start
        rec.admissions += 1
        replay.queues[decision.cluster_queue].admissions += 1
    for pre in outcome.preemptions:
        result.records[pre.victim].preempted_by = pre.preemptor
        replay.queues[pre.victim_cluster_queue].preempted += 1
    return result


def _schedule_timeline(scenario: Scenario, replay: Replay, mode: str) -> None:
    """Events at the start apply before anything runs (they are part of the start); later ones only in a replay."""
    replay.decisions = []
    start = scenario.start
    for event in scenario.timeline:
        if event.at <= start:
            replay.last_event = event.name
            apply_event(event, replay, start)
            if replay.engine.evicting:
                replay.complete_evictions(start)
        elif mode == "replay":
            replay.at(event.at, partial(apply_event, event, replay), event.name)


def run_scenario(scenario: Scenario, *, mode: str = "settle", until: float | None = None) -> dict[str, Any]:
    """Run a scenario (``settle``, ``once`` or ``replay``) and return the ``simulate --json`` document.

    With a timeline, events at the start apply in every mode; later ones in a replay only (``--until``); so do the
    edges of reservations' windows.
    """
    if mode not in ("settle", "once", "replay"):
        raise ValueError(f"unknown mode {mode!r}")
    engine = Engine(scenario.state, scenario.start)
    replay = Replay(engine, start=scenario.start, checks_delay=scenario.checks_delay)
    if scenario.timeline:
        _schedule_timeline(scenario, replay, mode)
    elif scenario.state.reservations:
        replay.decisions = []  # the reservations section lists them
    if mode == "once":
        result = _run_once(engine, replay, scenario.start)
        window = 0.0
    elif mode == "settle":
        result = replay.run(until=scenario.start)
        window = 0.0
    else:
        for when, wl in scenario.submissions:
            replay.submit_at(wl, when)
        result = replay.run(until=None if until is None else scenario.start + until)
        window = result.end - result.start
    out = document(engine, scenario.start, result, window)
    if scenario.timeline:
        # Only with a timeline, so documents of scenarios without one keep their shape.
        timeline_section(out, scenario, replay, result.end)
    if scenario.state.reservations:
        # Only with reservations, likewise.
        reservations_section(out, scenario, replay, with_decisions=not scenario.timeline)
    return out
