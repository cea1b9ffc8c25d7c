"""What-if: replay the portal's recorded jobs through the engine under the policy as it was and a proposed one.

The current side is the history as it happened: the policy at the window's start, then every recorded policy
change inside the window (the audit log, ``queues.policy.recorded``) at its time, and the reservations that held
capacity in the window, each over its own (both sides). The proposed side is the same
history with the admin's change applied from the time they chose (by default the window's start): the
differences between the policy now and the proposal are laid over each recorded version from then on
(``overlay.lay_over``), so a recorded change the proposal does not touch still happens when it happened.

The replay covers a window (by default the last 14 days). Every job submitted in the window is
resubmitted at its recorded submit time, with its class, size, priority and recorded run time; jobs
that were already running when the window opened are carried in at its start with the run time they
had left (they hold capacity but are left out of the wait figures). Nodes are every node the cluster had at
some time in the window (``window_engine_nodes``): one that joined during it is added when it was first seen, one
that left is removed when it went (workloads on it lose their pods and queue again, to restart from the beginning,
as a job on a lost node does under the simulated backend). Labels, taints, capacity and device health are the
rows' latest: earlier values are not kept. The engine then decides admission, borrowing and preemption as Kueue
would, under each policy.

Run time of a job: started → finished plus what checkpoints banked before an eviction; a job still
running (or pending without a known run time) runs past the window's end. Jobs cancelled before they
started are left out (nobody knows whether their owner would have cancelled them under another policy).
A preempted workload restarts with its full run time, as a job without checkpoints would.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import partial

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from kernel.errors import DomainError
from kernel.quantity import format_quantity, is_device_resource
from pools.models import Cluster
from queues.engine import model as m
from queues.engine.scheduler import Engine
from queues.engine.simulation import Replay
from queues.engine.usage_decay import duration_words
from queues.engine_input import (
    WindowNode,
    cluster_engine_input,
    job_engine_pod_sets,
    ts,
    window_engine_nodes,
    workload_name,
)
from queues.models import Job, TeamQuota
from queues.policy.overlay import lay_over
from queues.policy.recorded import PolicyStep, recorded_policy
from queues.recent_usage import with_recent_usage
from queues.reservations.holds import cluster_holds

DEFAULT_DAYS = 14
#: Scheduling cycles allowed at one instant of a replay before it moves on (a settled instant needs a few).
MAX_CYCLES_PER_INSTANT = 500
#: Least wall time between two progress reports of a replay (each report may write a status row).
PROGRESS_EVERY_SECONDS = 0.5

#: Called with a step's label and the share of the replay's window done so far (0 to 1).
ProgressCallback = Callable[[str, float], None]


@dataclass(frozen=True)
class RecordedJob:
    """A recorded job as the replay needs it: when it arrived, how long it ran, and its workload shape."""

    job: Job
    submit_at: float
    runtime: float | None
    carried_in: bool = False


@dataclass(frozen=True)
class TeamOutcome:
    """Per team (ClusterQueue) figures of one replay."""

    cluster_queue: str
    team: str
    jobs: int
    admitted: int
    still_waiting: int
    wait_p50_seconds: float | None
    wait_p90_seconds: float | None
    used_device_hours: float
    nominal_device_hours: float
    borrowed_device_hours: float
    preemptions: int
    #: Times a workload lost its pods because its node left the cluster (it then queued again).
    node_losses: int = 0
    #: Device-hours the team's jobs waited in the window: each job's devices × its wait (to its first admission, or
    #: to the window's end) — what the wait attribution's studies compare.
    waited_device_hours: float = 0.0

    @property
    def utilisation(self) -> float | None:
        """Device-hours used over device-hours of nominal quota (above 1 when the team borrowed)."""
        if self.nominal_device_hours <= 0:
            return None
        return self.used_device_hours / self.nominal_device_hours


#: Device-hours below which two used totals count as the same (the table shows one decimal).
USED_HOURS_TOLERANCE = 0.05


def utilisation_verdict(before: TeamOutcome | None, after: TeamOutcome | None) -> str:
    """Whether a team's change of utilisation is good for its users: ``better``, ``worse`` or ``""`` (neither).

    Utilisation is used ÷ nominal device-hours, so it rises when the quota is cut even if the team's jobs got
    no more done. The verdict therefore follows the device-hours the team's jobs used in the window (the same
    jobs are replayed under both policies): more is better, less is worse, the same is neither — whatever the
    ratio did. With the nominal quota unchanged this is the direction of the utilisation itself.
    """
    if before is None or after is None or before.utilisation is None or after.utilisation is None:
        return ""
    used = after.used_device_hours - before.used_device_hours
    if abs(used) < USED_HOURS_TOLERANCE:
        return ""
    return "better" if used > 0 else "worse"


@dataclass(frozen=True)
class ReplayOutcome:
    """One replay: figures per ClusterQueue, in name order."""

    teams: tuple[TeamOutcome, ...]
    unsettled: tuple[float, ...] = ()

    def by_queue(self) -> dict[str, TeamOutcome]:
        """Outcomes keyed by ClusterQueue name."""
        return {t.cluster_queue: t for t in self.teams}


@dataclass(frozen=True)
class ReplayedChange:
    """A recorded policy change the replay applied at its time (both sides), in words."""

    at: datetime
    user: str
    lines: tuple[str, ...]


@dataclass(frozen=True)
class WhatIf:
    """The policy as it was and the proposed one replayed over the same window and jobs.

    ``replayed``: the recorded changes applied at their times; ``created_during``: objects created during the
    window, taken as present from its start; ``apply_at``: when the proposal took effect in the replay.
    """

    cluster: str
    start: datetime
    end: datetime
    jobs: int
    carried_in: int
    left_out: int
    current: ReplayOutcome
    proposed: ReplayOutcome
    replayed: tuple[ReplayedChange, ...] = ()
    apply_at: datetime | None = None
    created_during: tuple[str, ...] = ()

    @property
    def created_counts(self) -> str:
        """``created_during`` counted by kind, most first: "QuotaLine ×14, TeamQuota ×3, Cluster"."""
        counts = Counter(entry.split(" ", 1)[0] for entry in self.created_during)
        ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        return ", ".join(kind if n == 1 else f"{kind} ×{n}" for kind, n in ordered)

    @property
    def node_losses(self) -> tuple[int, int]:
        """Times a running job lost its pods to a node leaving the cluster: (current policy, proposed policy)."""
        return sum(t.node_losses for t in self.current.teams), sum(t.node_losses for t in self.proposed.teams)

    def rows(self) -> list[dict]:
        """One row per team with both outcomes side by side (for the table and the chart)."""
        current, proposed = self.current.by_queue(), self.proposed.by_queue()
        out = []
        for name in sorted(set(current) | set(proposed)):
            before, after = current.get(name), proposed.get(name)
            out.append({"cluster_queue": name, "team": (after or before).team, "current": before, "proposed": after})
        return out


class WhatIfTooSlow(DomainError):
    """The replay ran past its time budget (``WHATIF_MAX_SECONDS``); a shorter window answers sooner."""


class _MeteredReplay(Replay):
    """A replay that also integrates, per ClusterQueue, device units in use and units above nominal.

    Guards: at most ``MAX_CYCLES_PER_INSTANT`` scheduling cycles at one instant (instants that hit it are
    recorded in ``unsettled``: the engine kept preempting and re-admitting there) and a wall-clock budget.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        start: float,
        end: float | None = None,
        budget_seconds: float | None = None,
        on_progress: Callable[[float], None] | None = None,
    ) -> None:
        super().__init__(engine, start=start, max_cycles_per_instant=MAX_CYCLES_PER_INSTANT)
        self.unsettled: list[float] = []
        self.window = (start, end)
        self.on_progress = on_progress
        self._next_report = time.monotonic() + PROGRESS_EVERY_SECONDS
        self.budget = budget_seconds
        self._deadline = None if budget_seconds is None else time.monotonic() + budget_seconds
        self.used_seconds: dict[str, float] = defaultdict(float)
        self.borrowed_seconds: dict[str, float] = defaultdict(float)
        #: Nominal device units × seconds per ClusterQueue (its quota may change during the window).
        self.nominal_seconds: dict[str, float] = defaultdict(float)
        self._nominal: dict[str, tuple[float, int]] = {name: (start, _nominal(engine, name)) for name in engine.cqs}
        self._level: dict[str, tuple[float, int, int]] = dict.fromkeys(engine.cqs, (start, 0, 0))

    def policy_changed(self, now: float, *, tracked_before: bool = True) -> None:
        """Close each queue's nominal stretch at ``now`` and open the next at its new nominal."""
        for name in set(self._nominal) | set(self.engine.cqs):
            since, nominal = self._nominal.get(name, (now, 0))
            self.nominal_seconds[name] += nominal * (now - since)
            self._nominal[name] = (now, _nominal(self.engine, name))
        super().policy_changed(now, tracked_before=tracked_before)

    def nominal_device_seconds(self, name: str, end: float) -> float:
        """Nominal device units × seconds of a queue over the window (each stretch at the quota it had)."""
        since, nominal = self._nominal.get(name, (end, 0))
        return self.nominal_seconds[name] + nominal * (end - since)

    def _levels(self, name: str) -> tuple[int, int]:
        cq = self.engine.cqs.get(name)
        if cq is None:
            return 0, 0  # a ClusterQueue a recorded change removed
        used = borrowed = 0
        for (flavor, resource), value in cq.node.usage.items():
            if not is_device_resource(resource):
                continue
            used += value
            quota = cq.quotas.get((flavor, resource))
            borrowed += max(0, value - (quota.nominal if quota is not None else 0))
        return used, borrowed

    def _meter(self, name: str, now: float) -> None:
        since, used, borrowed = self._level[name]
        self.used_seconds[name] += used * (now - since)
        self.borrowed_seconds[name] += borrowed * (now - since)
        self._level[name] = (now, *self._levels(name))

    def _settle(self, now: float) -> set[str]:
        before = self.cycles
        touched = super()._settle(now)
        if self.cycles - before >= self.max_cycles:
            self.unsettled.append(now)
        clock = time.monotonic()
        if self.on_progress is not None and clock >= self._next_report and self.window[1] is not None:
            start, end = self.window
            self.on_progress(min(1.0, max(0.0, (now - start) / (end - start))) if end > start else 1.0)
            self._next_report = clock + PROGRESS_EVERY_SECONDS
        if self._deadline is not None and clock > self._deadline:
            raise WhatIfTooSlow(
                f"the replay took longer than {self.budget:g} s (it had reached "
                f"{datetime.fromtimestamp(now, tz=UTC):%Y-%m-%d %H:%M} UTC); preview a shorter window"
            )
        return touched

    def _integrate(self, now: float, names: list[str] | None = None) -> None:
        if names is None:
            names = list(self.engine.dirty)
            self.engine.dirty.clear()
        for name in names:
            if name not in self._level:
                self._level[name] = (now, 0, 0)  # a ClusterQueue a recorded change added
            self._meter(name, now)
        super()._integrate(now, names)

    def _flush(self, when: float) -> None:
        for name in self._level:
            self._meter(name, when)
        super()._flush(when)


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (as ``simulate --json`` reports wait percentiles); None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


