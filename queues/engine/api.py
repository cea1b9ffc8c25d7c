"""The engine's public functions: one cycle, settle, explain, ETA."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from .decisions import CycleResult, Explanation, QueueStopEviction, WaitReason
from .gc_pacing import fewer_collections, paused_collections
from .model import Admission, ClusterState, Eviction, PodSetAdmission, Workload
from .quota import QuotaTree
from .reasons import shares_verdicts
from .records import ClusterQueueInfo, WorkloadInfo
from .reservation_reasons import explain_all_held, explain_held
from .scheduler import PENDING, RESERVED, CycleOutcome, Engine
from .simulation import Replay
from .wait_codes import never_fits


def _pending_reasons(engine: Engine) -> dict[str, WaitReason]:
    out: dict[str, WaitReason] = {}
    # One index for the whole pass (O(pending + running)); same-shape workloads of a queue share one explanation.
    waiting = [engine.live[key] for key in sorted(engine.live) if engine.live[key].state in (PENDING, RESERVED)]
    for key, explanation in explain_all_held(engine, waiting).items():
        reason = explanation.reason
        if reason is None:
            reason = WaitReason(
                code="higher_priority_ahead",
                message="This job fits now and is admitted in the next scheduling cycle.",
                kueue_message="",
                kueue_reason="",
                details={"clusterQueue": engine.live[key].cq},
            )
        out[key] = reason
    return out


def _result(
    engine: Engine,
    outcome: CycleOutcome,
    now: float,
    *,
    reasons: bool = True,
    evictions: tuple[QueueStopEviction, ...] = (),
) -> CycleResult:
    return CycleResult(
        now=now,
        admitted=tuple(outcome.admitted),
        preemptions=tuple(outcome.preemptions),
        pending=_pending_reasons(engine) if reasons else {},
        evictions=evictions,
    )


def schedule(state: ClusterState, now: float) -> CycleResult:
    """Evict what stopped queues drain, then run one Kueue scheduling cycle over ``state`` at ``now``."""
    engine = Engine(state, now)
    drained = tuple(engine.drain(now))
    outcome = engine.cycle(now)
    return _result(engine, outcome, now, evictions=drained)


def apply_cycle(state: ClusterState, result: CycleResult, *, complete_evictions: bool = False) -> ClusterState:
    """The state after ``result``: admissions written, victims marked evicting (or evicted and requeued)."""
    admitted = {d.workload: d for d in result.admitted}
    victims = {p.victim: p for p in result.preemptions}
    stopped = {e.workload: e for e in result.evictions}
    workloads = []
    for wl in state.workloads:
        stop = stopped.get(wl.key)
        if stop is not None:
            if complete_evictions or not stop.admitted:
                # A stopped queue's workload keeps its queue position (no requeued_at of its own).
                wl = replace(wl, admission=None, admitted_at=None, eviction=None)
            else:
                wl = replace(wl, eviction=Eviction(reason=stop.reason, message=stop.message, issued_at=result.now))
        decision = admitted.get(wl.key)
        if decision is not None:
            admission = Admission(
                cluster_queue=decision.cluster_queue,
                pod_sets=tuple(PodSetAdmission(p.name, p.count, dict(p.flavors), p.nodes) for p in decision.pod_sets),
            )
            checks = dict(wl.admission_checks)
            for name in decision.pending_checks:
                checks.setdefault(name, "Pending")
            wl = replace(wl, admission=admission, admitted_at=result.now, admission_checks=checks, eviction=None)
        pre = victims.get(wl.key)
        if pre is not None:
            if complete_evictions:
                wl = replace(wl, admission=None, admitted_at=None, eviction=None, requeued_at=result.now)
            else:
                wl = replace(
                    wl,
                    eviction=Eviction(
                        reason=pre.reason, message=pre.message, preemptor=pre.preemptor, issued_at=result.now
                    ),
                )
        workloads.append(wl)
    return replace(state, workloads=tuple(workloads))


@dataclass(frozen=True, slots=True)
class SettleResult:
    """Cycles run until nothing changes (evictions completing at once), the final state and pending reasons.

    ``evictions`` are the stop-policy evictions made before the first cycle (see ``Engine.drain``).
    """

    state: ClusterState
    cycles: tuple[CycleResult, ...]
    pending: Mapping[str, WaitReason]
    evictions: tuple[QueueStopEviction, ...] = ()


@fewer_collections()
def settle(state: ClusterState, now: float, *, max_cycles: int = 1000, complete_evictions: bool = True) -> SettleResult:
    """Run scheduling cycles at ``now`` until nothing changes, as Kueue runs them back to back.

    Workloads of stopped queues are drained first (``SettleResult.evictions``). With ``complete_evictions`` (the
    default) preempted and drained workloads are evicted at once; without it they keep their quota (marked
    ``eviction``) so that the caller can checkpoint them first, and their preemptors wait.
    """
    engine = Engine(state, now)
    drained = tuple(engine.drain(now))
    if complete_evictions:
        for stop in drained:
            engine.complete_eviction(stop.workload, now)
    cycles = []
    for _ in range(max_cycles):
        if not engine.heads():
            break
        outcome = engine.cycle(now)
        cycles.append(_result(engine, outcome, now, reasons=False))
        evicted = engine.complete_evictions(now) if complete_evictions else False
        if not outcome.changed and not outcome.parked and not evicted:
            break
    return SettleResult(
        state=engine.export_state(), cycles=tuple(cycles), pending=_pending_reasons(engine), evictions=drained
    )


def explain(state: ClusterState, workload: str | Workload, now: float) -> Explanation:
    """Diagnose one workload: a key in ``state`` or a Workload not yet submitted (feasibility check)."""
    engine = Engine(state, now)
    key = workload if isinstance(workload, str) else workload.key
    if key not in engine.workloads:
        if isinstance(workload, str):
            raise KeyError(f"workload {workload} is not in the state")
        engine.submit(replace(workload, admission=None, eviction=None))
    return explain_held(engine, engine.workloads[key])


class WhatIf:
    """Explain workloads that are not in ``state`` (modified copies of a job) one after another on ONE engine.

    Each is submitted, explained and taken out again, so each answer equals ``explain(state, workload, now)``
    while the engine is built once (lazily, at the first question) instead of once per workload.
    """

    def __init__(self, state: ClusterState, now: float) -> None:
        self._state = state
        self._now = now
        self._engine: Engine | None = None

    def explain(self, workload: Workload) -> Explanation:
        """``explain(state, workload, now)`` of a workload whose key is not in the state."""
        if self._engine is None:
            self._engine = Engine(self._state, self._now)
        engine = self._engine
        if workload.key in engine.workloads:
            raise KeyError(f"workload {workload.key} is already in the state")
        wl = engine.submit(replace(workload, admission=None, eviction=None))
        try:
            return explain_held(engine, wl)
        finally:
            _withdraw(engine, wl)


def _withdraw(engine: Engine, wl: WorkloadInfo) -> None:
    """Take a submitted, still pending workload out of the engine again, its queue entry included."""
    group = wl.group
    engine.finish(wl.key)  # out of the live workloads and of its group
    del engine.workloads[wl.key]
    if group is not None:  # a later copy with the same key and times must not meet this entry in the heap
        group.items = [item for item in group.items if item[3] is not wl]
        heapq.heapify(group.items)


def explain_many(state: ClusterState, keys: Iterable[str], now: float) -> dict[str, Explanation]:
    """``explain`` of many workloads of ``state`` on one engine and one index: O(pending + running) in all."""
    engine, targets = _engine_for(state, keys, now)
    return explain_all_held(engine, targets)


def _engine_for(state: ClusterState, keys: Iterable[str], now: float) -> tuple[Engine, list[WorkloadInfo]]:
    """An engine of ``state`` and its records of ``keys`` (KeyError for a key not in the state)."""
    engine = Engine(state, now)
    targets = []
    for key in keys:
        wl = engine.workloads.get(key)
        if wl is None:
            raise KeyError(f"workload {key} is not in the state")
        targets.append(wl)
    return engine, targets


def weighted_shares(state: ClusterState) -> tuple[dict[str, int], dict[str, int]]:
    """Kueue's ``status.fairSharing.weightedShare`` of every (ClusterQueue, Cohort) in ``state``, by name."""
    return Engine(state).weighted_shares()


