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
  change through ``job_set_wait_reason``; this service shows the stored reason, never a different one — except
  where a reservation's hold is what keeps the job waiting (Kueue's message says only that quota is short, the
  engine, which holds the reservations, that the job would start without them: ``capacity_reserved``, Kueue's
  reason and words kept underneath) — and says when the portal has lost sight of the cluster since
  (``cluster_staleness``).

In both modes the engine is used to *explain*: ETA (the engine rolled forward over the running jobs' expected
ends) and "would start now if…" suggestions, each verified by ``engine.explain`` on the modified workload —
never guessed. Diagnosis runs once per change of the cluster's state, not per view: the verdicts and ETAs of all
pending jobs come from one engine and one forward replay, stored with the cluster's state version
(``queues.diagnosis_store``); the job page and the catalogue read them and recompute only when the version moved;
suggestions are computed on the job page's first view after a change, bounded, and stored too.
docs/researchers.md explains the method; docs/engine.md the costs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from pools.health.selectors import health_blocked_details
from pools.inventory.service import SUSPECT_NODE_LIST
from pools.models import Cluster, ResourceClass, Topology
from queues import selectors as sel
from queues.diagnosis_context import (
    ETA_HORIZON,
    FALLBACK_SPREAD,
    MIN_HISTORY,
    MIN_SPREAD,
    OVERDUE_GRACE,
    EngineContext,
    Eta,
    Suggestion,
    Verdict,
    context_eta,
    context_explain,
    context_levels,
    context_workload,
    engine_context,
    expected_runtime,
    is_simulated,
    plain_levels,
)
from queues.diagnosis_requests import job_stored_entry
from queues.diagnosis_store import (
    DIAGNOSIS_MAX_AGE,
    catalogue_estimates,
    cluster_diagnosis_refresh,
    explain_context,
    hypothetical_eta,
    stored_suggestions,
)
from queues.diagnosis_suggestions import MAX_SUGGESTIONS, MAX_VARIANTS, SUGGESTION_BUDGET_SECONDS, suggestions_for
from queues.engine.protection import protection_sentence
from queues.engine.reservation_reasons import ATTRIBUTABLE as RESERVABLE_CODES
from queues.engine_input import workload_key
from queues.guarantees.reasons import CAPACITY_CODES, QUOTA_CODES, backing_index, with_repair_note
from queues.guarantees.reasons import DETAIL as REPAIR_DETAIL
from queues.guarantees.selectors import cluster_guarantees
from queues.models import Job, PriorityClass, Team, WaitReason
from queues.services import JobSpec, job_build, job_priority_class

#: Wait codes a repair note may concern (queues.guarantees.reasons).
REPAIR_CODES = QUOTA_CODES | CAPACITY_CODES

__all__ = [
    "DIAGNOSIS_MAX_AGE",
    "ETA_HORIZON",
    "FALLBACK_SPREAD",
    "MAX_SUGGESTIONS",
    "MAX_VARIANTS",
    "MIN_HISTORY",
    "MIN_SPREAD",
    "OVERDUE_GRACE",
    "SUGGESTION_BUDGET_SECONDS",
    "Diagnosis",
    "Eta",
    "Feasibility",
    "StoredReason",
    "Suggestion",
    "Verdict",
    "catalogue_wait_estimates",
    "cluster_diagnosis_refresh",
    "cluster_staleness",
    "engine_context",
    "expected_runtime",
    "job_diagnosis",
    "job_from_spec",
    "plain_levels",
    "spec_feasibility",
]


# --------------------------------------------------------------------------- results


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
    #: The verdict and ETA are the last stored while the diagnosis of the cluster's latest change is on its way.
    updating: bool = False
    #: The estimate moved much since an earlier one: that one, when, and what changed (``sel.eta_change``).
    eta_change: dict | None = None

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
    if cluster.last_sync_error.startswith(SUSPECT_NODE_LIST):
        return (
            f"The last node list of cluster {cluster} looked wrong (since {cluster.last_sync_error_at:%H:%M %Z}) "
            f"and was not applied: {cluster.last_sync_error.removeprefix(SUSPECT_NODE_LIST)}; "
            f"what is shown is {as_of}."
        )
    return (
        f"The portal cannot reach cluster {cluster} since {cluster.last_sync_error_at:%H:%M %Z}; "
        f"what is shown is {as_of}."
    )


# --------------------------------------------------------------------------- public services


def _topology_levels() -> list[str]:
    """Every topology level label key (to say them as people do), without building the engine input."""
    return [lv for levels in Topology.objects.values_list("levels", flat=True) for lv in levels or ()]


def _stored_reason(job: Job) -> StoredReason:
    return StoredReason(
        code=job.wait_reason,
        message=job.wait_message,
        kueue_message=job.kueue_message,
        details=dict(job.wait_details or {}),
        since=job.wait_since,
    )