#: Job fields the replay never reads (large texts and JSON): not loaded.
_UNUSED_JOB_FIELDS = (
    "image",
    "command",
    "args",
    "env",
    "checkpoint_command",
    "wait_message",
    "kueue_message",
    "wait_details",
    "assignment",
)


def recorded_jobs(*, cluster: Cluster, start: datetime, end: datetime) -> tuple[list[RecordedJob], int]:
    """Jobs of the cluster to replay in [start, end), and how many were left out (cancelled before starting)."""
    jobs = (
        Job.objects.filter(cluster=cluster, submitted_at__lt=end)
        .filter(
            Q(submitted_at__gte=start)
            | Q(started_at__lt=start, finished_at__isnull=True)
            | Q(finished_at__gt=start, started_at__lt=start)
        )
        .select_related("team", "priority_class", "resource_class")
        .prefetch_related("resource_class__flavor_links__flavor")
        .defer(*_UNUSED_JOB_FIELDS)
        .order_by("submitted_at", "pk")
    )
    out: list[RecordedJob] = []
    left_out = 0
    for job in jobs:
        banked = float(job.run_seconds_banked or 0)
        if job.submitted_at < start:
            if job.started_at is None or job.started_at >= start:
                continue
            if job.finished_at is None:
                out.append(RecordedJob(job, ts(start), None, carried_in=True))
            else:
                out.append(RecordedJob(job, ts(start), (job.finished_at - start).total_seconds(), carried_in=True))
            continue
        if job.started_at is not None:
            runtime = None if job.finished_at is None else (job.finished_at - job.started_at).total_seconds() + banked
        elif job.is_final:
            left_out += 1
            continue
        else:
            runtime = job.sim_runtime_seconds or job.max_runtime_seconds
            runtime = float(runtime) if runtime else None
        out.append(RecordedJob(job, ts(job.submitted_at), runtime))
    return out, left_out


