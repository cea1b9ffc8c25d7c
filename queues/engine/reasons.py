"""Wait-reason diagnosis: one primary code per pending workload, a plain sentence, and Kueue's own text.

Decision order (first match wins): misconfigured → exceeds_maximum → no_matching_flavor →
preemption_in_progress → awaiting_provisioning → quota (borrow_limit | quota_lent_out | quota_exhausted |
higher_priority_ahead) → placement (health_blocked | topology_fragmented | class_exhausted).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import messages as msg
from . import pods_ready
from .cycle import unreclaimable_reservation
from .decisions import AdmissionDecision, Explanation, PodSetAssignment, WaitReason
from .flavor_assignment import assign
from .partial_admission import can_reduce
from .partial_admission import search as partial_search
from .pod_placement import placement_ok
from .preemption import preemption_targets
from .protection import protected_until, protection_sentence
from .quota import QuotaTree
from .reasons_nodes import flavor_label, flavor_phrase, name_list, never_placed, placement_reason
from .reasons_pod_sets import name_pod_sets
from .records import (
    ADMITTED,
    EVICTING,
    EXCEEDS_MAX_QUOTA,
    FINISHED,
    FIT,
    NO_MATCHING_FLAVOR,
    PENDING,
    PS_FIT,
    PS_NOFIT,
    PS_PREEMPT,
    RESERVED,
    SEVERITY,
    WAITING_FOR_QUOTA,
    ClusterQueueInfo,
    FlavorAssignment,
    WorkloadInfo,
)
from .scheduler import Engine
from .usage_decay import duration_words


def _decision(wl: WorkloadInfo) -> AdmissionDecision:
    return AdmissionDecision(
        workload=wl.key,
        cluster_queue=wl.cq or "",
        pod_sets=tuple(wl.assignment),
        borrowing=wl.borrowing,
        pending_checks=wl.pending_checks,
        message=msg.quota_reserved(wl.cq or ""),
    )


def _preview(engine: Engine, wl: WorkloadInfo, cq: ClusterQueueInfo, assignment: FlavorAssignment) -> AdmissionDecision:
    nodes = placement_ok(engine, wl, cq, assignment) if engine.pool.enabled else None
    pod_sets = []
    for idx, (ps, psa) in enumerate(zip(wl.pod_sets, assignment.pod_sets, strict=False)):
        ns = tuple(nodes[idx]) if nodes is not None else ()
        pod_sets.append(PodSetAssignment(ps.name, ps.count, dict(psa.flavors), dict(psa.usage), ns))
    return AdmissionDecision(
        workload=wl.key,
        cluster_queue=cq.name,
        pod_sets=tuple(pod_sets),
        borrowing=assignment.borrow > 0,
        pending_checks=engine.pending_checks(cq, wl, pod_sets),
        message=msg.quota_reserved(cq.name),
    )


# ------------------------------------------------------------------------------------------ per-pass indexes


@dataclass(slots=True)
class ReasonIndex:
    """What explaining needs from *all* workloads, gathered in one scan of ``engine.workloads``.

    Valid while the engine does not change: explain every pending workload of one engine state with the same
    index (``explain_all``) and the pass costs O(pending + running) instead of O(pending x workloads).
    """

    #: preemptor key -> keys of the workloads being evicted for it (sorted)
    victims: dict[str, list[str]]
    #: ClusterQueue -> keys of the preemptors its evicting workloads make room for
    preemptors_by_cq: dict[str, set[str]]
    #: ClusterQueue -> its first pending, queued workload in queue order (what ``queue_head`` returns)
    heads: dict[str, WorkloadInfo]
    #: ClusterQueue -> the pending preemptors earmarking capacity in its cohort tree, in queue order (lazily)
    earmarks: dict[str, list[WorkloadInfo]] = field(default_factory=dict)
    #: (ClusterQueue, shape, pod set) -> whether that pod set fits alone (``reasons_pod_sets.fits_alone``, lazily)
    pod_set_fits: dict[tuple, bool] = field(default_factory=dict)


def reason_index(engine: Engine) -> ReasonIndex:
    """Scan the live workloads once for the evicting workloads' preemptors and each queue's head."""
    victims: dict[str, list[str]] = {}
    by_cq: dict[str, set[str]] = {}
    heads: dict[str, WorkloadInfo] = {}
    for w in engine.live.values():
        if w.state == EVICTING and w.preempted_by:
            victims.setdefault(w.preempted_by, []).append(w.key)
            by_cq.setdefault(w.cq or "", set()).add(w.preempted_by)
        elif w.state == PENDING and w.cq is not None and w.group is not None:
            best = heads.get(w.cq)
            if best is None or w.sort_key() < best.sort_key():
                heads[w.cq] = w
    for keys in victims.values():
        keys.sort()
    return ReasonIndex(victims=victims, preemptors_by_cq=by_cq, heads=heads)


def explain_all(engine: Engine, workloads: list[WorkloadInfo]) -> dict[str, Explanation]:
    """Explain many workloads of one unchanged engine with one shared index (same answers as one by one).

    Pending workloads of the same shape in the same ClusterQueue get the same answer but for their key when
    nothing about them alone can matter (``shared_verdict_key``): one of them is explained, the others share it.
    """
    index = reason_index(engine)
    preemptors: set[str] = set()
    for keys in index.preemptors_by_cq.values():
        preemptors |= keys
    shared: dict[tuple, Explanation] = {}
    out: dict[str, Explanation] = {}
    for wl in workloads:
        group = shared_verdict_key(engine, wl, index, preemptors)
        if group is None:
            out[wl.key] = explain_wl(engine, wl, index=index)
            continue
        first = shared.get(group)
        if first is None:
            first = shared[group] = out[wl.key] = explain_wl(engine, wl, index=index)
        else:
            out[wl.key] = _as_of(first, wl.key)
    return out


def shares_verdicts(cq: ClusterQueueInfo) -> bool:
    """Whether the queued pending workloads of ``cq`` are explained alike by shape (BestEffortFIFO, no preemption):
    the queue condition of ``shared_verdict_key``."""
    return not cq.strict and not cq.preempts


def shared_verdict_key(
    engine: Engine, wl: WorkloadInfo, index: ReasonIndex, preemptors: set[str]
) -> tuple[str, tuple] | None:
    """(ClusterQueue, shape) when ``wl``'s explanation depends only on them and the engine state, else None.

    That holds for a queued pending workload of a BestEffortFIFO queue that does not preempt (no preemption
    targets, which depend on the workload's own times), that is not itself a preemptor (its victims, and the
    earmarks it is left out of) and that no cycle left a "taken in this cycle" note on: flavor assignment,
    placement, quota and the reasons built from them read only the shape (requests, selectors, topology,
    priority) and the queue.
    """
    if wl.state != PENDING or wl.group is None or wl.cq is None or wl.key in preemptors or wl.key in index.victims:
        return None
    cq = engine.cqs.get(wl.cq)
    if cq is None or not shares_verdicts(cq):
        return None
    if wl.note is not None and wl.note.get("kind") in ("no_longer_fits", "overlap"):
        return None
    return (cq.name, wl.shape)


def _as_of(explanation: Explanation, key: str) -> Explanation:
    """Another workload's shared explanation as this workload's (its key; its own copy of the details)."""
    # Built field by field: ``dataclasses.replace`` costs several times more, once per pending workload of a pass.
    reason = explanation.reason
    if reason is not None:
        reason = WaitReason(
            reason.code, reason.message, reason.kueue_message, reason.kueue_reason, dict(reason.details)
        )
    decision = explanation.assignment
    if decision is not None:
        decision = AdmissionDecision(
            key,
            decision.cluster_queue,
            decision.pod_sets,
            decision.borrowing,
            decision.pending_checks,
            decision.message,
        )
    return Explanation(key, explanation.admissible, reason, decision, explanation.preemption_targets)


# ------------------------------------------------------------------------------------------ entry point


def explain_wl(engine: Engine, wl: WorkloadInfo, *, index: ReasonIndex | None = None) -> Explanation:
    """Explain one workload of ``engine`` (see module docstring for the decision order).

    ``index``: a ``reason_index`` of the engine as it is now (built here when not given).
    """
    key = wl.key
    if wl.state == ADMITTED:
        return Explanation(key, admissible=True, assignment=_decision(wl))
    if wl.state in (FINISHED, EVICTING):
        return Explanation(key, admissible=False)
    blocked = engine.blocker(wl)
    if blocked is not None:
        return Explanation(key, admissible=False, reason=_misconfigured(engine, wl, blocked))
    if wl.requeue_at is not None:
        held = pods_ready.hold_reason(engine, wl)
        if held is not None:
            return Explanation(key, admissible=False, reason=held)
    cq = engine.cqs[wl.cq]  # type: ignore[index]
    if wl.state == RESERVED:
        return Explanation(key, admissible=False, reason=_awaiting(engine, wl, cq), assignment=_decision(wl))
    assert wl.state == PENDING
    assignment = assign(engine, wl, cq)
    if assignment.mode != PS_FIT and can_reduce(wl):
        reduced = _reduced(engine, wl, cq, assignment)
        if reduced is not None:
            return reduced
    never = _never(engine, wl, cq, assignment)
    if never is not None:
        memo = index.pod_set_fits if index is not None else None
        return Explanation(key, admissible=False, reason=name_pod_sets(engine, wl, cq, never, memo))
    if index is None:
        index = reason_index(engine)
    victims = list(index.victims.get(key, ()))
    if victims:
        base = assignment.message() or (wl.note or {}).get("message", "")
        reason = WaitReason(
            code="preemption_in_progress",
            message=(
                f"Room is being made for this job: {len(victims)} job(s) ({name_list(victims)}) are being preempted "
                "and must exit before it starts."
            ),
            kueue_message=base + msg.pending_preemption_suffix(len(victims)),
            kueue_reason="WaitingForPreemptedWorkloads",
            details={"clusterQueue": cq.name, "victims": victims},
        )
        return Explanation(key, admissible=False, reason=reason, preemption_targets=tuple(victims))
    if cq.strict:
        head = index.heads.get(cq.name)
        if head is not None and head is not wl:
            return Explanation(key, admissible=False, reason=_strict_behind(engine, wl, cq, head, assignment))
    note = wl.note or {}
    if note.get("kind") in ("no_longer_fits", "overlap"):
        # The last cycle's outcome stands until the workload is evaluated again.
        reason = recent_usage_note(engine, cq, _taken_in_cycle(engine, wl, cq, note))
        return Explanation(key, admissible=False, reason=reason)
    mode = assignment.mode
    if mode == PS_FIT:
        earmarked = _earmarked(engine, wl, cq, index)
        if earmarked is not None:
            return Explanation(key, admissible=False, reason=earmarked)
        if engine.reserving:
            held = _held_back(engine, wl, cq, assignment)
            if held is not None:
                return Explanation(key, admissible=False, reason=held)
        if engine.not_ready:
            blocked_by_start = pods_ready.block_reason(engine, wl)
            if blocked_by_start is not None:
                return Explanation(key, admissible=False, reason=blocked_by_start)
        return Explanation(key, admissible=True, assignment=_preview(engine, wl, cq, assignment))
    targets: list = []
    if mode == PS_PREEMPT:
        targets = preemption_targets(engine, wl, cq, assignment)
    if targets:
        names = sorted(t.key for t, _ in targets)
        reason = WaitReason(
            code="preemption_in_progress",
            message=(
                f"This job can start by preempting {len(names)} job(s) ({name_list(names)}); "
                "the next scheduling cycle evicts them."
            ),
            kueue_message=assignment.message() + msg.pending_preemption_suffix(len(names)),
            kueue_reason="WaitingForPreemptedWorkloads",
            details={"clusterQueue": cq.name, "victims": names, "reasons": sorted({r for _, r in targets})},
        )
        return Explanation(key, admissible=False, reason=reason, preemption_targets=tuple(names))
    reason = _quota(engine, wl, cq, assignment) or placement_reason(engine, wl, cq, assignment)
    reason = recent_usage_note(engine, cq, reason)
    if engine.has_protection and cq.preempts:
        reason = _with_protection(engine, reason, _protected_victims(engine, wl, cq))
    return Explanation(key, admissible=False, reason=name_pod_sets(engine, wl, cq, reason, index.pod_set_fits))


#: Codes whose wait the team's recent usage can lengthen under fairness that remembers: capacity others got first.
RECENT_USAGE_CODES = frozenset(
    {"quota_exhausted", "class_exhausted", "higher_priority_ahead", "topology_fragmented", "health_blocked"}
)


def recent_usage_note(engine: Engine, cq: ClusterQueueInfo, reason: WaitReason) -> WaitReason:
    """Under fairness that remembers, say when the team's recent usage puts it behind others: "Your team used
    3.1× its share over the last 7 days…" (``details["recentUsage"]``). Unchanged otherwise."""
    memory = engine.memory
    if memory is None or reason.code not in RECENT_USAGE_CODES:
        return reason
    found = memory.ratio(cq.name)
    if found is None or found[0] <= 1.0:
        return reason
    ratio, resource = found
    policy = memory.policy[cq.name]
    window = duration_words(policy.window)
    used = (
        f"used {ratio:.1f}× its share"
        if ratio != float("inf")
        else f"used {msg.noun(resource, round(memory.recent(cq.name)[resource]))} on average with no quota of its own"
    )
    sentence = (
        f" Your team {used} over the last {window} (usage counts half after {duration_words(policy.half_life)}), "
        "so teams that used less get idle capacity first and your borrowed jobs are reclaimed first."
    )
    details = dict(reason.details)
    details["recentUsage"] = {
        "ratio": None if ratio == float("inf") else round(ratio, 2),
        "resource": resource,
        "windowSeconds": policy.window,
        "halfLifeSeconds": policy.half_life,
    }
    return WaitReason(reason.code, reason.message + sentence, reason.kueue_message, reason.kueue_reason, details)


