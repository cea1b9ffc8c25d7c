"""A job's state machine in kubernetes mode: from what the cluster shows to transitions through queues.services.

Inputs are the job row and its :class:`~pools.models.KubeJobState` (batch Job, Workload, Pods). The state is
derived from all of them together (SEMANTICS.md §7 "derive, don't trust a single condition"), and every
transition is applied at the cluster's own time for it — Admitted / PodsReady / Evicted ``lastTransitionTime``,
the Job's ``completionTime``, a pod's termination or ``deletionTimestamp`` — so allocations (and the usage billed
from them) start and end when the devices were really taken and given back, also for changes that happened
while the portal was not watching. Running the evaluation again changes nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Max, Q

from clusters.kube_sync.eval_context import EvalContext
from clusters.kube_sync.observe import parse_time, pod_end, pod_is_live
from clusters.models import KubeJobState
from pools.models import Allocation, Device
from pools.selectors import SHARING_KIND
from queues import job_sync
from queues import kueue_messages as km
from queues import services as job_services
from queues.models import Job, JobEvent
from queues.pod_sets import job_pod_sets

log = logging.getLogger(__name__)

HOLDING = (Job.State.ADMITTED, Job.State.RUNNING, Job.State.PREEMPTING)
#: Evicted reasons → the reason the portal records on the requeue.
REQUEUE_REASONS = {
    "Preempted": "preempted",
    "PodsReadyTimeout": "pods_ready_timeout",
    "NodeFailures": "node_lost",
    "AdmissionCheck": "admission_check",
    "ClusterQueueStopped": "queue_stopped",
    "LocalQueueStopped": "queue_stopped",
    "Deactivated": "deactivated",
}
#: Finished=True on a Workload slice that a resized slice of the same Job replaced: not the Job's end.
SLICE_REPLACED = "WorkloadSliceReplaced"
#: Deactivations that end a job for good: its final state, and the sentence when Kueue's text is not recognised.
FINAL_DEACTIVATIONS = {
    "DeactivatedDueToMaximumExecutionTimeExceeded": (
        Job.State.TIMED_OUT,
        "Kueue stopped the job at its maximum execution time.",
    ),
    "DeactivatedDueToRequeuingLimitExceeded": (
        Job.State.FAILED,
        "Kueue gave up on the job: its pods did not start after the maximum number of requeues.",
    ),
    "DeactivatedDueToAdmissionCheck": (Job.State.FAILED, "Kueue gave up on the job: an admission check rejected it."),
}


def _clamp(at: datetime | None, floor: datetime, fallback: datetime) -> datetime:
    """A cluster time no earlier than the portal's last change of the job (clocks differ a little)."""
    return max(at or fallback, floor)


# --- reading the snapshot ------------------------------------------------------------------------------------


def _conditions(obj: dict) -> dict[str, dict]:
    return {c.get("type", ""): c for c in ((obj.get("status") or {}).get("conditions") or [])}


def _true(conditions: dict[str, dict], kind: str) -> bool:
    return (conditions.get(kind) or {}).get("status") == "True"


def _ltt(conditions: dict[str, dict], kind: str) -> datetime | None:
    return parse_time((conditions.get(kind) or {}).get("lastTransitionTime"))


def _final_outcome(bj: dict, jc: dict[str, dict], wlc: dict[str, dict]) -> tuple[str, datetime | None, str] | None:
    """(final state, true end, message) when the cluster says the job ended."""
    status = bj.get("status") or {}
    if _true(jc, "Complete"):
        at = parse_time(status.get("completionTime")) or _ltt(jc, "Complete")
        return Job.State.SUCCEEDED, at, "All pods completed successfully."
    if _true(jc, "Failed"):
        cond = jc["Failed"]
        at = _ltt(jc, "Failed")
        if cond.get("reason") == "DeadlineExceeded":
            return Job.State.TIMED_OUT, at, "Stopped at its maximum runtime (activeDeadlineSeconds)."
        return Job.State.FAILED, at, f"Failed: {cond.get('message') or cond.get('reason') or 'the Job failed'}"
    if _true(wlc, "Finished") and wlc["Finished"].get("reason") != SLICE_REPLACED:
        cond = wlc["Finished"]
        state = Job.State.SUCCEEDED if cond.get("reason") == "Succeeded" else Job.State.FAILED
        return state, _ltt(wlc, "Finished"), cond.get("message") or cond.get("reason", "Finished")
    return None