def _nominal(engine: Engine, name: str) -> int:
    """A ClusterQueue's nominal quota of device resources, summed (0 when it does not exist)."""
    cq = engine.cqs.get(name)
    if cq is None:
        return 0
    return sum(q.nominal for (_, r), q in cq.quotas.items() if is_device_resource(r))


def policy_configuration(*, cluster: Cluster, nodes: bool = True) -> m.ClusterState:
    """The cluster's policy and (unless not ``nodes``) nodes as the database holds them now: one side of a what-if.

    Fairness that remembers is part of the policy on every cluster (a preview shows what it would do); the teams'
    recent usage is read by the replay, as of its window's start.
    """
    return cluster_engine_input(
        cluster=cluster, jobs=[], with_nodes=nodes, usage_policy=True, recent=False, with_reservations=False
    ).state


def _declared(config: m.ClusterState) -> dict[str, set[str]]:
    """Resources each namespace's ClusterQueue covers (what a job's workload requests beyond its device)."""
    covered = {cq.name: {r for rg in cq.resource_groups for r in rg.covered_resources} for cq in config.cluster_queues}
    return {lq.namespace: covered.get(lq.cluster_queue, set()) for lq in config.local_queues}


def replay_policy(
    *,
    config: m.ClusterState,
    jobs: Iterable[RecordedJob],
    start: float,
    end: float,
    teams: Mapping[str, str],
    on_progress: Callable[[float], None] | None = None,
    nodes: Sequence[WindowNode] | None = None,
    relax_topology: bool = False,
    changes: Sequence[tuple[float, m.ClusterState]] = (),
    job_waits: dict[str, float | None] | None = None,
) -> ReplayOutcome:
    """Replay recorded jobs through the engine under ``config`` from ``start`` to ``end`` (engine seconds).

    ``nodes`` (when given) replace the configuration's: each is there from its ``joins_at`` (or the start) until
    its ``leaves_at`` (or the end). ``changes``: the policy (no nodes) from each given time on; the engine is
    rebuilt on it there (``Engine.reconfigure``), keeping the nodes, every workload and the teams' recent usage.
    ``relax_topology``: the jobs' topology rules are dropped (a what-if of perfectly defragmented placements: every
    job finds its devices together). ``job_waits``, when given, is filled with each replayed (not carried-in)
    workload's wait: submission to first admission (None: not admitted).
    """
    declared = _declared(config)
    if nodes is not None:
        config = replace(config, nodes=tuple(w.node for w in nodes if w.joins_at is None))
    engine = Engine(replace(config, workloads=()), start)
    budget = settings.WHATIF_MAX_SECONDS
    replay = _MeteredReplay(
        engine, start=start, end=end, budget_seconds=float(budget) if budget else None, on_progress=on_progress
    )
    if nodes:
        # Placement stays on even while no node is there yet: a job waits for one rather than for quota alone.
        engine.pool.enabled = True
        for w in nodes:
            if w.joins_at is not None:
                replay.node_joins_at(w.node, w.joins_at)
            if w.leaves_at is not None:
                replay.node_leaves_at(w.node.name, w.leaves_at)
    for when, policy in changes:
        replay.at(when, partial(_reconfigure, replay, policy), "recorded policy change")
    carried: set[str] = set()
    devices: dict[str, int] = {}
    for rec in jobs:
        job = rec.job
        pod_sets = job_engine_pod_sets(job, declared=declared.get(job.team.namespace, set()))
        if relax_topology:
            pod_sets = tuple(replace(ps, topology=None) for ps in pod_sets)
        wl = m.Workload(
            namespace=job.team.namespace,
            name=workload_name(job),
            queue_name=job.team.local_queue_name,
            pod_sets=pod_sets,
            priority=job.priority,
            priority_class=job.priority_class.name if job.priority_class_id else None,
            created_at=rec.submit_at,
            uid=f"job-{job.pk}",
            job_uid=f"job-{job.pk}",
            runtime=rec.runtime,
            submit_at=rec.submit_at,
        )
        if rec.carried_in:
            carried.add(wl.key)
        devices[wl.key] = sum(
            ps.count * amount for ps in pod_sets for r, amount in ps.requests.items() if is_device_resource(r)
        )
        replay.submit_at(wl, rec.submit_at)
    result = replay.run(until=end)
    engine = replay.engine
    waits: dict[str, list[float]] = defaultdict(list)
    waited: dict[str, float] = defaultdict(float)
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    node_losses: dict[str, int] = defaultdict(int)
    for key, wl in engine.workloads.items():
        if wl.cq is not None:
            node_losses[wl.cq] += result.records[key].node_losses
        if key in carried or wl.cq is None:
            continue
        rec = result.records[key]
        if job_waits is not None:
            admitted = rec.first_admitted_at
            job_waits[key] = None if admitted is None else admitted - rec.submitted_at
        c = counts[wl.cq]
        c[0] += 1
        if rec.first_admitted_at is not None:
            c[1] += 1
            waits[wl.cq].append(rec.first_admitted_at - rec.submitted_at)
        else:
            c[2] += 1
            waits[wl.cq].append(end - rec.submitted_at)
        waited[wl.cq] += waits[wl.cq][-1] * devices.get(key, 0) / 3600
    teams_out = []
    for name in sorted(set(engine.cqs) | set(replay.used_seconds) | set(counts)):
        jobs_n, admitted, waiting = counts[name]
        teams_out.append(
            TeamOutcome(
                cluster_queue=name,
                team=teams.get(name, name),
                jobs=jobs_n,
                admitted=admitted,
                still_waiting=waiting,
                wait_p50_seconds=percentile(waits[name], 0.5),
                wait_p90_seconds=percentile(waits[name], 0.9),
                used_device_hours=replay.used_seconds[name] / 3600,
                nominal_device_hours=replay.nominal_device_seconds(name, end) / 3600,
                borrowed_device_hours=replay.borrowed_seconds[name] / 3600,
                preemptions=result.queues[name].preempted if name in result.queues else 0,
                node_losses=node_losses[name],
                waited_device_hours=waited[name],
            )
        )
    return ReplayOutcome(tuple(teams_out), tuple(replay.unsettled))