def _protected_victims(engine: Engine, wl: WorkloadInfo, cq: ClusterQueueInfo) -> list[tuple[str, float, str]]:
    """The workloads ``wl`` would preempt now but for the portal's protection: (key, until, rule) of each protected
    one (empty when protection changes nothing: no preemption would help, or its victims are not protected)."""
    engine.ignore_protection = True
    try:
        assignment = assign(engine, wl, cq)
        targets = preemption_targets(engine, wl, cq, assignment) if assignment.mode == PS_PREEMPT else []
    finally:
        engine.ignore_protection = False
    out = []
    for target, _ in targets:
        held = protected_until(target.spec.protection, target.admitted_at, engine.now)
        if held is not None:
            out.append((target.key, held[0], held[1]))
    return sorted(out)


def _with_protection(engine: Engine, reason: WaitReason, protected: list[tuple[str, float, str]]) -> WaitReason:
    """``reason`` saying which protected jobs it would otherwise preempt, and how long their protection holds
    (``details.protectionText`` is the sentence added, so that a page can say it again as of its own time)."""
    if not protected:
        return reason
    victims = [{"workload": key, "until": until, "rule": rule} for key, until, rule in protected]
    sentence = protection_sentence(victims, engine.now)
    details = dict(reason.details)
    details["protectedVictims"] = victims
    details["protectedUntil"] = max(u for _, u, _ in protected)
    details["protectionText"] = sentence
    return WaitReason(reason.code, f"{reason.message} {sentence}", reason.kueue_message, reason.kueue_reason, details)