def _assemble(
    job: Job,
    stored: StoredReason,
    verdict: Verdict,
    levels: Iterable[str],
    *,
    now: datetime,
    recompute: bool,
    position: tuple[int, int] | None,
) -> Diagnosis:
    """The wait-reason box from the stored reason and the engine's verdict (ETA and suggestions added after)."""
    if is_simulated(job.cluster):
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
        # of the pool (health-excluded devices, free capacity: queues.kueue_messages); shown as stored, unless a
        # reservation holds what the job waits for.
        reason, source = _reserved_in_kueue(stored, verdict), "kueue"
    diagnosis = Diagnosis(
        job=job,
        waiting=True,
        code=reason.code,
        message=plain_levels(reason.message, levels),
        kueue_message=reason.kueue_message,
        details=reason.details,
        since=reason.since or job.queued_at,
        source=source,
        position=position,
        starts_next_tick=verdict.admissible,
        stale="" if is_simulated(job.cluster) else cluster_staleness(job.cluster),
    )
    diagnosis.message, diagnosis.details = _protection_as_of(diagnosis, verdict, now=now)
    diagnosis.message, diagnosis.details = _repair_note(job, diagnosis)
    if diagnosis.code == WaitReason.HEALTH_BLOCKED:  # name the excluded devices, link their repair tickets
        diagnosis.details = health_blocked_details(
            cluster=job.cluster, resource_class=job.resource_class, details=diagnosis.details, now=now
        )
    elif diagnosis.code == WaitReason.QUOTA_LENT_OUT:  # the teams that hold the lent quota, by name
        diagnosis.details = sel.lent_out_details(cluster=job.cluster, details=diagnosis.details)
    return diagnosis


def _reserved_in_kueue(stored: StoredReason, verdict: Verdict) -> StoredReason:
    """Kueue's stored reason, or the engine's ``capacity_reserved`` where a reservation's hold is what keeps the job
    waiting: Kueue reads the hold as quota that is short (its ClusterQueues carry the window's quotas), the engine
    explains the job again without the holds (``queues.engine.reservation_reasons``). Kueue's reason and words stay
    in ``details.underlying`` and ``kueue_message``."""
    if verdict.code != WaitReason.CAPACITY_RESERVED or stored.code not in RESERVABLE_CODES:
        return stored
    details = {**stored.details, **verdict.details, "underlying": {"code": stored.code, "message": stored.message}}
    return StoredReason(
        code=verdict.code,
        message=verdict.message,
        kueue_message=stored.kueue_message or verdict.kueue_message,
        details=details,
        since=stored.since,
    )


def _with_eta(diagnosis: Diagnosis, eta: Eta | None) -> Diagnosis:
    """Set the ETA; a lent-out reason's details say when the lent quota is expected back (the ETA's p50)."""
    diagnosis.eta = eta
    if diagnosis.code == WaitReason.QUOTA_LENT_OUT:
        diagnosis.details = {**diagnosis.details, "returnsP50": eta.p50.isoformat() if eta and eta.p50 else None}
    return diagnosis


def _protection_as_of(diagnosis: Diagnosis, verdict: Verdict, *, now: datetime) -> tuple[str, dict]:
    """The reason's sentence about protected jobs it would preempt, said again as of ``now`` (the stored one counts
    the minutes from when it was computed); Kueue's stored reason in a kubernetes cluster gets the engine's (Kueue
    sees only the protected jobs' raised priority, docs/admin.md, *Protected work*)."""
    message, details = diagnosis.message, dict(diagnosis.details or {})
    if not details.get("protectedVictims") and verdict.details.get("protectedVictims") and diagnosis.source == "kueue":
        for key in ("protectedVictims", "protectedUntil", "protectionText"):
            details[key] = verdict.details[key]
        message = f"{message} {details['protectionText']}"
    victims, old = details.get("protectedVictims"), details.get("protectionText")
    if not victims or not old:
        return message, details
    fresh = protection_sentence(list(victims), now.timestamp())
    details["protectionText"] = fresh
    return message.replace(old, fresh), details


def _repair_note(job: Job, diagnosis: Diagnosis) -> tuple[str, dict]:
    """The reason saying so when the wait is due to a guarantee repairs left unbacked (queues.guarantees.reasons):
    Kueue's stored reason does not know it, and a reason recomputed here is not the tick's."""
    if REPAIR_DETAIL in (diagnosis.details or {}) or diagnosis.code not in REPAIR_CODES:
        return diagnosis.message, diagnosis.details
    guarantees = cluster_guarantees(job.cluster)
    if not guarantees.result.shortfalls:
        return diagnosis.message, diagnosis.details
    return with_repair_note(
        code=diagnosis.code,
        message=diagnosis.message,
        details=diagnosis.details or {},
        team_id=job.team_id,
        flavor_ids=[link.flavor_id for link in job.resource_class.flavor_links.all()],
        resource=job.resource_class.resource_name,
        index=backing_index(guarantees),
    )