def _reconfigure(replay: Replay, policy: m.ClusterState, now: float) -> None:
    """A recorded (or proposed) policy change at ``now``: the engine is rebuilt on it, with the nodes it has."""
    engine = replay.engine
    engine.reconfigure(replace(policy, nodes=engine.spec_state.nodes), now)
    replay.policy_changed(now)


@dataclass
class WhatIfRequest:
    """The window of a what-if: ``days`` back from ``now`` (or an explicit ``window``)."""

    days: int = DEFAULT_DAYS
    now: datetime | None = None
    window: timedelta | None = None

    def bounds(self) -> tuple[datetime, datetime]:
        """(start, end) of the window."""
        end = self.now or timezone.now()
        return end - (self.window or timedelta(days=self.days)), end


def whatif_compare(
    *,
    cluster: Cluster,
    current: m.ClusterState,
    proposed: m.ClusterState,
    request: WhatIfRequest | None = None,
    on_progress: ProgressCallback | None = None,
    apply_at: datetime | None = None,
) -> WhatIf:
    """Replay the window's recorded jobs of ``cluster`` under the policy as it was (the recorded changes at their
    times) and under the same history with the change from ``current`` to ``proposed`` applied from ``apply_at``
    (None: the window's start), on the window's nodes.

    The configurations' own nodes are ignored: both replays use the nodes of ``window_engine_nodes``.
    ``on_progress`` hears ("current", share) during the first replay and ("proposed", share) during the second.
    """
    request = request or WhatIfRequest()
    start, end = request.bounds()
    effective = min(max(apply_at or start, start), end)
    jobs, left_out = recorded_jobs(cluster=cluster, start=start, end=end)
    teams = dict(TeamQuota.objects.filter(cluster=cluster).values_list("cluster_queue_name", "team__name"))
    nodes = window_engine_nodes(cluster=cluster, start=start, end=end)
    recorded = recorded_policy(cluster=cluster, start=start, end=end, now=_policy_only(current))
    history = [(step.at, step.policy) for step in recorded.steps]
    held = cluster_holds(cluster=cluster, start=start, end=end)
    sides = {
        "current": with_holds(recorded.initial, [(ts(at), policy) for at, policy in history], held),
        "proposed": with_holds(*_proposed_side(recorded.initial, history, current, proposed, effective, start), held),
    }
    args = {"jobs": jobs, "start": ts(start), "end": ts(end), "teams": teams, "nodes": nodes}
    outcomes = {}
    for side, (config, changes) in sides.items():
        report = None if on_progress is None else (lambda share, side=side: on_progress(side, share))
        config = with_recent_usage(config, cluster=cluster, as_of=start)
        outcomes[side] = replay_policy(config=config, changes=changes, on_progress=report, **args)
    return WhatIf(
        cluster=cluster.name,
        start=start,
        end=end,
        jobs=sum(1 for j in jobs if not j.carried_in),
        carried_in=sum(1 for j in jobs if j.carried_in),
        left_out=left_out,
        current=outcomes["current"],
        proposed=outcomes["proposed"],
        replayed=tuple(_replayed(step) for step in recorded.steps),
        apply_at=effective,
        created_during=tuple(f"{e.model.split('.')[-1]} {e.object_repr}" for e in recorded.present_from_start),
    )