def estimate_admission(
    state: ClusterState,
    target: str | Workload,
    now: float,
    end_times: Mapping[str, float],
    *,
    horizon: float | None = None,
    default_runtime: float | None = None,
) -> float | None:
    """When ``target`` would get its quota if the engine ran forward from ``now`` (None: never / past horizon).

    Running workloads end at ``end_times[key]`` (else after their ``runtime`` from ``admitted_at``, else
    never); workloads admitted on the way run for their ``runtime``, else ``default_runtime``, else forever.
    """
    engine = Engine(state, now)
    key = target if isinstance(target, str) else target.key
    if key not in engine.workloads:
        if isinstance(target, str):
            raise KeyError(f"workload {target} is not in the state")
        engine.submit(replace(target, admission=None, eviction=None))
    replay = Replay(engine, start=now, end_times=end_times, default_runtime=default_runtime)
    return replay.run_until_admitted(key, horizon)


def estimate_admissions(
    state: ClusterState,
    targets: Iterable[str],
    now: float,
    end_times: Mapping[str, float],
    *,
    horizon: float | None = None,
    default_runtime: float | None = None,
) -> dict[str, float | None]:
    """``estimate_admission`` of many workloads of ``state`` (keys) from ONE forward replay.

    The replay is the same whichever workload is watched, so each answer equals the one-workload estimate; the
    replay stops once every target holds quota or at ``horizon``.
    """
    engine = Engine(state, now)
    keys = list(targets)
    for key in keys:
        if key not in engine.workloads:
            raise KeyError(f"workload {key} is not in the state")
    replay = Replay(engine, start=now, end_times=end_times, default_runtime=default_runtime)
    found = replay.run_until_all_admitted(keys, horizon)
    return {key: found.get(key) for key in keys}