def _reduced(engine: Engine, wl: WorkloadInfo, cq: ClusterQueueInfo, full: FlavorAssignment) -> Explanation | None:
    """A workload that does not fit whole but would with fewer pods (partial admission): admissible with the
    largest counts that fit, or waiting for the preemptions they need. None when no reduction helps."""

    def targets_of(assignment: FlavorAssignment) -> list:
        return preemption_targets(engine, wl, cq, assignment)

    if full.mode == PS_PREEMPT and preemption_targets(engine, wl, cq, full):
        return None  # the whole workload can preempt: Kueue takes that, not a reduction
    found = partial_search(engine, wl, cq, targets_of, explain=True)
    if found is None:
        return None
    assignment, targets, pod_sets = found
    saved = wl.pod_sets
    wl.pod_sets = pod_sets
    try:
        if targets:
            names = sorted(t.key for t, _ in targets)
            reason = WaitReason(
                code="preemption_in_progress",
                message=(
                    f"This job can start with fewer pods ({_counts_text(pod_sets)}, partial admission) by preempting "
                    f"{len(names)} job(s) ({name_list(names)}); the next scheduling cycle evicts them."
                ),
                kueue_message=assignment.message() + msg.pending_preemption_suffix(len(names)),
                kueue_reason="WaitingForPreemptedWorkloads",
                details={"clusterQueue": cq.name, "victims": names, "podSetCounts": _counts(pod_sets)},
            )
            return Explanation(wl.key, admissible=False, reason=reason, preemption_targets=tuple(names))
        if engine.not_ready:
            blocked_by_start = pods_ready.block_reason(engine, wl)
            if blocked_by_start is not None:
                return Explanation(wl.key, admissible=False, reason=blocked_by_start)
        return Explanation(wl.key, admissible=True, assignment=_preview(engine, wl, cq, assignment))
    finally:
        wl.pod_sets = saved