def with_holds(
    config: m.ClusterState, changes: list[tuple[float, m.ClusterState]], holds: tuple[m.QuotaHold, ...]
) -> tuple[m.ClusterState, list[tuple[float, m.ClusterState]]]:
    """A side of a replay with the reservations' holds: each version of the policy carries them, and the engine
    applies those in force at its time (the replay rebuilds it at each edge of a window)."""
    return replace(config, reservations=holds), [(at, replace(policy, reservations=holds)) for at, policy in changes]


def _policy_only(config: m.ClusterState) -> m.ClusterState:
    return replace(config, nodes=(), workloads=())


def _proposed_side(
    initial: m.ClusterState,
    history: list[tuple[datetime, m.ClusterState]],
    current: m.ClusterState,
    proposed: m.ClusterState,
    when: datetime,
    start: datetime,
) -> tuple[m.ClusterState, list[tuple[float, m.ClusterState]]]:
    """The proposed side's policy at the start and its changes: the recorded ones, with the proposal laid over each
    version from ``when`` on (and a change at ``when`` itself when it falls after the start)."""
    config = lay_over(initial, current, proposed) if when <= start else initial
    changes: list[tuple[float, m.ClusterState]] = []
    at_when = initial
    for at, policy in history:
        if at <= when:
            at_when = policy
        changes.append((ts(at), lay_over(policy, current, proposed) if at >= when else policy))
    if when > start:
        changes.append((ts(when), lay_over(at_when, current, proposed)))
        changes.sort(key=lambda item: item[0])
    return config, changes