def _pods_sorted(pods: dict[str, dict]) -> list[tuple[str, dict]]:
    def key(item: tuple[str, dict]) -> tuple[int, str]:
        index = item[1].get("index")
        return (int(str(index)) if str(index).isdigit() else 1 << 30, item[0])

    return sorted(pods.items(), key=key)


@dataclass
class Outcome:
    """What an evaluation did (transition names) and what it would want repaired."""

    actions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _set_wait(
    job: Job, verdict: km.Verdict | km.Translation, *, now: datetime, outcome: Outcome, ctx: EvalContext
) -> None:
    """Store a wait reason: a code of the closed set through the service (or the context's batch), an
    unrecognised text visibly."""
    code = verdict.code
    since = (
        _clamp(parse_time(getattr(verdict, "since", "")), job.queued_at, now) if getattr(verdict, "since", "") else now
    )
    if code in km.WAIT_CODES:
        write = ctx.waits.set_wait_reason if ctx.waits is not None else job_services.job_set_wait_reason
        if write(
            job,
            code=code,
            message=verdict.message,
            kueue_message=verdict.kueue_message,
            details=verdict.details,
            now=since,
        ):
            outcome.actions.append(f"wait:{code}")
        return
    if code != km.UNRECOGNISED:
        return  # admitted / starting / running: not a wait, the transition path handles it
    if job_sync.job_set_unrecognised_wait(
        job, text=verdict.kueue_message or verdict.message, details=verdict.details, now=since
    ):
        outcome.actions.append("wait:unrecognised")


def _pick_devices(job: Job, pods: list[tuple[str, dict]], ctx: EvalContext) -> tuple[list[list[Device]], list[str]]:
    """Free usable devices of the class on each pod's node (taken out of the context's free lists); the nodes
    where the portal found too few."""
    rc = job.resource_class
    names = sorted({p["node"] for _, p in pods if p.get("node")})
    free = ctx.free_devices(names, rc.resource_name, SHARING_KIND[rc.sharing])
    per_set = {ps.name: ps.devices_per_pod for ps in job_pod_sets(job)}
    picked: list[list[Device]] = []
    short: list[str] = []
    for _, pod in pods:
        wanted = per_set.get(pod.get("podSet") or "", job.devices_per_pod)
        pool = free.get(pod.get("node", ""), [])
        take = pool[:wanted]
        del pool[:wanted]
        if len(take) < wanted:
            short.append(pod.get("node", "?"))
        picked.append(take)
    return picked, short


def _borrowing(job: Job, ctx: EvalContext, flavor: str, adding: int) -> bool:
    """Whether the team holds more than its nominal quota of the flavor once this job is admitted."""
    rc = job.resource_class
    nominal = ctx.nominal(job, flavor, rc.resource_name)
    if nominal is None:
        return False
    key = (job.team_id, flavor, rc.resource_name)
    if key not in ctx.held:
        ctx.held[key] = Allocation.objects.filter(
            job__team_id=job.team_id,
            job__cluster=ctx.cluster,
            ended_at__isnull=True,
            device__resource_name=rc.resource_name,
            device__node__flavor__name=flavor,
        ).count()
    return ctx.held[key] + adding > nominal