def _counts(pod_sets: list) -> dict[str, int]:
    return {ps.name: ps.count for ps in pod_sets}


def _counts_text(pod_sets: list) -> str:
    return ", ".join(f"{ps.name}: {ps.count} of {ps.spec.count}" for ps in pod_sets if ps.count != ps.spec.count)


# ------------------------------------------------------------------------------------------ misconfigured


def _misconfigured(engine: Engine, wl: WorkloadInfo, blocked: tuple[str, str, str]) -> WaitReason:
    kueue_message, kueue_reason, cause = blocked
    spec = wl.spec
    cq_name = wl.cq or ""
    if cause == "deactivated":
        if wl.deactivated:
            text = (
                f"Kueue deactivated this job ({wl.deactivated}: its pods missed the PodsReady timeout once more than "
                "waitForPodsReady's backoffLimitCount allows); set spec.active: true to queue it again."
            )
        else:
            text = "This job is deactivated (spec.active is false); reactivate it to queue it again."
        code = "misconfigured"
    elif cause == "local_queue_missing":
        text = (
            f"The queue '{spec.queue_name}' does not exist in namespace {spec.namespace}; "
            "an admin must create the LocalQueue (or the job must name an existing one)."
        )
        code = "misconfigured"
    elif cause == "local_queue_stopped":
        text = f"The queue {spec.namespace}/{spec.queue_name} is stopped by an admin; no job in it is admitted."
        code = "misconfigured"
    elif cause == "cluster_queue_missing":
        text = f"The queue {spec.namespace}/{spec.queue_name} points at ClusterQueue {cq_name}, which does not exist."
        code = "misconfigured"
    elif cause == "cluster_queue_inactive":
        cq = engine.cqs[cq_name]
        text = f"Your team's ClusterQueue {cq_name} cannot admit jobs: it {cq.inactive}."
        code = "misconfigured"
    elif cause == "admission_gated":
        text = (
            f"Admission of this job is held by {spec.admission_gated_by} (annotation "
            "kueue.x-k8s.io/admission-gated-by); it queues once that gate is removed."
        )
        code = "awaiting_provisioning"
    elif cause == "namespace_mismatch":
        text = f"ClusterQueue {cq_name} does not accept jobs from namespace {spec.namespace} (namespaceSelector)."
        code = "misconfigured"
    else:
        text = "An admission check of this job failed (Retry or Rejected); it is evicted or deactivated."
        code = "awaiting_provisioning"
    return WaitReason(
        code=code,  # type: ignore[arg-type]
        message=text,
        kueue_message=kueue_message,
        kueue_reason=kueue_reason,
        details={"cause": cause, "clusterQueue": cq_name, "localQueue": spec.queue_name},
    )