def _replayed(step: PolicyStep) -> ReplayedChange:
    """A recorded change in words: per audited object, what it is and each field before → after."""
    users = sorted({e.user for e in step.entries})
    lines = []
    for e in step.entries:
        fields = "; ".join(f"{c.field} {c.before or '–'} → {c.after or '–'}" for c in e.changes if c.field != "id")
        lines.append(f"{e.model.split('.')[-1]} {e.object_repr} {e.action}" + (f": {fields}" if fields else ""))
    return ReplayedChange(at=step.at, user=", ".join(users), lines=tuple(lines))


def _outcome_data(outcome: ReplayOutcome) -> dict:
    return {"teams": [asdict(t) for t in outcome.teams], "unsettled": list(outcome.unsettled)}


def _outcome_from(data: Mapping) -> ReplayOutcome:
    return ReplayOutcome(tuple(TeamOutcome(**t) for t in data["teams"]), tuple(data.get("unsettled", ())))


def whatif_to_data(whatif: WhatIf) -> dict:
    """A what-if as JSON-ready data (a preview's stored result)."""
    return {
        "cluster": whatif.cluster,
        "start": whatif.start.isoformat(),
        "end": whatif.end.isoformat(),
        "jobs": whatif.jobs,
        "carried_in": whatif.carried_in,
        "left_out": whatif.left_out,
        "current": _outcome_data(whatif.current),
        "proposed": _outcome_data(whatif.proposed),
        "replayed": [{"at": c.at.isoformat(), "user": c.user, "lines": list(c.lines)} for c in whatif.replayed],
        "apply_at": whatif.apply_at.isoformat() if whatif.apply_at is not None else None,
        "created_during": list(whatif.created_during),
    }


