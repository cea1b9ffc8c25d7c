"""Messages as a whole: the pod-set wrapper around per-flavor reasons, and the one-sentence messages."""

from __future__ import annotations

from typing import Any

from queues.engine.wait_codes import AWAITING_PROVISIONING, HIGHER_PRIORITY_AHEAD, MISCONFIGURED, PREEMPTION_IN_PROGRESS

from .codes import UNRECOGNISED, reason_hint
from .context import FlavorReason, MessageContext, Translation
from .flavors import decide, pick, plain_numbers
from .patterns import PODSET_PREFIX, PREEMPTION_SUFFIX_RE, WHOLE_PATTERNS, scan_reasons

#: Whole messages whose plain sentence is always the same.
FIXED_SENTENCES = {
    "no_longer_fits": "Another job took the capacity this one needed in the same scheduling round; it is next in line.",
    "overlapping_preemption_targets": "Room is being made for another job first; this one fits once those preemptions "
    "finish.",
    "overlapping_preemption_targets_deferred": "Room is being made for another job first; this one fits once those "
    "preemptions finish.",
    "waiting_for_pods_ready_block": "Kueue admits one job at a time until the admitted jobs' pods are ready.",
    "failed_admission_checks_pending": "An admission check failed; Kueue retries or gives up on this job.",
    "preemption_gated": "This job needs to preempt others, but preemption is held by a gate.",
    "namespace_selector_mismatch": "Your team's namespace is not served by its ClusterQueue: an admin must fix the "
    "queue setup.",
    "pending_evaluation": "Queued; Kueue has not evaluated this job yet (jobs ahead of it are considered first).",
    "pods_ready_timeout": "The pods did not all start in time, so Kueue released the job and requeued it (with a "
    "backoff).",
    "requeued_messages": "Back in the queue; Kueue evaluates it again.",
    "on_hold": "The job is on hold (scaled to zero).",
    "cohort_prioritized": "Other jobs of the cohort went first in this scheduling round; this one is next in line.",
    "more_favorable_variant": "Another variant of this job, on a preferred flavor, is already admitted; this variant "
    "stays queued.",
    "below_last_acceptable_flavor": "This variant's flavor is below the last one the queue accepts for moving a "
    "running job: it is not admitted there.",
    "admission_check_false": "Kueue released the job's quota because an admission check failed (Retry); it "
    "requeues the job and provisions again.",
    "flavor_migration_eviction": "Moved off its flavor so that a variant of the same job can run on a preferred "
    "one; back in the queue.",
}


def podset_translation(message: str, ctx: MessageContext | None) -> Translation | None:
    """``couldn't assign flavors to pod set …`` (several pod sets, optional preemption suffixes)."""
    if not message.startswith(PODSET_PREFIX):
        return None
    suffix = PREEMPTION_SUFFIX_RE.search(message)
    body = message[: suffix.start()] if suffix else message
    preempting = int(suffix.group("preempting")) if suffix and suffix.group("preempting") else 0
    migrating = int(suffix.group("migrating")) if suffix and suffix.group("migrating") else 0
    failed = int(suffix.group("failed")) if suffix and suffix.group("failed") else 0
    pod_sets: list[dict[str, Any]] = []
    picked: list[FlavorReason] = []
    unknown: list[str] = []
    for chunk in body[len(PODSET_PREFIX) :].split("; " + PODSET_PREFIX):
        name, sep, reasons_text = chunk.partition(": ")
        if not sep:
            unknown.append(chunk)
            continue
        found, rest = scan_reasons(reasons_text)
        unknown += rest
        decided = [decide(r, ctx) for r in found]
        if decided:
            picked.append(pick(decided, ctx))
        pod_sets.append(
            {
                "name": name,
                "reasons": [
                    {"id": r.id, "code": r.code, "flavor": r.flavor, "resource": r.resource, **plain_numbers(r)}
                    for r in decided
                ],
            }
        )
    ids = ["podset_flavor_assignment_failed", *sorted({r["id"] for ps in pod_sets for r in ps["reasons"]})]
    details: dict[str, Any] = {"podSets": pod_sets}
    if preempting:
        ids.append("pending_preemption_suffix")
        details["preempting"] = preempting
    if migrating:
        ids.append("pending_migration_suffix")
        details["migrating"] = migrating
    if failed:
        ids.append("preemption_failed_suffix")
        details["preemptionsFailed"] = failed
    if unknown:
        details["unrecognisedParts"] = unknown
    if not picked:
        return Translation(UNRECOGNISED, message, message, tuple(ids), {**details, "unrecognised": True})
    main = pick(picked, ctx) if len(picked) > 1 else picked[0]
    code, plain = main.code, main.plain
    if preempting:
        code = PREEMPTION_IN_PROGRESS
        plain = f"Room is being made: {preempting} lower-priority job(s) are being preempted. ({main.plain})"
    elif migrating:
        code = PREEMPTION_IN_PROGRESS
        plain = f"Room is being made: {migrating} variant(s) of this job are being moved off the flavor. ({main.plain})"
    elif failed:
        code = PREEMPTION_IN_PROGRESS
        plain = f"Preempting {failed} job(s) to make room failed; Kueue retries. ({main.plain})"
    if unknown:
        details["unrecognised"] = True
    details.update({"flavor": main.flavor, "resource": main.resource, **plain_numbers(main)})
    return Translation(code, plain, message, tuple(ids), details)