def _awaiting(engine: Engine, wl: WorkloadInfo, cq: ClusterQueueInfo) -> WaitReason:
    checks = list(wl.pending_checks)
    return WaitReason(
        code="awaiting_provisioning",
        message=(
            f"Quota is reserved in {cq.name}; the job starts once admission check(s) {name_list(checks)} pass "
            "(capacity is being provisioned)."
        ),
        kueue_message=msg.NOT_ALL_CHECKS_READY,
        kueue_reason="UnsatisfiedAdmissionChecks",
        details={"clusterQueue": cq.name, "pendingChecks": checks},
    )


# ------------------------------------------------------------------------------------------ never fits


def _never(engine: Engine, wl: WorkloadInfo, cq: ClusterQueueInfo, assignment: FlavorAssignment) -> WaitReason | None:
    """exceeds_maximum or no_matching_flavor: waiting alone will never admit this workload."""
    exceeds: list[dict] = []
    nomatch: list[dict] = []
    for psa in assignment.pod_sets:
        if psa.mode != PS_NOFIT and not psa.failed:
            continue
        for attempts in psa.group_attempts:
            if not attempts:
                continue
            if any(
                a.get("mode") == FIT or a.get("kind") in (WAITING_FOR_QUOTA, "")
                for a in attempts
                if a.get("kind") != NO_MATCHING_FLAVOR and a.get("kind") != EXCEEDS_MAX_QUOTA
            ):
                continue
            group_min = min(attempts, key=lambda a: SEVERITY[a["kind"]])
            if group_min["kind"] == EXCEEDS_MAX_QUOTA:
                exceeds.append(group_min)
            elif group_min["kind"] == NO_MATCHING_FLAVOR:
                nomatch.extend(attempts)
    kueue_message = assignment.message()
    if exceeds:
        att = exceeds[0]
        info = next(i for i in att["resources"] if i["kind"] == EXCEEDS_MAX_QUOTA)
        res, flavor = info["resource"], info["flavor"]
        fr = (flavor, res)
        quota = cq.quotas.get(fr)
        limit = quota.borrowing_limit if quota is not None else None
        text = (
            f"This job needs {msg.noun(res, info['request'], flavor_label(engine, flavor))} "
            "but your team can get at most "
            f"{msg.qty(res, info['maximum'])} of them even with every other job gone "
            f"(nominal quota {msg.qty(res, quota.nominal if quota else 0)}"
            + (f", borrowing limit {msg.qty(res, limit)}" if limit is not None else "")
            + "). Ask for fewer, or ask an admin for more quota."
        )
        return WaitReason(
            code="exceeds_maximum",
            message=text,
            kueue_message=kueue_message,
            kueue_reason=_kueue_reason(assignment),
            details={
                "clusterQueue": cq.name,
                "flavor": flavor,
                "resource": res,
                "requested": info["request"],
                "maximum": info["maximum"],
                "nominal": quota.nominal if quota else 0,
                "borrowingLimit": limit,
            },
        )
    if nomatch:
        phrases = sorted({flavor_phrase(engine, a) for a in nomatch})
        return WaitReason(
            code="no_matching_flavor",
            message="No hardware in your team's queue matches this job: " + "; ".join(phrases) + ".",
            kueue_message=kueue_message,
            kueue_reason=NO_MATCHING_FLAVOR,
            details={
                "clusterQueue": cq.name,
                "flavors": [{k: v for k, v in a.items() if k != "resources"} for a in nomatch],
            },
        )
    if not engine.pool.enabled:
        return None
    return never_placed(engine, wl, cq, assignment, kueue_message)


