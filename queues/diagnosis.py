"""Why a job waits, whether a submission would start now, when it would start, and what would start it sooner.

The one service behind the wait-reason box of the job page, the feasibility check of the submit form, the
catalogue's expected waits and the API's wait-reason / feasibility endpoints. Both cluster modes produce
the same codes (``queues.models.WaitReason``):

* **simulated**: the engine decides. Each tick stores every pending job's reason (``job_set_wait_reason``
  records each change on the timeline); this service reads it, or recomputes it on demand with
  ``engine.explain``.
* **kubernetes**: Kueue decides. The kubernetes backend translates Kueue's conditions combined with the
  portal's view of the pool (``queues.kueue_messages``: free capacity on health-excluded devices →
  ``health_blocked``; a cluster out of sight past its threshold → ``cluster_unreachable``) and stores every
  change through ``job_set_wait_reason``; this service shows the stored reason, never a different one, and
  says when the portal has lost sight of the cluster since (``cluster_staleness``).

In both modes the engine is used to *explain*: ETA (``engine.estimate_admission`` rolled forward over the
running jobs' expected ends) and "would start now if…" suggestions, each verified by ``engine.explain``
on the modified workload — never guessed. docs/researchers.md explains the method.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from pools.health.selectors import health_blocked_details
from pools.models import Cluster, ResourceClass
from queues import engine
from queues import selectors as sel
from queues.engine import model as m
from queues.engine.wait_codes import never_fits
from queues.engine_input import EngineInput, cluster_engine_input, job_workload, ts, workload_key
from queues.models import Job, PriorityClass, Team, WaitReason
from queues.services import JobSpec, default_runtime, has_checkpoint_policy, job_build, job_priority_class

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
#: At most this many modified workloads are explained per suggestion search.
MAX_VARIANTS = 24
MAX_SUGGESTIONS = 4


# --------------------------------------------------------------------------- results


@dataclass
class Eta:
    """When a job is expected to get its quota: p50 and p90, or "starts now", or no estimate."""

    starts_now: bool = False
    p50: datetime | None = None
    p90: datetime | None = None
    method: str = ""
    samples: int = 0

    @property
    def known(self) -> bool:
        """Whether there is an estimate at all."""
        return self.starts_now or self.p50 is not None


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


@dataclass(frozen=True)
class StoredReason:
    """A wait reason as stored on a job (by the simulated tick or by the kubernetes backend)."""

    code: str
    message: str
    kueue_message: str = ""
    details: dict = field(default_factory=dict)
    since: datetime | None = None


@dataclass
class Diagnosis:
    """Everything the wait-reason box shows for one job."""

    job: Job
    waiting: bool
    code: str = ""
    message: str = ""
    kueue_message: str = ""
    details: dict = field(default_factory=dict)
    since: datetime | None = None
    source: str = ""  # "engine" (stored by the tick), "recomputed", "kueue"
    position: tuple[int, int] | None = None
    eta: Eta | None = None
    suggestions: list[Suggestion] = field(default_factory=list)
    starts_next_tick: bool = False
    stale: str = ""  # kubernetes mode: the portal has lost sight of the cluster (see cluster_staleness)

    @property
    def label(self) -> str:
        """The reason's short label."""
        return WaitReason(self.code).label if self.code in WaitReason.values else ""


@dataclass
class Feasibility:
    """The answer of the submit form's check: would it start now, if not why and when, and what would help."""

    verdict: Verdict
    eta: Eta
    suggestions: list[Suggestion] = field(default_factory=list)


# --------------------------------------------------------------------------- the engine's view of a cluster


@dataclass
class _Context:
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

    def without(self, key: str) -> m.ClusterState:
        """The state with one workload removed (to explain a modified copy of it)."""
        return dataclasses.replace(self.state, workloads=tuple(w for w in self.state.workloads if w.key != key))


def _simulated(cluster: Cluster) -> bool:
    return cluster.backend == Cluster.Backend.SIMULATED


def expected_runtime(job: Job, *, cluster: Cluster, history: dict[int, float]) -> float:
    """Seconds a job is expected to run in all (before subtracting what checkpoints banked).

    Simulated: its simulated runtime (else the default). Kubernetes: the median runtime of the class's
    recent successful jobs, capped by the job's maximum runtime; the maximum alone when there is no history.
    """
    if _simulated(cluster):
        seconds = default_runtime(job).total_seconds()
    else:
        seconds = history.get(job.resource_class_id) or float(settings.SIMULATED_DEFAULT_RUNTIME_SECONDS)
    if job.max_runtime_seconds:
        seconds = min(seconds, float(job.max_runtime_seconds))
    return seconds