def _admit(
    job: Job, st: KubeJobState, ctx: EvalContext, pods: list[tuple[str, dict]], *, at: datetime, outcome: Outcome
) -> None:
    wl = st.workload or {}
    admission = (wl.get("status") or {}).get("admission") or {}
    quota = ctx._team_quota.get(job.team_id)
    cq = admission.get("clusterQueue") or (quota.cluster_queue_name if quota else "")
    nodes = [p.get("node", "") for _, p in pods]
    assignments = admission.get("podSetAssignments") or [{"name": "main", "count": job.pod_count, "flavors": {}}]
    pod_sets = [
        {
            "name": a.get("name", "main"),
            "count": a.get("count", job.pod_count),
            "flavors": dict(a.get("flavors") or {}),
            "nodes": nodes,
        }
        for a in assignments
    ]
    devices, short = _pick_devices(job, pods, ctx)
    # the flavor of the devices: a launcher's or a Ray head's pod set (listed first) has none
    resource = job.resource_class.resource_name
    flavor = next((a["flavors"][resource] for a in assignments if resource in (a.get("flavors") or {})), "")
    adding = sum(len(d) for d in devices)
    borrowing = _borrowing(job, ctx, flavor, adding) if flavor else False
    message = f"Admitted by ClusterQueue {cq}" if cq else "Admitted by Kueue"
    job_services.job_admit(
        job, now=at, cluster_queue=cq, pod_sets=pod_sets, borrowing=borrowing, devices=devices, message=message
    )
    key = (job.team_id, flavor, job.resource_class.resource_name)
    if key in ctx.held:
        ctx.held[key] += adding
    outcome.actions.append("admitted")
    if short:
        outcome.notes.append(f"admitted without a free device on {', '.join(sorted(set(short)))} in the inventory")


def _expected_pods(job: Job) -> int:
    """How many pods the job runs when all of it runs: every pod set's."""
    return sum(ps.count for ps in job_pod_sets(job))


def _start_time(job: Job, wlc: dict[str, dict], bj: dict, pods: list[tuple[str, dict]]) -> datetime | None:
    """When all pods were running: PodsReady, else the last pod's start, else the Job's startTime."""
    if _true(wlc, "PodsReady"):
        return _ltt(wlc, "PodsReady")
    running = [p for _, p in pods if p.get("runningSince") or p.get("phase") in ("Running", "Succeeded")]
    if len(running) >= _expected_pods(job):
        times = [parse_time(p.get("runningSince") or p.get("startTime")) for p in running]
        known = [t for t in times if t]
        return max(known) if known else None
    return None


def _run_evidence(st: KubeJobState) -> bool:
    wl = st.workload or {}
    return bool((wl.get("status") or {}).get("admission")) or any(p.get("node") for p in (st.pods or {}).values())


def _catch_up(job: Job, st: KubeJobState, ctx: EvalContext, *, until: datetime, outcome: Outcome) -> None:
    """Admit and start a job the portal saw pending but the cluster ran (the portal was not watching)."""
    wl, bj = st.workload or {}, st.batch_job or {}
    wlc = _conditions(wl)
    pods = _pods_sorted({n: p for n, p in (st.pods or {}).items() if p.get("node")})[: _expected_pods(job)]
    if job.state == Job.State.PENDING and _run_evidence(st) and pods:
        at = (
            _ltt(wlc, "Admitted") or _ltt(wlc, "QuotaReserved") or parse_time((bj.get("status") or {}).get("startTime"))
        )
        _admit(job, st, ctx, pods, at=_clamp(at, job.queued_at, until), outcome=outcome)
    if job.state == Job.State.ADMITTED:
        start = _start_time(job, wlc, bj, pods) or parse_time((bj.get("status") or {}).get("startTime"))
        if start is not None:
            job_services.job_start(
                job, now=min(_clamp(start, job.state_changed_at, until), max(until, job.state_changed_at))
            )
            outcome.actions.append("started")