def _kueue_reason(assignment: FlavorAssignment) -> str:
    overall = ""
    for psa in assignment.pod_sets:
        if psa.mode != PS_NOFIT:
            continue
        reason = psa.no_fit_reason
        for attempts in psa.group_attempts:
            if not attempts:
                continue
            group_min = min((a["kind"] for a in attempts), key=lambda k: SEVERITY[k])
            if SEVERITY[group_min] > SEVERITY[reason]:
                reason = group_min
        if SEVERITY[reason] > SEVERITY[overall]:
            overall = reason
    return overall or WAITING_FOR_QUOTA


# ------------------------------------------------------------------------------------------ queue order


def _strict_behind(
    engine: Engine, wl: WorkloadInfo, cq: ClusterQueueInfo, head: WorkloadInfo, assignment: FlavorAssignment
) -> WaitReason:
    return WaitReason(
        code="higher_priority_ahead",
        message=(
            f"Your team's queue {cq.name} is strictly first-in-first-out (StrictFIFO) and {head.key} "
            f"(priority {head.priority}) is first in line; this job is considered only after it is admitted."
        ),
        kueue_message="",
        kueue_reason="",
        details={
            "clusterQueue": cq.name,
            "ahead": head.key,
            "aheadPriority": head.priority,
            "ownFit": assignment.mode == PS_FIT,
        },
    )


def _taken_in_cycle(engine: Engine, wl: WorkloadInfo, cq: ClusterQueueInfo, note: dict) -> WaitReason:
    overlap = note.get("kind") == "overlap"
    text = (
        "Another job ahead of this one in the same scheduling cycle is already preempting the jobs this one "
        "would need to preempt; it is retried in the next cycle."
        if overlap
        else "The capacity this job fits in was taken in the last scheduling cycle by a job ahead of it "
        "(higher priority, within its nominal quota, or older); it is retried in the next cycle."
    )
    return WaitReason(
        code="preemption_in_progress" if overlap else "higher_priority_ahead",
        message=text,
        kueue_message=note["message"],
        kueue_reason=WAITING_FOR_QUOTA,
        details={"clusterQueue": cq.name, "cycleOutcome": note.get("kind")},
    )


def _earmarks(engine: Engine, cq: ClusterQueueInfo, index: ReasonIndex) -> list[WorkloadInfo]:
    """The pending preemptors of evicting workloads anywhere in ``cq``'s cohort tree, in queue order."""
    cached = index.earmarks.get(cq.name)
    if cached is not None:
        return cached
    keys: set[str] = set()
    for member in cq.cohort_cqs:
        keys |= index.preemptors_by_cq.get(member.name, set())
    ahead = [w for k in keys if (w := engine.workloads.get(k)) is not None and w.state == PENDING]
    ahead.sort(key=lambda w: w.sort_key())
    index.earmarks[cq.name] = ahead
    return ahead


def _earmarked(engine: Engine, wl: WorkloadInfo, cq: ClusterQueueInfo, index: ReasonIndex) -> WaitReason | None:
    first = next((w for w in _earmarks(engine, cq, index) if w.key != wl.key), None)
    if first is None:
        return None
    return WaitReason(
        code="higher_priority_ahead",
        message=(
            f"Capacity is being freed for {first.key} (priority {first.priority}), which preempted jobs to get it "
            "and is first in line; this job is considered after it."
        ),
        kueue_message="",
        kueue_reason=WAITING_FOR_QUOTA,
        details={"clusterQueue": cq.name, "ahead": first.key, "aheadPriority": first.priority},
    )