def _expected_end(job: Job, *, now: datetime, cluster: Cluster, history: dict[int, float]) -> datetime:
    """When a quota-holding job is expected to release it."""
    remaining = timedelta(
        seconds=max(expected_runtime(job, cluster=cluster, history=history) - job.run_seconds_banked, 0)
    )
    if job.state == Job.State.RUNNING:
        end = job.state_changed_at + remaining
        if not _simulated(cluster) and end < now:
            return now + OVERDUE_GRACE
        return max(end, now)
    if job.state == Job.State.PREEMPTING:
        grace = settings.SIMULATED_CHECKPOINT_SECONDS if has_checkpoint_policy(job) else 0
        return max(job.state_changed_at + timedelta(seconds=grace), now)
    return now + remaining  # admitted: starts at the next tick


def _class_history(classes: Sequence[int]) -> dict[int, float]:
    """Median recent runtime per class (kubernetes mode only)."""
    out = {}
    for class_id in classes:
        rc = ResourceClass(pk=class_id)
        p50 = sel.percentile(sel.recent_class_runtimes(resource_class=rc), 50)
        if p50:
            out[class_id] = p50
    return out


def _context(cluster: Cluster, *, now: datetime) -> _Context:
    """Build the engine state of ``cluster`` once; every explain / estimate of a request reuses it."""
    inp = cluster_engine_input(cluster=cluster)
    history = {} if _simulated(cluster) else _class_history({j.resource_class_id for j in inp.jobs_by_key.values()})
    end_times: dict[str, float] = {}
    workloads = []
    for wl in inp.state.workloads:
        job = inp.jobs_by_key[wl.key]
        runtime = expected_runtime(job, cluster=cluster, history=history) - job.run_seconds_banked
        if wl.admission is not None:
            end_times[wl.key] = ts(_expected_end(job, now=now, cluster=cluster, history=history))
        workloads.append(dataclasses.replace(wl, runtime=max(float(runtime), 1.0)))
    state = dataclasses.replace(inp.state, workloads=tuple(workloads))
    return _Context(
        cluster=cluster,
        now=now,
        inp=inp,
        state=state,
        end_times=end_times,
        default_runtime=float(settings.SIMULATED_DEFAULT_RUNTIME_SECONDS),
        runtimes=history,
    )


def _workload(ctx: _Context, job: Job) -> m.Workload:
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


def _levels(ctx: _Context) -> list[str]:
    return [lv for t in ctx.state.topologies for lv in t.levels]


def _verdict(explanation, labels: dict[str, str], levels: Iterable[str] = ()) -> Verdict:
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


def _explain(ctx: _Context, target: str | m.Workload, *, state: m.ClusterState | None = None) -> Verdict:
    labels = {f.name: f.display_name or f.name for f in ctx.state.flavors}
    return _verdict(engine.explain(state or ctx.state, target, ts(ctx.now)), labels, _levels(ctx))


def _eta(
    ctx: _Context, target: str | m.Workload, *, team: Team, verdict: Verdict, state: m.ClusterState | None = None
) -> Eta:
    """p50 from the engine rolled forward; p90 widened by the spread of the queue's recent waits."""
    if verdict.admissible:
        return Eta(starts_now=True, p50=ctx.now, p90=ctx.now, method="The engine admits it now.")
    if never_fits(verdict.code):
        return Eta(method="No estimate: it cannot start until the request or the configuration changes.")
    at = engine.estimate_admission(
        state or ctx.state,
        target,
        ts(ctx.now),
        ctx.end_times,
        horizon=ts(ctx.now + ETA_HORIZON),
        default_runtime=ctx.default_runtime,
    )
    if at is None:
        return Eta(
            method=(
                f"No estimate: the running jobs' expected ends do not free room for it within {ETA_HORIZON.days} days."
            )
        )
    p50 = max(datetime.fromtimestamp(at, tz=ctx.now.tzinfo), ctx.now)
    if team.pk not in ctx.waits:
        ctx.waits[team.pk] = sel.recent_queue_waits(team=team, cluster=ctx.cluster, now=ctx.now)
    waits = ctx.waits[team.pk]
    wait = (p50 - ctx.now).total_seconds()
    if len(waits) >= MIN_HISTORY:
        spread = max((sel.percentile(waits, 90) or 0) - (sel.percentile(waits, 50) or 0), wait * MIN_SPREAD)
        how = (
            f"p90 adds the spread (p90 − p50) of the waits of the last {len(waits)} admissions in this queue, "
            f"at least {MIN_SPREAD:.0%} of the expected wait"
        )
    else:
        spread = wait * FALLBACK_SPREAD
        how = f"too few recent admissions in this queue ({len(waits)}), so p90 adds half the expected wait"
    runs = "simulated runtimes" if _simulated(ctx.cluster) else "recent runtimes of their classes"
    return Eta(
        p50=p50,
        p90=p50 + timedelta(seconds=spread),
        samples=len(waits),
        method=f"p50: the engine replayed the queue forward as running jobs end (by their {runs}); {how}.",
    )