def job_diagnosis(
    job: Job, *, now: datetime | None = None, recompute: bool = False, with_suggestions: bool = True
) -> Diagnosis:
    """Why a job waits (code, sentence, since when), its place in the queue, its ETA and verified suggestions.

    Reads the job's entry stored at the cluster's current state version (one indexed read; after a change, the last
    stored one while its refresh is on its way: ``queues.diagnosis_requests``); ``recompute`` asks the engine afresh
    for this job alone (and re-derives the reason).
    """
    now = now or timezone.now()
    if job.state != Job.State.PENDING:
        return Diagnosis(job=job, waiting=False)
    stored = _stored_reason(job)
    cached = None if recompute else job_stored_entry(job, now=now)
    if cached is None:
        return _fresh_job_diagnosis(job, stored, now=now, recompute=recompute, with_suggestions=with_suggestions)
    verdict = cached.verdict
    diagnosis = _with_eta(
        _assemble(job, stored, verdict, _topology_levels(), now=now, recompute=False, position=cached.position),
        cached.eta,
    )
    diagnosis.updating = cached.stale
    diagnosis.eta_change = sel.eta_change(job, before=cached.eta_before, code=diagnosis.code)
    if with_suggestions and not verdict.admissible and not verdict.preemption_targets:
        diagnosis.suggestions = stored_suggestions(job, cached, now=now)
    return diagnosis


def _fresh_job_diagnosis(
    job: Job, stored: StoredReason, *, now: datetime, recompute: bool, with_suggestions: bool
) -> Diagnosis:
    """``job_diagnosis`` from the engine for this job alone (``explain_context``: the whole state of a small
    cluster, the quota holders of a large one, whose ETAs are extended from the last refresh's window)."""
    ctx = explain_context(job.cluster, now=now)
    key = workload_key(job)
    target = key if key in ctx.inp.jobs_by_key else context_workload(ctx, job)
    verdict = context_explain(ctx, target)
    diagnosis = _assemble(
        job, stored, verdict, context_levels(ctx), now=now, recompute=recompute, position=sel.queue_position(job)
    )
    if ctx.whole:
        eta = context_eta(ctx, target, team=job.team, verdict=verdict)
    else:
        workload = target if not isinstance(target, str) else context_workload(ctx, job)
        eta = hypothetical_eta(ctx, workload, team=job.team, verdict=verdict)
    _with_eta(diagnosis, eta)
    if with_suggestions and not verdict.admissible and not verdict.preemption_targets:
        diagnosis.suggestions = suggestions_for(ctx, job, team=job.team, exclude_key=key)
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
    ctx = explain_context(cluster, now=now)
    job = job_from_spec(owner=owner, team=team, spec=spec, cluster=cluster, now=now)
    workload = context_workload(ctx, job)
    verdict = context_explain(ctx, workload)
    eta = hypothetical_eta(ctx, workload, team=team, verdict=verdict)
    suggestions = (
        [] if verdict.admissible or not with_suggestions else suggestions_for(ctx, job, team=team, exclude_key=None)
    )
    return Feasibility(verdict=verdict, eta=eta, suggestions=suggestions)


def catalogue_wait_estimates(
    *, team: Team, cards: Sequence[sel.ClassCard], owner: AbstractBaseUser, now: datetime | None = None
) -> None:
    """Fill each card's ``eta``: the expected wait of a typical job now (one pod, the class's smallest count).

    Stored per (team, class, count, priority) with the cluster's state version: computed once per change.
    """
    now = now or timezone.now()
    cluster = sel.team_cluster(team)
    if cluster is None:
        return
    allowed = list(sel.priority_classes_for(team))
    default_priority = next((pc for pc in allowed if pc.is_default), allowed[-1] if allowed else None)
    priority = job_priority_class(team=team, requested=default_priority)
    jobs: dict[str, Job] = {}
    keys = []
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
        key = (
            f"team:{team.pk} class:{rc.pk} count:{card.smallest_count} priority:{priority.pk if priority else ''} "
            f"topology:{spec.topology_mode}:{spec.topology_level}"
        )
        keys.append(key)
        if key not in jobs:
            jobs[key] = job_from_spec(
                owner=owner, team=team, spec=spec, cluster=cluster, now=now, priority_class=priority
            )

    def compute(ctx: EngineContext, missing: list[str]) -> dict[str, Eta]:
        out = {}
        for key in missing:
            workload = context_workload(ctx, jobs[key])
            out[key] = hypothetical_eta(ctx, workload, team=team, verdict=context_explain(ctx, workload))
        return out

    etas = catalogue_estimates(cluster, keys, compute, now=now)
    for card, key in zip(cards, keys, strict=True):
        card.eta = etas[key]