def _held_back(
    engine: Engine, wl: WorkloadInfo, cq: ClusterQueueInfo, assignment: FlavorAssignment
) -> WaitReason | None:
    """A workload that fits, but not beside the capacity a StrictFIFO head of its cohort tree holds back in every
    cycle (it needs preemption, has no candidates and cannot count on reclaiming lent quota)."""
    members = {c.name for c in cq.cohort_cqs}
    for name, head in sorted(engine.reserving.items()):
        other = engine.cqs.get(name)
        if head is wl or other is None or name not in members or head.state != PENDING:
            continue
        reserved = unreclaimable_reservation(other, assign(engine, head, other, place=False, explain=False))
        if not reserved:
            continue
        QuotaTree.add_usage(other.node, reserved)
        try:
            fits = all(v <= QuotaTree.available(cq.node, fr) for fr, v in assignment.usage.items() if v)
        finally:
            QuotaTree.remove_usage(other.node, reserved)
        if fits:
            continue
        return WaitReason(
            code="higher_priority_ahead",
            message=(
                f"This job fits, but the capacity is held back for {head.key} (priority {head.priority}), the head "
                f"of StrictFIFO queue {name}: it needs preemption, finds nothing to preempt yet and could not take "
                "lent capacity back, so Kueue keeps that capacity for it in every cycle."
            ),
            kueue_message="",
            kueue_reason=WAITING_FOR_QUOTA,
            details={"clusterQueue": cq.name, "ahead": head.key, "aheadQueue": name, "held": _held_details(reserved)},
        )
    return None


def _held_details(reserved: dict) -> dict[str, int]:
    return {f"{f}/{r}": v for (f, r), v in sorted(reserved.items())}


# ------------------------------------------------------------------------------------------ quota


def _quota(engine: Engine, wl: WorkloadInfo, cq: ClusterQueueInfo, assignment: FlavorAssignment) -> WaitReason | None:
    info = None
    index = 0
    for index, psa in enumerate(assignment.pod_sets):  # noqa: B007 (the index of the pod set found is used below)
        if psa.mode == PS_FIT:
            continue
        for attempts in psa.group_attempts:
            if any(a.get("mode") == FIT for a in attempts):
                continue
            for att in attempts:
                if att.get("kind") != WAITING_FOR_QUOTA:
                    continue
                info = next((i for i in att.get("resources", ()) if i["kind"] == WAITING_FOR_QUOTA), None)
                if info is not None:
                    break
            if info is not None:
                break
        if info is not None:
            break
    if info is None:
        return None
    res, flavor = info["resource"], info["flavor"]
    fr = (flavor, res)
    node = cq.node
    quota = cq.quotas.get(fr)
    nominal = quota.nominal if quota is not None else 0
    limit = quota.borrowing_limit if quota is not None else None
    used = node.usage.get(fr, 0)
    # what the job asks of this flavor: the pod sets counted so far, plus the later ones (a gang needs them all)
    request = info["request"] + sum(ps.total.get(res, 0) for ps in wl.pod_sets[index + 1 :])
    available = max(0, info["available"])
    label = flavor_label(engine, flavor)
    details: dict[str, object] = {
        "clusterQueue": cq.name,
        "flavor": flavor,
        "resource": res,
        "requested": request,
        "used": used,
        "nominal": nominal,
        "borrowingLimit": limit,
        "available": available,
        "missing": request - available,
    }
    head = (
        f"Your team uses {msg.qty(res, used)} of its {msg.noun(res, nominal, label)} "
        f"and this job needs {msg.qty(res, request)}."
    )
    kueue_message = assignment.message()
    if node.parent is None:
        return WaitReason(
            code="quota_exhausted",
            message=head + f" The queue {cq.name} is in no cohort, so it cannot borrow; "
            f"{msg.qty(res, request - available)} more must free up in your own quota.",
            kueue_message=kueue_message,
            kueue_reason=WAITING_FOR_QUOTA,
            details=details,
        )
    root = node.root()
    unlimited = max(0, QuotaTree.available_ignoring_borrowing_limits(node, fr))
    local_free = max(0, nominal - used)
    cohort_idle = _cohort_idle(cq, fr)
    borrowable = max(0, available - local_free)
    details.update({"cohort": root.name, "cohortIdle": cohort_idle, "borrowable": borrowable})
    if request <= unlimited:
        binding = _binding_limit(node, fr)
        details["bindingLimit"] = binding
        who = "your borrowing limit" if binding == cq.name else f"the borrowing limit of cohort {binding}"
        limit_value = node.borrowing_limit.get(fr) if binding == cq.name else None
        limit_text = f" of {msg.qty(res, limit_value)}" if limit_value is not None else ""
        return WaitReason(
            code="borrow_limit",
            message=head + f" The cohort has {msg.qty(res, cohort_idle)} idle, but {who}{limit_text} is reached.",
            kueue_message=kueue_message,
            kueue_reason=WAITING_FOR_QUOTA,
            details=details,
        )
    lent = _lent_out(cq, fr, used=used, nominal=nominal)
    if lent is not None:
        details.update(lent)
        return WaitReason(
            code="quota_lent_out",
            message=head + _lent_sentence(cq, res, label, lent, missing=request - available),
            kueue_message=kueue_message,
            kueue_reason=WAITING_FOR_QUOTA,
            details=details,
        )
    split = (
        f" ({msg.qty(res, local_free)} of its own quota, {msg.qty(res, borrowable)} borrowed)"
        if local_free and borrowable
        else ""
    )
    held = " (the rest is held back by borrowing or lending limits)" if available < cohort_idle else ""
    return WaitReason(
        code="quota_exhausted",
        message=head
        + (
            f" The cohort {root.name} has {msg.qty(res, cohort_idle)} idle; your team can use "
            f"{msg.qty(res, available)} of it now{split}{held}; {msg.qty(res, request - available)} more must free up."
        ),
        kueue_message=kueue_message,
        kueue_reason=WAITING_FOR_QUOTA,
        details=details,
    )


