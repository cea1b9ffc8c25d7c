"""The engine's view of one cluster for diagnosis: expected runtimes and ends, verdicts and ETAs.

Shared by ``queues.diagnosis`` (the services), ``queues.diagnosis_store`` (what is stored per state version) and
``queues.diagnosis_suggestions``. docs/researchers.md explains the method.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings

from pools.models import Cluster, ResourceClass
from pools.workload_kinds import kind_spec
from queues import engine
from queues import selectors as sel
from queues.engine import model as m
from queues.engine.wait_codes import never_fits
from queues.engine_input import EngineInput, cluster_engine_input, job_workload, ts
from queues.engine_jobs import PerCluster
from queues.models import Job, Team, WaitReason
from queues.reservations.holds import lead, until_text
from queues.services import default_runtime, has_checkpoint_policy

#: How far ahead the ETA simulation looks before saying "no estimate".
ETA_HORIZON = timedelta(days=14)
#: Fewer recent admissions than this and the p90 is widened by a fixed share of the wait instead.
MIN_HISTORY = 5
#: Share of the expected wait added to p50 for p90 when the queue has too little history.
FALLBACK_SPREAD = 0.5
#: The p90 is never closer to the p50 than this share of the expected wait (a calm history is no promise).
MIN_SPREAD = 0.2
#: A running job past its expected end (kubernetes mode) is assumed to end within this.
OVERDUE_GRACE = timedelta(minutes=1)


# --------------------------------------------------------------------------- results


@dataclass
class Eta:
    """When a job is expected to get its quota: p50 and p90, or "starts now", or no estimate."""

    starts_now: bool = False
    p50: datetime | None = None
    p90: datetime | None = None
    method: str = ""
    samples: int = 0
    #: The p90 lies at least this many seconds after the p50 (the queue's recent p90 − p50 of waits) …
    spread_floor: float = 0.0
    #: … and at least this share of the wait still ahead (see ``p90_after``).
    spread_share: float = 0.0
    #: The p50 is extended from a bounded replay, not found by it (``queues.diagnosis_pages``).
    extended: bool = False

    @property
    def known(self) -> bool:
        """Whether there is an estimate at all."""
        return self.starts_now or self.p50 is not None

    def seen_at(self, now: datetime) -> Eta:
        """The estimate as shown at ``now``: "starts now" is now, and the p90's spread follows the wait left."""
        if self.starts_now:
            return dataclasses.replace(self, p50=now, p90=now)
        if self.p50 is None:
            return self
        return dataclasses.replace(
            self, p90=p90_after(self.p50, floor=self.spread_floor, share=self.spread_share, now=now)
        )


def p90_after(p50: datetime, *, floor: float, share: float, now: datetime) -> datetime:
    """The p90 of an ETA at ``now``: ``floor`` seconds after the p50 at least, and ``share`` of the wait left."""
    wait = max((p50 - now).total_seconds(), 0.0)
    return p50 + timedelta(seconds=max(floor, wait * share))


@dataclass
class Suggestion:
    """A change that would let the job start now, verified by the engine."""

    kind: str  # topology | devices | class | priority
    title: str
    message: str
    changes: dict[str, object] = field(default_factory=dict)


@dataclass
class Verdict:
    """The engine's answer for one workload, in portal terms."""

    admissible: bool
    code: str = ""
    message: str = ""
    kueue_message: str = ""
    details: dict = field(default_factory=dict)
    flavors: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    borrowing: bool = False
    preemption_targets: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """The reason's short label."""
        return WaitReason(self.code).label if self.code in WaitReason.values else ""


@dataclass
class EngineContext:
    """One cluster's engine state at ``now``, with expected end times and runtimes filled in."""

    cluster: Cluster
    now: datetime
    inp: EngineInput
    state: m.ClusterState
    end_times: dict[str, float]
    default_runtime: float
    runtimes: dict[int, float]  # class id → expected runtime (kubernetes mode: recent history)
    declared: dict[int, set[str]] = field(default_factory=dict)  # team id → resources its queue declares
    waits: dict[int, list[float]] = field(default_factory=dict)  # team id → recent waits in its queue
    wait_spreads: dict[int, float] = field(default_factory=dict)  # team id → p90 − p50 of those waits
    #: team id → ``eta_spread_terms``
    spread_terms: dict[int, tuple[float, float, int, str]] = field(default_factory=dict)
    #: Every pending job is in ``state`` (else only what explanations read: ``diagnosis_store.explain_context``).
    whole: bool = True

    def without(self, key: str) -> m.ClusterState:
        """The state with one workload removed (to explain a modified copy of it)."""
        return dataclasses.replace(self.state, workloads=tuple(w for w in self.state.workloads if w.key != key))