@dataclass(frozen=True, slots=True)
class Diagnoses:
    """Every explained workload's ``Explanation`` and, for those that wait for room, when they get quota.

    ``admitted_at`` holds the keys that are neither admissible now nor never fitting (a ``never_fits`` code): the
    replay's time (None: not before the horizon); the others need no replay.
    """

    explanations: Mapping[str, Explanation]
    admitted_at: Mapping[str, float | None]


def needs_replay(explanation: Explanation) -> bool:
    """Whether only a replay tells when the workload starts (it is not admissible now, and waiting can start it)."""
    reason = explanation.reason
    return not explanation.admissible and not (reason is not None and never_fits(reason.code))


@paused_collections()  # one bounded computation: see gc_pacing
def diagnose_many(
    state: ClusterState,
    keys: Iterable[str],
    now: float,
    end_times: Mapping[str, float],
    *,
    horizon: float | None = None,
    default_runtime: float | None = None,
) -> Diagnoses:
    """``explain_many`` of ``keys`` and ``estimate_admissions`` of those that ``needs_replay``, on ONE engine.

    Explaining leaves the engine as it was (its placements are tried and undone), so the replay starts from the
    engine the explanations were made on instead of a second one built from ``state``; the answers equal
    ``explain_many`` and ``estimate_admissions`` made apart.
    """
    engine, targets = _engine_for(state, keys, now)
    explanations = explain_all_held(engine, targets)
    waiting = [wl.key for wl in targets if needs_replay(explanations[wl.key])]
    replay = Replay(engine, start=now, end_times=end_times, default_runtime=default_runtime)
    found = replay.run_until_all_admitted(waiting, horizon)
    return Diagnoses(explanations=explanations, admitted_at={key: found.get(key) for key in waiting})


def verdict_sharing_queues(state: ClusterState) -> frozenset[str]:
    """The ClusterQueues of ``state`` whose queued pending workloads are explained alike by shape: what explains
    one of them explains every other of the same shape (``explain_many`` shares it), whatever else is queued."""
    tree = QuotaTree(state.cluster_queues, state.cohorts)
    return frozenset(
        spec.name
        for spec in state.cluster_queues
        if spec.name in tree.cqs and shares_verdicts(ClusterQueueInfo(spec, tree.cqs[spec.name]))
    )


@dataclass(frozen=True, slots=True)
class WindowDiagnoses:
    """``diagnose_window``'s answer.

    ``admitted_at``: when each watched workload first held quota at the end of an instant of the replay (missing:
    not within the replay); ``held_at``: the same for every workload the replay granted quota to, watched or not.
    ``window_end``: the last instant replayed when the replay stopped at its ``max_admissions``-th grant of quota with
    workloads still waiting (None: it ran until every watched workload held quota, or past the horizon, or out of
    events); ``granted``: the grants it made.
    """

    explanations: Mapping[str, Explanation]
    admitted_at: Mapping[str, float]
    window_end: float | None
    granted: int
    held_at: Mapping[str, float]


@paused_collections()  # one bounded computation: see gc_pacing
def diagnose_window(
    state: ClusterState,
    keys: Iterable[str],
    now: float,
    end_times: Mapping[str, float],
    *,
    horizon: float | None = None,
    default_runtime: float | None = None,
    max_admissions: int | None = None,
    represented_by: Mapping[str, str] | None = None,
) -> WindowDiagnoses:
    """``diagnose_many`` of ``keys`` with the replay bounded by ``max_admissions`` grants of quota, watching more.

    ``represented_by`` maps more pending workloads of ``state`` to a key of ``keys`` whose explanation each shares
    (the caller's promise: the same ClusterQueue, one of ``verdict_sharing_queues``, and the same shape): they are not
    explained again, and the replay watches each whose representative waits for room. The replay's instants up to
    where it stops are the unbounded replay's, so every time found equals ``diagnose_many``'s.
    """
    engine, targets = _engine_for(state, keys, now)
    explanations = explain_all_held(engine, targets)
    waiting = [wl.key for wl in targets if needs_replay(explanations[wl.key])]
    for key, representative in (represented_by or {}).items():
        if key not in engine.workloads:
            raise KeyError(f"workload {key} is not in the state")
        if needs_replay(explanations[representative]):
            waiting.append(key)
    replay = Replay(engine, start=now, end_times=end_times, default_runtime=default_runtime)
    found, window_end, held = replay.run_window(waiting, horizon, max_admissions)
    return WindowDiagnoses(
        explanations=explanations, admitted_at=found, window_end=window_end, granted=len(held), held_at=held
    )