def _lent_out(cq: ClusterQueueInfo, fr: tuple[str, str], *, used: int, nominal: int) -> dict | None:
    """Who holds the team's unused quota while the job waits for quota: the queues of its cohort tree using more
    than their own nominal quota (borrowers), most first. None when the team uses its whole quota or nobody
    borrows (then the team's quota is not what is lent out)."""
    if used >= nominal:
        return None
    held_by: list[tuple[int, str]] = []
    for other in cq.cohort_cqs:
        if other is cq:
            continue
        held = other.node.usage.get(fr, 0) - other.node.nominal.get(fr, 0)
        if held > 0:
            held_by.append((held, other.name))
    if not held_by:
        return None
    lent = min(nominal - used, sum(units for units, _ in held_by))
    held_by.sort(key=lambda h: (-h[0], h[1]))
    holders = [{"clusterQueue": name, "units": units} for units, name in held_by]
    return {"lent": lent, "lentTo": holders, "reclaim": cq.spec.preemption.reclaim_within_cohort}


def _lent_sentence(cq: ClusterQueueInfo, res: str, label: str, lent: dict, *, missing: int) -> str:
    """The rest of the lent-out reason: who holds how much, and whether the team's queue takes it back."""
    holders = lent["lentTo"]
    named = ", ".join(f"{h['clusterQueue']} {msg.qty(res, h['units'])}" for h in holders[:5])
    if len(holders) > 5:
        named += f" and {len(holders) - 5} more"
    policy = lent["reclaim"]
    if policy == "Never":
        back = (
            f"The queue {cq.name} does not reclaim lent quota (reclaimWithinCohort: Never): it comes back only as "
            "their jobs end."
        )
    elif policy == "LowerPriority":
        back = (
            f"The queue {cq.name} reclaims lent quota only from lower-priority jobs (reclaimWithinCohort: "
            "LowerPriority) and none of the borrowers' jobs is lower priority: it comes back as their jobs end."
        )
    else:
        back = (
            f"The queue {cq.name} reclaims lent quota (reclaimWithinCohort: {policy}), but no borrowed job can be "
            "preempted for this one now: it comes back as their jobs end."
        )
    return (
        f" {msg.noun(res, lent['lent'], label)} of its unused quota are lent out, in use by queues that borrowed them "
        f"({named} above their own quota); {_coming_back(res, lent['lent'], missing)} {back}"
    )


def _coming_back(res: str, lent: int, missing: int) -> str:
    """What must come back (and free up besides) for the job to start."""
    if missing <= lent:
        return f"{msg.qty(res, missing)} must come back for this job to start."
    return (
        f"all {msg.qty(res, lent)} must come back and {msg.qty(res, missing - lent)} more must free up in the "
        "cohort for this job to start."
    )


def _cohort_idle(cq: ClusterQueueInfo, fr: tuple[str, str]) -> int:
    """Quota of ``fr`` not in use anywhere in the cohort tree (member queues plus Cohort objects)."""
    root = cq.node.root()
    total = 0
    used = 0
    stack = [root]
    while stack:
        cur = stack.pop()
        total += cur.nominal.get(fr, 0)
        if cur.is_cq:
            used += cur.usage.get(fr, 0)
        stack.extend(cur.child_cqs)
        stack.extend(cur.child_cohorts)
    return max(0, total - used)


def _binding_limit(node, fr) -> str:
    """The queue or cohort whose borrowingLimit caps the available quota the most."""
    cur = node
    while cur is not None:
        if fr in cur.borrowing_limit:
            return cur.name
        cur = cur.parent
    return node.name