#: The expected runtime of a job that runs until stopped (a session, a service): far past any ETA's horizon.
UNTIL_STOPPED_SECONDS = 365 * 24 * 3600.0


def is_simulated(cluster: Cluster) -> bool:
    """Whether the portal's own engine decides for this cluster."""
    return cluster.backend == Cluster.Backend.SIMULATED


def expected_runtime(job: Job, *, cluster: Cluster, history: dict[int, float]) -> float:
    """Seconds a job is expected to run in all (before subtracting what checkpoints banked).

    Simulated: its simulated runtime (else the default). Kubernetes: the median runtime of the class's
    recent successful jobs, capped by the job's maximum runtime; the maximum alone when there is no history.
    A session or a service runs until stopped: it is expected to hold its devices past any estimate's horizon.
    """
    if kind_spec(job.kind).runs_until_stopped:
        return UNTIL_STOPPED_SECONDS
    if is_simulated(cluster):
        seconds = default_runtime(job).total_seconds()
    else:
        seconds = history.get(job.resource_class_id) or float(settings.SIMULATED_DEFAULT_RUNTIME_SECONDS)
    if job.max_runtime_seconds:
        seconds = min(seconds, float(job.max_runtime_seconds))
    return seconds


def expected_end(job: Job, *, now: datetime, cluster: Cluster, history: dict[int, float]) -> datetime:
    """When a quota-holding job is expected to release it."""
    remaining = timedelta(
        seconds=max(expected_runtime(job, cluster=cluster, history=history) - job.run_seconds_banked, 0)
    )
    if job.state == Job.State.RUNNING:
        end = job.state_changed_at + remaining
        if not is_simulated(cluster) and end < now:
            return now + OVERDUE_GRACE
        return max(end, now)
    if job.state == Job.State.PREEMPTING:
        grace = settings.SIMULATED_CHECKPOINT_SECONDS if has_checkpoint_policy(job) else 0
        return max(job.state_changed_at + timedelta(seconds=grace), now)
    return now + remaining  # admitted: starts at the next tick


def class_runtime_history(classes: Iterable[int]) -> dict[int, float]:
    """Median recent runtime per class (kubernetes mode only)."""
    out = {}
    for class_id in classes:
        rc = ResourceClass(pk=class_id)
        p50 = sel.percentile(sel.recent_class_runtimes(resource_class=rc), 50)
        if p50:
            out[class_id] = p50
    return out


#: Per cluster, each workload of its last context with its expected runtime: (the workload as the engine input gave
#: it, what the runtime read besides the job, the workload with its runtime). The engine input gives the same
#: workload object for the same job row (``queues.engine_jobs``), so a refresh after one change makes one copy.
_WITH_RUNTIME: PerCluster[dict[str, tuple[m.Workload, tuple, m.Workload]]] = PerCluster()


def engine_context(cluster: Cluster, *, now: datetime) -> EngineContext:
    """Build the engine state of ``cluster`` once; every explain / estimate of a request reuses it."""
    inp = cluster_engine_input(cluster=cluster, now=now)
    simulated = is_simulated(cluster)
    history = {} if simulated else class_runtime_history({j.resource_class_id for j in inp.jobs_by_key.values()})
    default = settings.SIMULATED_DEFAULT_RUNTIME_SECONDS
    end_times: dict[str, float] = {}
    workloads = []
    previous = _WITH_RUNTIME.take(cluster.pk, {})
    current: dict[str, tuple[m.Workload, tuple, m.Workload]] = {}
    for wl in inp.state.workloads:
        job = inp.jobs_by_key[wl.key]
        if wl.admission is not None:
            end_times[wl.key] = ts(expected_end(job, now=now, cluster=cluster, history=history))
        reads = (simulated, history.get(job.resource_class_id), default)
        kept = previous.get(wl.key)
        if kept is None or kept[0] is not wl or kept[1] != reads:
            runtime = expected_runtime(job, cluster=cluster, history=history) - job.run_seconds_banked
            kept = (wl, reads, dataclasses.replace(wl, runtime=max(float(runtime), 1.0)))
        current[wl.key] = kept
        workloads.append(kept[2])
    _WITH_RUNTIME.put(cluster.pk, current)
    state = dataclasses.replace(inp.state, workloads=tuple(workloads))
    return EngineContext(
        cluster=cluster,
        now=now,
        inp=inp,
        state=state,
        end_times=end_times,
        default_runtime=float(settings.SIMULATED_DEFAULT_RUNTIME_SECONDS),
        runtimes=history,
    )