def _released_at(st: KubeJobState, evicted_at: datetime | None, fallback: datetime) -> datetime:
    """When the job's devices were given back: its pods' ends (deletion / termination), else the eviction."""
    ends = [pod_end(p) for p in (st.pods or {}).values()]
    known = [e for e in ends if e]
    if known:
        return max(known)
    return evicted_at or fallback


def _checkpointed(job: Job, bj: dict, evicted_at: datetime | None) -> bool:
    """Evidence of a checkpoint written for this eviction (the job's own annotation), with a policy."""
    if not job_services.has_checkpoint_policy(job):
        return False
    done = parse_time((bj.get("annotations") or {}).get("gpu-pool-portal.io/checkpoint-done-at"))
    return bool(done and evicted_at and done >= evicted_at)


def _lost_node_at(job: Job) -> datetime | None:
    """When a node (or device) holding one of the job's open allocations left the cluster."""
    row = (
        Allocation.objects.filter(job=job, ended_at__isnull=True)
        .filter(Q(device__gone_at__isnull=False) | Q(device__node__gone_at__isnull=False))
        .aggregate(device_gone=Max("device__gone_at"), node_gone=Max("device__node__gone_at"))
    )
    times = [t for t in (row["device_gone"], row["node_gone"]) if t]
    return min(times) if times else None


def evaluate_job(job: Job, st: KubeJobState, ctx: EvalContext) -> Outcome:
    """Apply every transition the cluster shows for one job (the caller holds the job's row lock)."""
    outcome = _evaluate_job(job, st, ctx)
    if any(not a.startswith(("admitted", "started", "wait")) for a in outcome.actions):
        ctx.released()  # something was released: count again
    return outcome


@dataclass
class _Observed:
    """What the cluster says about one job, read once from its stored snapshots."""

    bj: dict
    wl: dict
    jc: dict
    wlc: dict
    live: dict
    evicted: dict
    evicted_true: bool
    evicted_at: datetime | None
    admitted: bool


def _observe(st: KubeJobState, ctx: EvalContext) -> _Observed:
    bj, wl = st.batch_job or {}, st.workload or {}
    jc, wlc = _conditions(bj), _conditions(wl)
    pods_all = st.pods or {}
    # a pod on a node that left the cluster is not running, whatever its last status said
    gone = ctx.gone_nodes({p.get("node", "") for p in pods_all.values() if p.get("node")})
    live = {n: p for n, p in pods_all.items() if pod_is_live(p) and p.get("node", "") not in gone}
    evicted = wlc.get("Evicted") or {}
    evicted_true = evicted.get("status") == "True"
    admission = (wl.get("status") or {}).get("admission")
    return _Observed(
        bj=bj,
        wl=wl,
        jc=jc,
        wlc=wlc,
        live=live,
        evicted=evicted,
        evicted_true=evicted_true,
        evicted_at=_ltt(wlc, "Evicted"),
        admitted=_true(wlc, "Admitted") and bool(admission) and not evicted_true,
    )


def _evaluate_job(job: Job, st: KubeJobState, ctx: EvalContext) -> Outcome:
    outcome = Outcome()
    if job.is_final:
        return outcome
    seen = _observe(st, ctx)
    if _ended(job, st, ctx, seen, outcome):
        return outcome
    if job.state in HOLDING:
        _holding(job, st, ctx, seen, outcome)
    if job.state == Job.State.PENDING:
        _pending(job, st, ctx, seen, outcome)
    if job.state == Job.State.ADMITTED:
        pods = _pods_sorted({n: p for n, p in seen.live.items() if p.get("node")})
        start = _start_time(job, seen.wlc, seen.bj, pods)
        if start is not None:
            job_services.job_start(job, now=_clamp(start, job.state_changed_at, ctx.now))
            outcome.actions.append("started")
    return outcome


