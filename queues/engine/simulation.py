"""Event-driven replay over simulated time: submissions, runtimes, admission checks, preemption requeues.

Queues with a stopPolicy are drained at each instant (``HoldAndDrain`` evicts admitted workloads, whose evictions
complete at once like preemptions'). Nodes may join and leave at given instants (``node_joins_at`` /
``node_leaves_at``); a workload with a pod on a node that leaves loses its pods and queues again, to restart from
the beginning (``WorkloadRecord.node_losses``). Anything else may change at an instant through ``at`` (a scenario's
timeline, a recorded policy change): the action runs after that instant's finishes and admission checks and before
its submissions; evictions it issues complete at once, and ``last_event`` names it for the decisions that follow.
With Kueue's ``waitForPodsReady`` (the engine's ``pods_ready_config``) the replay also marks pods Ready, evicts
workloads whose pods are not Ready in time and requeues them when their backoff ends. At each edge of a reservation's
window (the state's ``reservations``) the engine is rebuilt on its policy with the holds then in force
(``reservation_log`` keeps each edge and the holds' outcome).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from itertools import count

from mypy_extensions import mypyc_attr

from kernel.quantity import is_device_resource

from . import pods_ready
from .decisions import QueueStopEviction
from .gc_pacing import fewer_collections
from .model import ClusterState, Eviction, Node, QuotaHold, Workload
from .protection import next_release
from .reservations import HoldOutcome, edges_after
from .scheduler import ADMITTED, EVICTING, FINISHED, PENDING, RESERVED, CycleOutcome, Engine

# Event kinds, in the order they are applied at one instant.
_FINISH, _CHECKS, _PODS_READY, _PODS_TIMEOUT, _BACKOFF, _ACTION, _SUBMIT, _NODE_JOIN, _NODE_LEAVE, _PROTECTION = range(
    10
)

#: An action the replay runs at an instant (``Replay.at``): called with the instant.
Action = Callable[[float], None]


@dataclass(slots=True, init=False)
class WorkloadRecord:
    """What happened to one workload during a replay (times in the engine's clock)."""

    submitted_at: float
    first_admitted_at: float | None
    admitted_at: float | None
    finished_at: float | None
    preempted_by: str | None
    admissions: int
    evictions: int
    node_losses: int
    stop_eviction: QueueStopEviction | None
    stopped_at: float | None
    #: The last eviction waitForPodsReady or a deactivation issued (None: none), and when.
    ready_eviction: Eviction | None
    ready_evicted_at: float | None

    # Written out: a compiled dataclass's generated __init__ runs as interpreted Python, 4x slower.
    def __init__(
        self,
        submitted_at: float,
        first_admitted_at: float | None = None,
        admitted_at: float | None = None,
        finished_at: float | None = None,
        preempted_by: str | None = None,
        admissions: int = 0,
        evictions: int = 0,
        node_losses: int = 0,
        stop_eviction: QueueStopEviction | None = None,
        stopped_at: float | None = None,
        ready_eviction: Eviction | None = None,
        ready_evicted_at: float | None = None,
    ) -> None:
        self.submitted_at = submitted_at
        self.first_admitted_at = first_admitted_at
        self.admitted_at = admitted_at
        self.finished_at = finished_at
        self.preempted_by = preempted_by
        self.admissions = admissions
        self.evictions = evictions
        self.node_losses = node_losses
        self.stop_eviction = stop_eviction
        self.stopped_at = stopped_at
        self.ready_eviction = ready_eviction
        self.ready_evicted_at = ready_evicted_at


@dataclass(slots=True)
class QueueStats:
    """Time-integrated usage of a ClusterQueue's primary resource."""

    resource: str
    nominal: int
    integral: float = 0.0
    last_value: int = 0
    last_time: float = 0.0
    admissions: int = 0
    preempted: int = 0
    finished: int = 0
    drained: int = 0
    #: Earlier nominal quotas when a policy change altered it: (until when, nominal) per past stretch.
    nominal_log: list[tuple[float, int]] = field(default_factory=list)

    def nominal_seconds(self, start: float, end: float) -> float:
        """Nominal quota × time over [start, end], each stretch at the nominal it had."""
        total = 0.0
        since = start
        for until, nominal in self.nominal_log:
            total += nominal * (until - since)
            since = until
        return total + self.nominal * (end - since)


@dataclass(slots=True)
class ReplayResult:
    """Outcome of a replay: records per workload, usage integrals per queue, and the window."""

    records: dict[str, WorkloadRecord]
    queues: dict[str, QueueStats]
    start: float
    end: float
    cycles: int = 0
    outcomes: list[CycleOutcome] = field(default_factory=list)


def primary_resource(engine: Engine, cq_name: str) -> tuple[str, int]:
    """The resource a queue's utilisation is measured in (first device resource, else first covered) and its nominal."""
    cq = engine.cqs[cq_name]
    covered = [r for rg in cq.spec.resource_groups for r in rg.covered_resources]
    resource = next((r for r in covered if is_device_resource(r)), covered[0] if covered else "")
    nominal = sum(q.nominal for (f, r), q in cq.quotas.items() if r == resource)
    return resource, nominal


@mypyc_attr(allow_interpreted_subclasses=True)  # the what-if preview meters a replay by overriding its steps
class Replay:
    """Drives an ``Engine`` through time: at each instant apply events, then run cycles until stable."""

    def __init__(
        self,
        engine: Engine,
        *,
        start: float,
        runtimes: Mapping[str, float | None] | None = None,
        end_times: Mapping[str, float] | None = None,
        checks_delay: Mapping[str, float] | None = None,
        default_runtime: float | None = None,
        record_outcomes: bool = False,
        max_cycles_per_instant: int = 100_000,
    ) -> None:
        self.engine = engine
        self.start = start
        self.now = start
        self.runtimes = dict(runtimes or {})
        self.checks_delay = dict(checks_delay or {})
        self.default_runtime = default_runtime
        self.record_outcomes = record_outcomes
        self.max_cycles = max_cycles_per_instant
        self._events: list[tuple[float, int, int, str, object]] = []
        self._seq = count()
        self._generation: dict[str, int] = {}
        self.records: dict[str, WorkloadRecord] = {}
        self.queues: dict[str, QueueStats] = {}
        self.cycles = 0
        self.outcomes: list[CycleOutcome] = []
        self.on_admit: Callable[[str, float], None] | None = None
        #: Called with the instant and the outcome of every cycle run (None: nobody listens).
        self.on_cycle: Callable[[float, CycleOutcome], None] | None = None
        #: keys given quota (admitted or reserved) by the cycles since it was last reset (None: not collected)
        self.granted: list[str] | None = None
        #: The label of the last action ``at`` ran (None: none yet): the event later decisions follow.
        self.last_event: str | None = None
        #: What happened to workloads, in order, when collected (``record_decisions``): (instant, workload key,
        #: what: admitted | reserved | preempted | evicted | requeued | finished | deleted, detail, last_event).
        self.decisions: list[tuple[float, str, str, str, str | None]] | None = None
        #: Called after each instant settled; each returns True once it is done (it then changed the engine).
        self.finalizers: list[Callable[[float], bool]] = []
        for name in engine.cqs:
            self._add_queue(name, start)
        end_times = dict(end_times or {})
        for key, wl in engine.workloads.items():
            self.records[key] = WorkloadRecord(submitted_at=min(start, wl.created))
            if wl.state in (ADMITTED, EVICTING):
                self.records[key].admitted_at = wl.admitted_at
                if key in end_times:
                    self._schedule_finish(key, end_times[key])
                else:
                    runtime = self._runtime(key, wl.spec)
                    if runtime is not None:
                        self._schedule_finish(key, (wl.admitted_at or start) + runtime)
            if wl.state == RESERVED and key in self.checks_delay:
                self._push(max(start, (wl.admitted_at or start) + self.checks_delay[key]), _CHECKS, key, None)
            if wl.state == ADMITTED and wl.spec.protection is not None:
                self._protection_timer(key, start)
        if engine.pods_ready_config is not None:
            self._pods_ready_timers(start)
        #: Each reservation edge crossed: (instant, label, the policy then, the holds in force after it, their outcome).
        self.reservation_log: list[tuple[float, str, ClusterState, tuple[QuotaHold, ...], tuple[HoldOutcome, ...]]]
        self.reservation_log = []
        for when, label in edges_after(engine.spec_state.reservations, start):
            self.at(when, partial(self._reservation_edge, label), label)

    def _reservation_edge(self, label: str, now: float) -> None:
        """A reservation's window opens or closes: the engine is rebuilt on its policy with the holds then in force."""
        engine = self.engine
        tracked = engine.pods_ready_config is not None
        engine.reconfigure(engine.spec_state, now)
        self.policy_changed(now, tracked_before=tracked)
        self.reservation_log.append((now, label, engine.spec_state, engine.holds, engine.hold_outcomes))

    def _add_queue(self, name: str, now: float) -> None:
        """Start integrating a ClusterQueue's usage (at the start, or when a policy change creates it)."""
        resource, nominal = primary_resource(self.engine, name)
        stats = QueueStats(resource=resource, nominal=nominal, last_time=now)
        stats.last_value = self._usage(name, resource)
        self.queues[name] = stats

    def _pods_ready_timers(self, now: float) -> None:
        """Pods-ready and timeout events of the workloads an engine starts with, and the ends of their backoffs."""
        engine = self.engine
        config = engine.pods_ready_config
        assert config is not None
        for key in sorted(engine.not_ready):
            wl = engine.workloads[key]
            if wl.state != ADMITTED:
                continue
            gen = self._generation.get(key, 0)
            ready = pods_ready.ready_at(wl)
            if ready is not None:
                self._push(max(now, ready), _PODS_READY, key, gen)
            self._push(
                max(now, (now if wl.admitted_at is None else wl.admitted_at) + config.timeout), _PODS_TIMEOUT, key, gen
            )
        for key, wl in sorted(engine.live.items()):
            if wl.state == PENDING and wl.requeue_at is not None:
                self._push(max(now, wl.requeue_at), _BACKOFF, key, None)

    def _protection_timer(self, key: str, after: float) -> None:
        """Wake the queues that could preempt ``key`` when its protection may next lapse (``protection``)."""
        wl = self.engine.workloads[key]
        protection = wl.spec.protection
        if protection is None or wl.admitted_at is None:
            return
        when = next_release(protection, wl.admitted_at, after)
        if when is not None:
            self._push(when, _PROTECTION, key, self._generation.get(key, 0))

    # ------------------------------------------------------------------ events

    def _push(self, when: float, kind: int, key: str, payload: object) -> None:
        heapq.heappush(self._events, (when, kind, next(self._seq), key, payload))

    def _runtime(self, key: str, spec: Workload) -> float | None:
        if key in self.runtimes and self.runtimes[key] is not None:
            return self.runtimes[key]
        if spec.runtime is not None:
            return spec.runtime
        return self.default_runtime

    def _schedule_finish(self, key: str, when: float) -> None:
        gen = self._generation.get(key, 0) + 1
        self._generation[key] = gen
        self._push(when, _FINISH, key, gen)

    def submit_at(self, spec: Workload, when: float) -> None:
        """Schedule a workload's submission."""
        self.records[spec.key] = WorkloadRecord(submitted_at=when)
        self._push(when, _SUBMIT, spec.key, spec)

    def node_joins_at(self, node: Node, when: float) -> None:
        """Schedule a node's arrival."""
        self._push(when, _NODE_JOIN, node.name, node)

    def node_leaves_at(self, name: str, when: float) -> None:
        """Schedule a node's departure (after the workloads that finish at the same instant)."""
        self._push(when, _NODE_LEAVE, name, None)

    def at(self, when: float, action: Action, label: str) -> None:
        """Schedule ``action(instant)`` at ``when`` (after that instant's finishes and checks, before its
        submissions; several at one instant run in the order given). ``label`` names it in ``decisions``."""
        self._push(when, _ACTION, label, action)

    def note(self, now: float, key: str, what: str, detail: str = "") -> None:
        """Record what happened to a workload (when decisions are collected)."""
        if self.decisions is not None:
            self.decisions.append((now, key, what, detail, self.last_event))

    def policy_changed(self, now: float, *, tracked_before: bool = True) -> None:
        """The engine was reconfigured at ``now`` (``Engine.reconfigure``): queues it added start being integrated.
        The workloads' timers stay scheduled (their keys and states carry over); when waitForPodsReady was just
        switched on (``tracked_before`` False), those of workloads not Ready yet are scheduled."""
        engine = self.engine
        for name in engine.cqs:
            if name not in self.queues:
                self._add_queue(name, now)
        for name, stats in self.queues.items():
            nominal = primary_resource(engine, name)[1] if name in engine.cqs else 0
            if nominal != stats.nominal:
                stats.nominal_log.append((now, stats.nominal))
                stats.nominal = nominal
        self._integrate(now, list(self.queues))
        if engine.pods_ready_config is not None and not tracked_before:
            self._pods_ready_timers(now)

    def complete_evictions(self, now: float) -> None:
        """Complete at once the evictions an action issued (a deactivation, a drained queue), as replays do."""
        engine = self.engine
        for key in sorted(engine.evicting):
            rec = self.records.setdefault(key, WorkloadRecord(submitted_at=now))
            wl = engine.workloads[key]
            if wl.eviction is not None and wl.eviction.preemptor is None:
                rec.ready_eviction, rec.ready_evicted_at = wl.eviction, now
                rec.evictions += 1
                self.note(now, key, "evicted", f"{wl.eviction.reason}: {wl.eviction.message}")
            self._generation[key] = self._generation.get(key, 0) + 1
            engine.complete_eviction(key, now)

    # ------------------------------------------------------------------ accounting

    def _usage(self, cq_name: str, resource: str) -> int:
        cq = self.engine.cqs.get(cq_name)
        if cq is None:
            return 0  # a ClusterQueue a policy change removed
        return sum(v for (f, r), v in cq.node.usage.items() if r == resource)

    def _integrate(self, now: float, names: list[str] | None = None) -> None:
        if names is None:
            names = list(self.engine.dirty)
            self.engine.dirty.clear()
        for name in names:
            stats = self.queues.get(name)
            if stats is None:
                continue
            stats.integral += stats.last_value * (now - stats.last_time)
            stats.last_time = now
            stats.last_value = self._usage(name, stats.resource)

    # ------------------------------------------------------------------ running

    def _drain(self, now: float, touched: set[str]) -> None:
        """Stopped queues take quota back first (Kueue's workload controller); drained pods end at once."""
        for stop in self.engine.drain(now):
            rec = self.records.setdefault(stop.workload, WorkloadRecord(submitted_at=now))
            rec.stop_eviction = stop
            rec.stopped_at = now
            touched.add(stop.cluster_queue)
            if self.decisions is not None:
                self.note(now, stop.workload, "evicted", f"{stop.reason}: {stop.message}")
            if stop.admitted:
                rec.evictions += 1
                if stop.cluster_queue in self.queues:
                    self.queues[stop.cluster_queue].drained += 1
                self.engine.complete_eviction(stop.workload, now)
            self._generation[stop.workload] = self._generation.get(stop.workload, 0) + 1

    def _settle(self, now: float) -> set[str]:
        engine = self.engine
        touched: set[str] = set()
        if engine.has_stopped_queues:
            self._drain(now, touched)
        for _ in range(self.max_cycles):
            heads = engine.heads()
            if not heads:
                break
            outcome = engine.cycle(now, heads)
            self.cycles += 1
            if self.record_outcomes:
                self.outcomes.append(outcome)
            if self.on_cycle is not None:
                self.on_cycle(now, outcome)
            for decision in outcome.admitted:
                key = decision.workload
                touched.add(decision.cluster_queue)
                if self.granted is not None:
                    self.granted.append(key)
                if decision.pending_checks:
                    # Quota reserved: it runs (and its runtime starts) once its admission checks are Ready.
                    self.records.setdefault(key, WorkloadRecord(submitted_at=now))
                    if key in self.checks_delay:
                        self._push(now + self.checks_delay[key], _CHECKS, key, None)
                    if self.decisions is not None:
                        self.note(now, key, "reserved", decision.cluster_queue)
                    continue
                self._admitted(key, decision.cluster_queue, now)
            for pre in outcome.preemptions:
                rec = self.records.setdefault(pre.victim, WorkloadRecord(submitted_at=now))
                if self.decisions is not None:
                    self.note(now, pre.victim, "preempted", f"by {pre.preemptor} ({pre.reason})")
                rec.preempted_by = pre.preemptor
                rec.evictions += 1
                self.queues[pre.victim_cluster_queue].preempted += 1
                touched.add(pre.victim_cluster_queue)
                self._generation[pre.victim] = self._generation.get(pre.victim, 0) + 1
            evicted = engine.complete_evictions(now) if engine.evicting else None
            if not outcome.changed and not outcome.parked and not evicted:
                break
        return touched

    def _admitted(self, key: str, cq_name: str, now: float) -> None:
        rec = self.records.setdefault(key, WorkloadRecord(submitted_at=now))
        rec.admitted_at = now
        rec.admissions += 1
        if rec.first_admitted_at is None:
            rec.first_admitted_at = now
        if cq_name in self.queues:
            self.queues[cq_name].admissions += 1
        runtime = self._runtime(key, self.engine.workloads[key].spec)
        if runtime is not None:
            self._schedule_finish(key, now + runtime)
        if self.decisions is not None:
            self.note(now, key, "admitted", cq_name)
        if self.engine.has_protection and self.engine.workloads[key].spec.protection is not None:
            self._protection_timer(key, now)
        if key in self.engine.not_ready:
            # waitForPodsReady: Ready after its pods_ready_after (if ever); evicted at the timeout otherwise.
            wl = self.engine.workloads[key]
            config = self.engine.pods_ready_config
            gen = self._generation.get(key, 0)
            ready = pods_ready.ready_at(wl)
            if ready is not None:
                self._push(ready, _PODS_READY, key, gen)
            if config is not None:
                self._push(now + config.timeout, _PODS_TIMEOUT, key, gen)
        if self.on_admit is not None:
            self.on_admit(key, now)

    def step(self, until: float | None) -> bool:
        """Process the next instant with events (or the start); False when nothing is left before ``until``.

        Without ``until``, a replay whose only events left are the PodsReady timeouts and backoffs of workloads
        that never get Ready, each already at ``backoffMaxSeconds``, ends: Kueue would requeue them forever
        (no ``backoffLimitCount``), every round the same as the last.
        """
        if not self._events:
            return False
        when = self._events[0][0]
        if until is not None and when > until:
            return False
        if until is None and self.engine.pods_ready_config is not None and self._endless():
            return False
        self._advance(when)
        return True

    def _endless(self) -> bool:
        """True when only the endless requeue loops of never-Ready workloads are left (see ``step``)."""
        config = self.engine.pods_ready_config
        assert config is not None
        for _, kind, _, key, _ in self._events:
            if kind != _PODS_TIMEOUT and kind != _BACKOFF:
                return False
            wl = self.engine.workloads.get(key)
            if wl is None or pods_ready.backoff_seconds(config, wl.requeue_count + 1) < config.backoff_max_seconds:
                return False
        return True

    def _advance(self, when: float) -> None:
        engine = self.engine
        self.now = when
        while self._events and self._events[0][0] == when:
            _, kind, _, key, payload = heapq.heappop(self._events)
            if kind == _FINISH:
                if payload != self._generation.get(key):
                    continue
                wl = engine.workloads.get(key)
                if wl is None or wl.state not in (ADMITTED, RESERVED, EVICTING):
                    continue
                self.finish_now(key, when)
            elif kind == _CHECKS:
                wl = engine.workloads.get(key)
                if wl is not None and engine.checks_ready(key, when):
                    self._admitted(key, wl.cq or "", when)
            elif kind == _PODS_READY:
                if payload == self._generation.get(key, 0):
                    engine.pods_ready(key, when)
            elif kind == _PODS_TIMEOUT:
                if payload == self._generation.get(key, 0):
                    self._pods_timeout(key, when)
            elif kind == _BACKOFF:
                if engine.backoff_finished(key) and self.decisions is not None:
                    self.note(when, key, "requeued", "BackoffFinished")
            elif kind == _ACTION:
                assert callable(payload)
                self.last_event = key
                payload(when)
                if engine.evicting:
                    self.complete_evictions(when)
            elif kind == _NODE_JOIN:
                assert isinstance(payload, Node)
                engine.add_node(payload)
            elif kind == _NODE_LEAVE:
                self.node_left(key, when)
            elif kind == _PROTECTION:
                wl = engine.workloads.get(key)
                if payload == self._generation.get(key, 0) and wl is not None and wl.state == ADMITTED:
                    engine.protection_lapsed(key)
                    self._protection_timer(key, when)
            else:
                assert isinstance(payload, Workload)
                engine.submit(payload)
        self._settle(when)
        if self.finalizers and self._finalize(when):
            self._settle(when)
        self._integrate(when)

    def _finalize(self, now: float) -> bool:
        """Run the finalizers (``finalizers``) after an instant settled; True if one finished (changing the
        engine)."""
        done = [f for f in self.finalizers if f(now)]
        for f in done:
            self.finalizers.remove(f)
        return bool(done)

    # ------------------------------------------------------------------ changes at an instant

    def finish_now(self, key: str, now: float) -> None:
        """The workload ends at ``now`` (its runtime ran out, or a timeline finishes it)."""
        engine = self.engine
        wl = engine.workloads[key]
        engine.finish(key)
        rec = self.records.setdefault(key, WorkloadRecord(submitted_at=now))
        rec.finished_at = now
        if wl.cq in self.queues:
            self.queues[wl.cq or ""].finished += 1
        self._generation[key] = self._generation.get(key, 0) + 1
        if self.decisions is not None:
            self.note(now, key, "finished")

    def submit_now(self, spec: Workload, now: float, checks_delay: float | None = None) -> None:
        """A workload is created at ``now`` (a timeline's ``create``)."""
        self.records[spec.key] = WorkloadRecord(submitted_at=now)
        if checks_delay is not None:
            self.checks_delay[spec.key] = checks_delay
        self.engine.submit(spec)
        if self.decisions is not None:
            self.note(now, spec.key, "created")

    def delete_now(self, key: str, now: float) -> None:
        """A workload object is deleted at ``now``: it leaves its queue, or frees its quota and nodes at once."""
        self.engine.delete(key)
        self._generation[key] = self._generation.get(key, 0) + 1
        if self.decisions is not None:
            self.note(now, key, "deleted")

    def node_left(self, name: str, now: float) -> None:
        """A node leaves at ``now``: the workloads with a pod on it lose their pods and queue again."""
        for lost in self.engine.remove_node(name, now):
            rec = self.records.setdefault(lost, WorkloadRecord(submitted_at=now))
            rec.evictions += 1
            rec.node_losses += 1
            self._generation[lost] = self._generation.get(lost, 0) + 1
            if self.decisions is not None:
                self.note(now, lost, "evicted", f"NodeLost: node {name} left the cluster")

    def runtime_changed(self, key: str, now: float) -> None:
        """A running workload's runtime changed (its ``sim.portal/runtime``): it ends that long after it started."""
        wl = self.engine.workloads.get(key)
        if wl is None or wl.state not in (ADMITTED, RESERVED, EVICTING):
            return
        runtime = self._runtime(key, wl.spec)
        if runtime is not None:
            self._schedule_finish(key, max(now, (now if wl.admitted_at is None else wl.admitted_at) + runtime))

    def _pods_timeout(self, key: str, now: float) -> None:
        """waitForPodsReady's timeout: the workload is evicted (its eviction completes at once) and, unless it was
        deactivated, queues again when its backoff ends."""
        engine = self.engine
        eviction = engine.pods_ready_timeout(key, now)
        if eviction is None:
            return
        rec = self.records.setdefault(key, WorkloadRecord(submitted_at=now))
        rec.ready_eviction, rec.ready_evicted_at = eviction, now
        rec.evictions += 1
        self.note(now, key, "evicted", f"{eviction.reason}: {eviction.message}")
        self._generation[key] = self._generation.get(key, 0) + 1
        engine.complete_eviction(key, now)
        wl = engine.workloads[key]
        if wl.requeue_at is not None:
            self._push(wl.requeue_at, _BACKOFF, key, None)

    def _flush(self, when: float) -> None:
        """Bring every queue's usage integral up to ``when``."""
        for name, stats in self.queues.items():
            stats.integral += stats.last_value * (when - stats.last_time)
            stats.last_time = when
            stats.last_value = self._usage(name, stats.resource)
        self.engine.dirty.clear()

    def run(self, until: float | None = None) -> ReplayResult:
        """Replay from the start until ``until`` (None = until no event is left)."""
        with fewer_collections():
            self._settle(self.now)
            self._integrate(self.now)
            while self.step(until):
                pass
        end = self.now if until is None else max(until, self.now)
        self._flush(end)
        self.now = end
        return ReplayResult(self.records, self.queues, self.start, end, self.cycles, self.outcomes)

    def run_until_admitted(self, key: str, horizon: float | None) -> float | None:
        """Advance until ``key`` holds quota; its time, or None if never / not before ``horizon``."""
        engine = self.engine

        def holds(k: str) -> bool:
            wl = engine.workloads.get(k)
            return wl is not None and wl.state in (ADMITTED, RESERVED)

        with fewer_collections():
            self._settle(self.now)
            if holds(key):
                return self.now
            while self._events:
                when = self._events[0][0]
                if horizon is not None and when > horizon:
                    return None
                self._advance(when)
                if holds(key):
                    return when
                wl = engine.workloads.get(key)
                if wl is None or wl.state == FINISHED:
                    return None
            return None

    def run_until_all_admitted(self, keys: Iterable[str], horizon: float | None) -> dict[str, float]:
        """Advance until every key holds quota (or ``horizon``); when each first held it at the end of an instant.

        One replay for many workloads: each time equals what ``run_until_admitted`` returns for that key alone
        (the replay does not depend on which workload is watched); keys missing from the answer never held
        quota before ``horizon``.
        """
        return self.run_window(keys, horizon, None)[0]

    def run_window(
        self, keys: Iterable[str], horizon: float | None, max_admissions: int | None
    ) -> tuple[dict[str, float], float | None, dict[str, float]]:
        """``run_until_all_admitted`` that also stops after the instant in which the replay granted quota for the
        ``max_admissions``-th time (any workload's grant counts): the times found, that instant when the replay
        stopped there with keys still waiting (else None), and when every workload it granted quota to (watched or
        not) first held it at the end of an instant.

        Every time found equals the unbounded replay's: the instants up to the stop are the same instants.
        """
        engine = self.engine

        def holds(k: str) -> bool:
            wl = engine.workloads.get(k)
            return wl is not None and wl.state in (ADMITTED, RESERVED)

        waiting = set(keys)
        found: dict[str, float] = {}
        held: dict[str, float] = {}
        granted = 0
        window_end: float | None = None
        with fewer_collections():
            self.granted = []
            self._settle(self.now)
            granted += len(self.granted)
            for key in self.granted:
                if key not in held and holds(key):
                    held[key] = self.now
            for key in [k for k in waiting if holds(k)]:
                found[key] = self.now
                waiting.discard(key)
            while self._events and waiting:
                if max_admissions is not None and granted >= max_admissions:
                    window_end = self.now
                    break
                when = self._events[0][0]
                if horizon is not None and when > horizon:
                    break
                self.granted = []
                self._advance(when)
                granted += len(self.granted)
                # Only a workload given quota during this instant can newly hold it at its end.
                for key in self.granted:
                    if key not in held and holds(key):
                        held[key] = when
                    if key in waiting and holds(key):
                        found[key] = when
                        waiting.discard(key)
        self.granted = None
        return found, window_end, held


__all__ = ["PENDING", "QueueStats", "Replay", "ReplayResult", "WorkloadRecord", "primary_resource"]