def whole_translation(message: str, reason: str, ctx: MessageContext | None) -> Translation | None:
    """A message that is one known sentence."""
    for message_id, pattern, code in WHOLE_PATTERNS:
        m = pattern.fullmatch(message)
        if not m:
            continue
        groups = {k: v for k, v in m.groupdict().items() if v is not None}
        return _sentence(message_id, code, groups, message, reason, ctx)
    return None


def _sentence(
    message_id: str, code: str | None, g: dict[str, str], message: str, reason: str, ctx: MessageContext | None
) -> Translation:
    """Code and plain sentence of a whole-message match."""
    details: dict[str, Any] = {k: int(v) if v.isdigit() else v for k, v in g.items()}
    plain = FIXED_SENTENCES.get(message_id, message)
    if message_id == "podset_flavor_assignment_error":
        plain = f"Kueue could not assign hardware to pod set {g['podset']}: {g['error']}. An admin must fix the setup."
    elif message_id in ("local_queue_missing", "local_queue_inactive"):
        state = "does not exist" if message_id == "local_queue_missing" else "is stopped"
        plain = f"Your team's queue {g.get('localqueue', '')} {state} in the cluster: an admin must fix it."
    elif message_id in ("cluster_queue_missing", "cluster_queue_inactive"):
        state = "does not exist" if message_id == "cluster_queue_missing" else "is inactive or stopped"
        plain = f"Your team's ClusterQueue {g.get('clusterqueue', '')} {state}: an admin must fix it."
    elif message_id in ("resources_validation_failed", "limitrange_violation"):
        plain = f"The job's resource requests are not allowed: {g.get('detail', '')}. Fix the job and resubmit."
    elif message_id == "admission_gated":
        gates = g.get("gates") or g.get("event_gates") or ""
        plain = f"Admission waits for an external approval ({gates})." if gates else "Admission gate cleared."
    elif message_id == "deactivated":
        cause = g.get("cause")
        plain = f"Kueue stopped this job ({cause})." if cause else "This job was stopped in the cluster (deactivated)."
        plain += " It does not run again unless it is reactivated."
    elif message_id == "deactivation_target":
        plain = f"Kueue is stopping this job: {message}."
    elif message_id == "preempted":
        why = g.get("why") or g.get("why_v07") or "a higher-priority job"
        plain = f"Preempted to make room for another job ({why}); back in the queue."
        details["preemptorJobUid"] = g.get("job_uid", "")
    elif message_id == "admit_failed":
        plain = f"Kueue could not record the admission in the cluster ({g['error']}); it retries."
    elif message_id == "admission_check_rejected_event":
        plain = f"Capacity provisioning was rejected ({g['check']}: {g['detail']}); Kueue stops this job."
    elif message_id == "workload_slice_replaced":
        code, plain = "", "Replaced by a resized slice of the same job."
        details["preemptorJobUid"] = g.get("job_uid", "")
    elif message_id == "admission_check_retry_eviction":
        plain = f"Capacity provisioning failed and is retried: {g.get('checks', '')}."
    elif message_id == "queue_stopped_eviction":
        plain = f"The {g['kind']} was stopped by an admin; the job waits until it restarts."
    elif message_id in ("tas_no_node_replacement", "tas_multiple_node_failures"):
        plain = f"Evicted because node(s) failed: {g['nodes']}; requeued."
        details["nodes"] = [n.strip() for n in g["nodes"].split(",")]
    elif message_id == "pods_ready_messages":
        pods = g["pods"]
        if pods.startswith("All pods"):
            code, plain = "running", "All pods are running."
        else:
            code = "starting"
            plain = (
                "Admitted; pods are starting." if pods.startswith("Not all") else "A pod failed; waiting for recovery."
            )
    elif message_id == "admitted_condition_messages":
        text = g["admitted"]
        if text == "The workload is admitted":
            code, plain = "admitted", "Admitted."
        elif text.startswith("The workload has no reservation"):
            # no quota yet: the QuotaReserved=False message beside it says why; this one only says "not yet"
            code = reason_hint(reason) or HIGHER_PRIORITY_AHEAD
            plain = "Not admitted yet: no quota is reserved" + (
                " and its admission checks are not ready." if "checks" in text else "."
            )
        else:
            code, plain = AWAITING_PROVISIONING, "Quota is reserved; waiting for capacity to be provisioned."
    elif message_id == "quota_reserved_true":
        code, plain = "admitted", f"Quota reserved in {g.get('clusterqueue') or g.get('admitted_by')}."
    elif message_id == "admission_check_state_messages":
        plain = "Waiting for capacity to be provisioned" + (f": {g['detail']}." if g.get("detail") else ".")
    elif message_id == "cluster_queue_active_condition":
        if message.startswith(("Can admit", "Can submit")):
            code, plain = "", "The queue is active."
        else:
            code = MISCONFIGURED
            plain = "The queue cannot admit jobs" + (f": {g['causes']}." if g.get("causes") else ".")
    elif message_id == "job_events":
        if g.get("wpc"):
            code = MISCONFIGURED
            plain = f"The priority class {g['wpc']} does not exist in the cluster: an admin must create it."
        else:
            code, plain = "", message
    return Translation(code if code is not None else "", plain, message, (message_id,), details)