# --------------------------------------------------------------------------- variants and suggestions


def _same_kind(a: ResourceClass, b: ResourceClass) -> bool:
    """Whether class ``b`` can stand in for ``a``: same vendor's resource and same sharing mode.

    (An image built for one vendor's stack does not run on another's, and a dedicated card is never
    swapped for a shared one behind the user's back.)
    """
    return a.sharing == b.sharing and a.resource_name.split("/")[0] == b.resource_name.split("/")[0]


def _variants(job: Job, *, team: Team) -> Iterator[tuple[str, str, dict[str, object], Job]]:
    """Modified copies of a job worth trying, smallest change first: (kind, title, form changes, job)."""
    classes = list(sel.classes_for_team(team, job.cluster))
    # The prefetched instance of the job's class (its flavors are read for every variant).
    rc = next((c for c in classes if c.pk == job.resource_class_id), job.resource_class)
    hardware = sel.classes_hardware(classes if rc in classes else [*classes, rc], cluster=job.cluster)
    job = copy.copy(job)
    job.resource_class = rc
    levels = sel.allowed_topology_levels(rc, hardware[rc.pk]) if rc.pk in hardware else []

    def variant(**changes) -> Job:
        clone = copy.copy(job)  # Model.__getstate__ copies the related-object cache too
        for name, value in changes.items():
            setattr(clone, name, value)
        return clone

    if job.topology_mode == "required" and job.topology_level:
        level = job.topology_level
        yield (
            "topology",
            f"Prefer one {sel.level_label(level)} instead of requiring it",
            {"topology_mode": "preferred", "topology_level": level},
            variant(topology_mode="preferred"),
        )
        if level in levels:
            for wider in reversed(levels[: levels.index(level)]):
                yield (
                    "topology",
                    f"Require one {sel.level_label(wider)} instead of one {sel.level_label(level)}",
                    {"topology_mode": "required", "topology_level": wider},
                    variant(topology_level=wider),
                )
        if rc.topology_mode != ResourceClass.TopologyMode.REQUIRED:
            yield (
                "topology",
                "Drop the topology rule",
                {"topology_mode": "", "topology_level": ""},
                variant(topology_mode="", topology_level=""),
            )
    allowed = sorted(rc.allowed_counts or [])
    dpp, pods = job.devices_per_pod, job.pod_count
    smaller = [c for c in allowed if c < dpp]
    for count in reversed(smaller):
        if dpp % count == 0 and pods * (dpp // count) <= 512:
            more = pods * (dpp // count)
            yield (
                "devices",
                f"Split into {more} pods of {sel.unit_noun(rc.resource_name, count)}",
                {"devices_per_pod": count, "pod_count": more},
                variant(devices_per_pod=count, pod_count=more),
            )
            break
    for count in reversed(smaller):
        yield (
            "devices",
            f"Ask {sel.unit_noun(rc.resource_name, count)} per pod instead of {dpp}",
            {"devices_per_pod": count},
            variant(devices_per_pod=count),
        )
    if pods > 1:
        for fewer in sorted({pods // 2, 1} - {0, pods}, reverse=True):
            yield (
                "devices",
                f"Run {fewer} pod{'s' if fewer != 1 else ''} instead of {pods}",
                {"pod_count": fewer},
                variant(pod_count=fewer),
            )
    for other in classes:
        if other.pk == rc.pk or not _same_kind(rc, other) or dpp not in (other.allowed_counts or []):
            continue
        other_levels = sel.allowed_topology_levels(other, hardware[other.pk])
        mode, level = job.topology_mode, job.topology_level
        if level and level not in other_levels:
            mode, level = "", ""
        if other.topology_mode == ResourceClass.TopologyMode.REQUIRED and not mode:
            mode, level = "required", other.topology_level
        yield (
            "class",
            f"Use class {other.name}",
            {"resource_class": other.slug, "topology_mode": mode, "topology_level": level},
            variant(resource_class=other, topology_mode=mode, topology_level=level),
        )
    for pc in sel.priority_classes_for(team):
        if pc.pk == job.priority_class_id:
            continue
        yield (
            "priority",
            f"Submit with priority {pc.name}",
            {"priority_class": pc.name},
            variant(priority_class=pc, priority=pc.value),
        )


def _suggestion_message(kind: str, verdict: Verdict, pc: PriorityClass | None) -> str:
    """Why the verified variant would start, in the user's words."""
    where = f" on {', '.join(verdict.flavors)}" if verdict.flavors else ""
    if verdict.preemption_targets:
        n = len(verdict.preemption_targets)
        text = (
            f"It would start{where} as soon as {n} lower-priority job{'s are' if n != 1 else ' is'} preempted "
            "(checkpointing first where they can)"
        )
    else:
        text = f"It would start now{where}"
    if verdict.borrowing:
        text += ", borrowing idle quota from the cohort"
        if kind == "priority" and pc is not None and not pc.may_preempt:
            text += f" ({pc.name} jobs may themselves be preempted when the lender reclaims its quota)"
        else:
            text += " (a borrowing job may be preempted when the lender reclaims its quota)"
    return text + "."


def _suggestions(ctx: _Context, job: Job, *, team: Team, exclude_key: str | None) -> list[Suggestion]:
    """Verified "would start now if…" changes for a job that cannot start now."""
    state = ctx.without(exclude_key) if exclude_key else ctx.state
    out: list[Suggestion] = []
    kinds_done: set[tuple[str, str]] = set()
    tried = 0
    for kind, title, changes, variant in _variants(job, team=team):
        if tried >= MAX_VARIANTS or len(out) >= MAX_SUGGESTIONS:
            break
        group = (kind, str(changes.get("resource_class", "")))
        if kind in ("topology", "devices") and group in kinds_done:
            continue  # the smallest working change of a kind is enough
        tried += 1
        verdict = _explain(ctx, _workload(ctx, variant), state=state)
        if verdict.admissible or verdict.preemption_targets:
            kinds_done.add(group)
            pc = variant.priority_class if kind == "priority" else None
            out.append(
                Suggestion(kind=kind, title=title, message=_suggestion_message(kind, verdict, pc), changes=changes)
            )
    return out


# --------------------------------------------------------------------------- kubernetes mode


def cluster_staleness(cluster: Cluster) -> str:
    """A sentence when the portal has lost sight of the cluster (its last sync failed), else "".

    The stored reason is left as it is: the kubernetes backend stores ``cluster_unreachable`` itself once the
    cluster has been out of sight past its threshold, so what the page shows is always what the timeline has.
    """
    if not cluster.last_sync_error_at or (
        cluster.last_synced_at is not None and cluster.last_sync_error_at <= cluster.last_synced_at
    ):
        return ""
    as_of = f"as of {cluster.last_synced_at:%Y-%m-%d %H:%M %Z}" if cluster.last_synced_at else "never synced"
    return (
        f"The portal cannot reach cluster {cluster} since {cluster.last_sync_error_at:%H:%M %Z}; "
        f"what is shown is {as_of}."
    )


# --------------------------------------------------------------------------- public services


def job_diagnosis(
    job: Job, *, now: datetime | None = None, recompute: bool = False, with_suggestions: bool = True
) -> Diagnosis:
    """Why a job waits (code, sentence, since when), its place in the queue, its ETA and verified suggestions."""
    now = now or timezone.now()
    if job.state != Job.State.PENDING:
        return Diagnosis(job=job, waiting=False)
    stored = StoredReason(
        code=job.wait_reason,
        message=job.wait_message,
        kueue_message=job.kueue_message,
        details=dict(job.wait_details or {}),
        since=job.wait_since,
    )
    ctx = _context(job.cluster, now=now)
    key = workload_key(job)
    verdict = _explain(ctx, key) if key in ctx.inp.jobs_by_key else _explain(ctx, _workload(ctx, job))
    if _simulated(job.cluster):
        if stored.code and not recompute:
            reason, source = stored, "engine"
        else:
            reason = StoredReason(
                code=verdict.code,
                message=verdict.message,
                kueue_message=verdict.kueue_message,
                details=verdict.details,
                since=stored.since or job.queued_at,
            )
            source = "recomputed"
    else:
        # The backend stored its translation of Kueue's conditions, already weighed against the portal's view
        # of the pool (health-excluded devices, free capacity: queues.kueue_messages); shown as stored.
        reason, source = stored, "kueue"
    diagnosis = Diagnosis(
        job=job,
        waiting=True,
        code=reason.code,
        message=plain_levels(reason.message, _levels(ctx)),
        kueue_message=reason.kueue_message,
        details=reason.details,
        since=reason.since or job.queued_at,
        source=source,
        position=sel.queue_position(job),
        starts_next_tick=verdict.admissible,
        stale="" if _simulated(job.cluster) else cluster_staleness(job.cluster),
    )
    if diagnosis.code == WaitReason.HEALTH_BLOCKED:  # name the excluded devices, link their repair tickets
        diagnosis.details = health_blocked_details(
            cluster=job.cluster, resource_class=job.resource_class, details=diagnosis.details, now=now
        )
    diagnosis.eta = _eta(
        ctx, key if key in ctx.inp.jobs_by_key else _workload(ctx, job), team=job.team, verdict=verdict
    )
    if with_suggestions and not verdict.admissible and not verdict.preemption_targets:
        diagnosis.suggestions = _suggestions(ctx, job, team=job.team, exclude_key=key)
    return diagnosis


def job_from_spec(
    *,
    owner: AbstractBaseUser,
    team: Team,
    spec: JobSpec,
    cluster: Cluster,
    now: datetime,
    priority_class: PriorityClass | None = None,
) -> Job:
    """An unsaved Job carrying a submission, as ``job_submit`` would record it (for the feasibility check)."""
    job = job_build(owner=owner, team=team, spec=spec, cluster=cluster, now=now, priority_class=priority_class)
    job.name = spec.name or "job"
    job.k8s_name = f"{job.name}-feasibility"
    return job


def spec_feasibility(
    *, owner: AbstractBaseUser, team: Team, spec: JobSpec, now: datetime | None = None, with_suggestions: bool = True
) -> Feasibility:
    """Would this submission start now? If not: the primary reason, the ETA and verified suggestions."""
    now = now or timezone.now()
    cluster = sel.team_cluster(team)
    if cluster is None:
        verdict = Verdict(
            admissible=False,
            code=WaitReason.MISCONFIGURED,
            message=f"Team {team.slug} has no quota in any cluster: ask an admin to set one up.",
        )
        return Feasibility(verdict=verdict, eta=Eta(method="No estimate: the team has no queue."))
    ctx = _context(cluster, now=now)
    job = job_from_spec(owner=owner, team=team, spec=spec, cluster=cluster, now=now)
    workload = _workload(ctx, job)
    verdict = _explain(ctx, workload)
    eta = _eta(ctx, workload, team=team, verdict=verdict)
    suggestions = (
        [] if verdict.admissible or not with_suggestions else _suggestions(ctx, job, team=team, exclude_key=None)
    )
    return Feasibility(verdict=verdict, eta=eta, suggestions=suggestions)


def catalogue_wait_estimates(
    *, team: Team, cards: Sequence[sel.ClassCard], owner: AbstractBaseUser, now: datetime | None = None
) -> None:
    """Fill each card's ``eta``: the expected wait of a typical job now (one pod, the class's smallest count)."""
    now = now or timezone.now()
    cluster = sel.team_cluster(team)
    if cluster is None:
        return
    ctx = _context(cluster, now=now)
    allowed = list(sel.priority_classes_for(team))
    default_priority = next((pc for pc in allowed if pc.is_default), allowed[-1] if allowed else None)
    priority = job_priority_class(team=team, requested=default_priority)
    for card in cards:
        rc = card.resource_class
        mode = "required" if rc.topology_mode == ResourceClass.TopologyMode.REQUIRED else ""
        spec = JobSpec(
            name="typical",
            image="typical",
            resource_class=rc,
            devices_per_pod=card.smallest_count,
            pod_count=1,
            topology_mode=mode,
            topology_level=rc.topology_level if mode else "",
            priority_class=default_priority,
        )
        job = job_from_spec(owner=owner, team=team, spec=spec, cluster=cluster, now=now, priority_class=priority)
        workload = _workload(ctx, job)
        verdict = _explain(ctx, workload)
        card.eta = _eta(ctx, workload, team=team, verdict=verdict)