def whatif_from_data(data: Mapping) -> WhatIf:
    """The what-if ``whatif_to_data`` wrote."""
    return WhatIf(
        cluster=data["cluster"],
        start=datetime.fromisoformat(data["start"]),
        end=datetime.fromisoformat(data["end"]),
        jobs=data["jobs"],
        carried_in=data["carried_in"],
        left_out=data["left_out"],
        current=_outcome_from(data["current"]),
        proposed=_outcome_from(data["proposed"]),
        replayed=tuple(
            ReplayedChange(datetime.fromisoformat(c["at"]), c["user"], tuple(c["lines"]))
            for c in data.get("replayed", ())
        ),
        apply_at=datetime.fromisoformat(data["apply_at"]) if data.get("apply_at") else None,
        created_during=tuple(data.get("created_during", ())),
    )


def _quota_map(groups: Iterable[m.ResourceGroup]) -> dict[str, tuple]:
    """``flavor/resource`` → (nominal, borrowing limit, lending limit) of resource groups."""
    return {
        f"{fq.name}/{rq.name}": (rq.nominal, rq.borrowing_limit, rq.lending_limit)
        for rg in groups
        for fq in rg.flavors
        for rq in fq.resources
    }


def _limit(value: int | None, resource: str) -> str:
    return "none" if value is None else format_quantity(value, resource)


def _fair(value: m.FairSharing | None) -> str:
    """``off`` or ``on (strategy, strategy)``."""
    return "off" if value is None else f"on ({', '.join(value.preemption_strategies)})"


def config_changes(current: m.ClusterState, proposed: m.ClusterState) -> list[str]:
    """Plain-language differences between two policies: queues and cohorts added, removed or changed, per line."""
    out: list[str] = []
    if current.fair_sharing != proposed.fair_sharing:
        out.append(f"fair sharing: {_fair(current.fair_sharing)} → {_fair(proposed.fair_sharing)}")
    for kind, before_all, after_all in (
        ("ClusterQueue", current.cluster_queues, proposed.cluster_queues),
        ("Cohort", current.cohorts, proposed.cohorts),
    ):
        before, after = {x.name: x for x in before_all}, {x.name: x for x in after_all}
        for name in sorted(set(before) | set(after)):
            b, a = before.get(name), after.get(name)
            if b is None:
                out.append(f"{kind} {name}: added")
                continue
            if a is None:
                out.append(f"{kind} {name}: removed")
                continue
            if b == a:
                continue
            parent_attr = "cohort" if kind == "ClusterQueue" else "parent"
            if getattr(b, parent_attr) != getattr(a, parent_attr):
                out.append(
                    f"{kind} {name}: {parent_attr} {getattr(b, parent_attr) or 'none'} → "
                    f"{getattr(a, parent_attr) or 'none'}"
                )
            qb, qa = _quota_map(b.resource_groups), _quota_map(a.resource_groups)
            for line in sorted(set(qb) | set(qa)):
                resource = line.split("/", 1)[1]
                if line not in qb:
                    out.append(f"{kind} {name}: {line} added, nominal {_limit(qa[line][0], resource)}")
                elif line not in qa:
                    out.append(f"{kind} {name}: {line} removed")
                else:
                    for idx, what in enumerate(("nominal", "borrowing limit", "lending limit")):
                        if qb[line][idx] != qa[line][idx]:
                            out.append(
                                f"{kind} {name}: {line} {what} {_limit(qb[line][idx], resource)} → "
                                f"{_limit(qa[line][idx], resource)}"
                            )
            if kind == "ClusterQueue":
                for attr in ("preemption", "queueing_strategy", "flavor_fungibility", "stop_policy", "fair_weight"):
                    if getattr(b, attr) != getattr(a, attr):
                        out.append(f"{kind} {name}: {attr.replace('_', ' ')} changed")
            else:
                if b.fair_weight != a.fair_weight:
                    out.append(f"{kind} {name}: fair weight {b.fair_weight:g} → {a.fair_weight:g}")
                if b.usage_decay != a.usage_decay:
                    out.append(
                        f"{kind} {name}: fairness that remembers {_decay(b.usage_decay)} → {_decay(a.usage_decay)}"
                    )
    return out


def _decay(policy: m.UsageDecay | None) -> str:
    """A cohort's usage-decay policy in words ("off", "half-life 3.5 days over 7 days")."""
    if policy is None:
        return "off"
    return f"half-life {duration_words(policy.half_life)} over {duration_words(policy.window)}"