def context_workload(ctx: EngineContext, job: Job) -> m.Workload:
    """A (possibly unsaved or modified) job as the engine's workload, with its expected runtime."""
    if job.team_id not in ctx.declared:
        ctx.declared[job.team_id] = sel.declared_resources(job.team, ctx.cluster)
    wl = job_workload(job, declared=ctx.declared[job.team_id])
    runtime = expected_runtime(job, cluster=ctx.cluster, history=ctx.runtimes) - job.run_seconds_banked
    return dataclasses.replace(wl, runtime=max(float(runtime), 1.0))


def plain_levels(text: str, levels: Iterable[str]) -> str:
    """A sentence with topology label keys said as people say them ("no rack has room…")."""
    for level in sorted(set(levels), key=len, reverse=True):
        text = text.replace(level, sel.level_label(level))
    return text


def context_levels(ctx: EngineContext) -> list[str]:
    """Every topology level label key of the context's state."""
    return [lv for t in ctx.state.topologies for lv in t.levels]


def flavor_labels(ctx: EngineContext) -> dict[str, str]:
    """Flavor name → the name users read."""
    return {f.name: f.display_name or f.name for f in ctx.state.flavors}


def verdict_of(explanation, labels: dict[str, str], levels: Iterable[str] = ()) -> Verdict:
    """An engine Explanation as a Verdict (flavors by the names users read)."""
    reason = explanation.reason
    flavors: list[str] = []
    nodes: list[str] = []
    borrowing = False
    if explanation.assignment is not None:
        borrowing = explanation.assignment.borrowing
        for ps in explanation.assignment.pod_sets:
            flavors.extend(labels.get(f, f) for f in ps.flavors.values() if labels.get(f, f) not in flavors)
            nodes.extend(ps.nodes)
    return Verdict(
        admissible=explanation.admissible,
        code=reason.code if reason else "",
        message=plain_levels(reason.message, levels) if reason else "",
        kueue_message=reason.kueue_message if reason else "",
        details=dict(reason.details) if reason else {},
        flavors=flavors,
        nodes=nodes,
        borrowing=borrowing,
        preemption_targets=list(explanation.preemption_targets),
    )


def context_explain(ctx: EngineContext, target: str | m.Workload, *, state: m.ClusterState | None = None) -> Verdict:
    """The engine's verdict on a workload of the context's state (a key) or a workload not in it."""
    return verdict_of(engine.explain(state or ctx.state, target, ts(ctx.now)), flavor_labels(ctx), context_levels(ctx))


def context_eta(
    ctx: EngineContext, target: str | m.Workload, *, team: Team, verdict: Verdict, state: m.ClusterState | None = None
) -> Eta:
    """p50 from the engine rolled forward (one replay for this target); p90 widened by the queue's recent waits."""
    early = eta_without_replay(verdict, now=ctx.now)
    if early is not None:
        return early
    at = engine.estimate_admission(
        state or ctx.state,
        target,
        ts(ctx.now),
        ctx.end_times,
        horizon=ts(ctx.now + ETA_HORIZON),
        default_runtime=ctx.default_runtime,
    )
    return eta_at(ctx, at, team=team, key=target if isinstance(target, str) else target.key)