def _ended(job: Job, st: KubeJobState, ctx: EvalContext, seen: _Observed, outcome: Outcome) -> bool:
    """The job finished, was deleted in the cluster or deactivated for good: record its end (True)."""
    now = ctx.now
    final = _final_outcome(seen.bj, seen.jc, seen.wlc)
    if final is not None:
        state, at, message = final
        _catch_up(job, st, ctx, until=at or now, outcome=outcome)
        job_services.job_finish(job, state=state, now=_clamp(at, job.state_changed_at, now), message=message)
        outcome.actions.append(state)
        return True
    if st.job_deleted_at or seen.bj.get("deleted"):
        at = _released_at(st, st.job_deleted_at, now)
        job_services.job_finish(
            job,
            state=Job.State.CANCELLED,
            now=_clamp(at, job.state_changed_at, now),
            message=f"The Kubernetes {seen.bj.get('kind', 'Job')} was deleted in the cluster.",
        )
        outcome.actions.append(Job.State.CANCELLED)
        return True
    if _true(seen.wlc, "Finished") and seen.wlc["Finished"].get("reason") == SLICE_REPLACED:
        # the sentence explain gives, once on the timeline; the new slice's Workload says what happens next
        verdict = km.workload_verdict(seen.wl, context=ctx.message_context(job))
        key = f"{(seen.wl.get('metadata') or {}).get('uid', '')}:{SLICE_REPLACED}"
        job_services.record_event(
            job,
            JobEvent.Kind.NOTE,
            verdict.message,
            at=_clamp(_ltt(seen.wlc, "Finished"), job.state_changed_at, now),
            details={"source": "kueue", "reason": SLICE_REPLACED, "kueueMessage": verdict.kueue_message},
            source_key=key[:200],
        )
        return True
    if seen.wl and (seen.wl.get("spec") or {}).get("active") is False:
        final_state = FINAL_DEACTIVATIONS.get(seen.evicted.get("reason", ""))
        if final_state and not seen.live:
            state, message = final_state
            verdict = km.workload_verdict(seen.wl, context=ctx.message_context(job))
            if verdict.code != km.UNRECOGNISED:  # the sentence explain gives for this Workload
                message = verdict.message
            at = _released_at(st, seen.evicted_at, now)
            job_services.job_finish(job, state=state, now=_clamp(at, job.state_changed_at, now), message=message)
            outcome.actions.append(state)
            return True
    return False


def _holding(job: Job, st: KubeJobState, ctx: EvalContext, seen: _Observed, outcome: Outcome) -> None:
    """A job holding quota: preempted or evicted by Kueue, released back to the queue, or its node lost."""
    now, evicted = ctx.now, seen.evicted
    running = job.state in (Job.State.ADMITTED, Job.State.RUNNING)
    if seen.evicted_true and evicted.get("reason") == "Preempted" and running:
        t = km.translate(evicted.get("message", ""), reason="Preempted")
        preemptor = ctx.job_by_uid(t.details.get("preemptorJobUid", ""))
        reason = (seen.wlc.get("Preempted") or {}).get("reason") or "Preempted"
        job_services.job_preempt(
            job,
            now=_clamp(seen.evicted_at, job.state_changed_at, now),
            preemptor=preemptor,
            reason=reason,
            message=evicted.get("message", ""),
        )
        outcome.actions.append("preempting")
    elif seen.evicted_true and evicted.get("reason") in job_services.QUEUE_STOP_EVICTIONS and running:
        # stopPolicy HoldAndDrain: Kueue evicts; the pods may take a while to end (checkpoint).
        job_services.job_evict(
            job,
            now=_clamp(seen.evicted_at, job.state_changed_at, now),
            reason=evicted["reason"],
            message=evicted.get("message", ""),
        )
        outcome.actions.append("evicting")
    if not seen.admitted and not any(p.get("node") for p in seen.live.values()):
        _requeue_released(job, st, ctx, seen, outcome)
        return
    lost = _lost_node_at(job)
    if lost is not None:
        job_services.job_requeue(
            job,
            now=_clamp(lost, job.state_changed_at, now),
            reason="node_lost",
            message="A node this job ran on left the cluster; its pods are being replaced.",
            checkpointed=False,
        )
        outcome.actions.append("requeued:node_lost")


def _requeue_released(job: Job, st: KubeJobState, ctx: EvalContext, seen: _Observed, outcome: Outcome) -> None:
    """Kueue released the job's quota and no pod is left on a node: back in the queue."""
    evicted = seen.evicted
    reason = REQUEUE_REASONS.get(evicted.get("reason", ""), "evicted") if seen.evicted_true else "evicted"
    t = km.translate(evicted.get("message", ""), reason=evicted.get("reason", ""))
    message = t.message if seen.evicted_true else "Kueue released the job's quota; back in the queue."
    at = _clamp(_released_at(st, seen.evicted_at, ctx.now), job.state_changed_at, ctx.now)
    job_services.job_requeue(
        job, now=at, reason=reason, message=message, checkpointed=_checkpointed(job, seen.bj, seen.evicted_at)
    )
    outcome.actions.append(f"requeued:{reason}")


def _pending(job: Job, st: KubeJobState, ctx: EvalContext, seen: _Observed, outcome: Outcome) -> None:
    """A pending job: admitted with its pods bound (admit it), or still waiting (say why, in Kueue's words)."""
    now = ctx.now
    msg_ctx = ctx.message_context(job)
    messages = [m for m in ((p.get("unschedulable") or {}).get("message", "") for p in seen.live.values()) if m]
    if seen.admitted:
        bound = _pods_sorted({n: p for n, p in seen.live.items() if p.get("node")})
        expected = _expected_pods(job)
        if len(bound) >= expected:
            at = _ltt(seen.wlc, "Admitted") or now
            _admit(job, st, ctx, bound[:expected], at=_clamp(at, job.queued_at, now), outcome=outcome)
            return
        blocked = km.pods_unschedulable(messages, context=msg_ctx)
        if blocked is not None:
            _set_wait(job, blocked, now=now, outcome=outcome, ctx=ctx)
    elif seen.wl:
        verdict = km.workload_verdict(seen.wl, context=msg_ctx, pod_messages=messages)
        _set_wait(job, verdict, now=now, outcome=outcome, ctx=ctx)


def job_mismatch(job: Job, st: KubeJobState | None) -> str:
    """A one-line description of how the portal and the cluster disagree about a job ("" when they agree)."""
    if st is None:
        return "no cluster state recorded" if not job.is_final and job.k8s_uid else ""
    bj, wl = st.batch_job or {}, st.workload or {}
    final = _final_outcome(bj, _conditions(bj), _conditions(wl))
    wlc = _conditions(wl)
    admitted = _true(wlc, "Admitted") and bool((wl.get("status") or {}).get("admission")) and not _true(wlc, "Evicted")
    if final and not job.is_final:
        return f"ended in the cluster ({final[0]}) but {job.get_state_display().lower()} in the portal"
    if (st.job_deleted_at or bj.get("deleted")) and not job.is_final:
        return f"deleted in the cluster but {job.get_state_display().lower()} in the portal"
    if (
        job.state in HOLDING
        and not admitted
        and not any(p.get("node") for p in (st.pods or {}).values() if pod_is_live(p))
    ):
        return f"{job.get_state_display().lower()} in the portal but Kueue holds no quota for it and no pod runs"
    if job.state == Job.State.PENDING and admitted:
        bound = [p for p in (st.pods or {}).values() if pod_is_live(p) and p.get("node")]
        if len(bound) >= _expected_pods(job):
            return "admitted by Kueue with its pods on nodes but pending in the portal"
    return ""


def evaluation_details(outcome: Outcome) -> dict[str, Any]:
    """A JSON-ready summary."""
    return {"actions": outcome.actions, "notes": outcome.notes}