def eta_without_replay(verdict: Verdict, *, now: datetime) -> Eta | None:
    """The ETA when the verdict alone gives it (starts now, or never without a change); None: replay needed."""
    if verdict.admissible:
        return Eta(starts_now=True, p50=now, p90=now, method="The engine admits it now.")
    if never_fits(verdict.code):
        return Eta(method="No estimate: it cannot start until the request or the configuration changes.")
    return None


def _queue_waits(ctx: EngineContext, team: Team) -> tuple[list[float], float]:
    """The queue's recent waits and their p90 − p50 (read and computed once per team and context)."""
    if team.pk not in ctx.waits:
        waits = sel.recent_queue_waits(team=team, cluster=ctx.cluster, now=ctx.now)
        ctx.waits[team.pk] = waits
        ctx.wait_spreads[team.pk] = (sel.percentile(waits, 90) or 0) - (sel.percentile(waits, 50) or 0)
    return ctx.waits[team.pk], ctx.wait_spreads[team.pk]


def eta_spread_terms(ctx: EngineContext, team: Team) -> tuple[float, float, int, str]:
    """The p90's floor and share, the samples and the method text of the team's ETAs (once per team and context)."""
    terms = ctx.spread_terms.get(team.pk)
    if terms is not None:
        return terms
    waits, p50_p90 = _queue_waits(ctx, team)
    if len(waits) >= MIN_HISTORY:
        floor, share = p50_p90, MIN_SPREAD
        how = (
            f"p90 adds the spread (p90 − p50) of the waits of the last {len(waits)} admissions in this queue, "
            f"at least {MIN_SPREAD:.0%} of the expected wait"
        )
    else:
        floor, share = 0.0, FALLBACK_SPREAD
        how = f"too few recent admissions in this queue ({len(waits)}), so p90 adds half the expected wait"
    runs = "simulated runtimes" if is_simulated(ctx.cluster) else "recent runtimes of their classes"
    method = f"p50: the engine replayed the queue forward as running jobs end (by their {runs}); {how}."
    terms = ctx.spread_terms[team.pk] = (floor, share, len(waits), method)
    return terms


def window_note(ctx: EngineContext, key: str, at: float | None) -> str:
    """What a reservation's window has to do with a workload's ETA ``at``: it starts when its team's window opens, or
    it fits only once another team's window ends ("" when neither)."""
    if at is None or not ctx.state.reservations:
        return ""
    namespace = key.split("/", 1)[0]
    queue = next((lq.cluster_queue for lq in ctx.state.local_queues if lq.namespace == namespace), None)
    for hold in sorted(ctx.state.reservations, key=lambda h: (h.start, h.name)):
        if hold.cluster_queue == queue and abs(at - hold.start) < 1e-3:
            opens = datetime.fromtimestamp(hold.start, tz=ctx.now.tzinfo) + lead()
            return (
                f"It starts when its team's reservation {hold.name} opens: the window starts "
                f"{until_text(opens, now=ctx.now)}, and the portal applies it {lead().total_seconds() / 60:g} min "
                "ahead so the borrowers are reclaimed in time."
            )
    for hold in sorted(ctx.state.reservations, key=lambda h: (h.end, h.name)):
        if hold.cluster_queue != queue and abs(at - hold.end) < 1e-3:
            return (
                f"It fits only after reservation {hold.name} of {hold.holder or hold.cluster_queue} ends "
                f"({hold.until}): until then that capacity is held for it."
            )
    return ""


def eta_at(ctx: EngineContext, at: float | None, *, team: Team, key: str = "") -> Eta:
    """The Eta of an engine admission time ``at`` (None: not within the horizon): p50, and p90 from recent waits; the
    workload's ``key`` (when given) lets its method say what a reservation's window has to do with it."""
    if at is None:
        return Eta(
            method=(
                f"No estimate: the running jobs' expected ends do not free room for it within {ETA_HORIZON.days} days."
            )
        )
    p50 = max(datetime.fromtimestamp(at, tz=ctx.now.tzinfo), ctx.now)
    floor, share, samples, method = eta_spread_terms(ctx, team)
    note = window_note(ctx, key, at) if key else ""
    if note:
        method = f"{note} {method}"
    return Eta(
        p50=p50,
        p90=p90_after(p50, floor=floor, share=share, now=ctx.now),
        samples=samples,
        method=method,
        spread_floor=floor,
        spread_share=share,
    )
