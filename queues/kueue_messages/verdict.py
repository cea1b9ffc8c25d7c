"""A whole Workload read as the portal reads it: its state from all its conditions, and why it waits."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from queues.engine.wait_codes import AWAITING_PROVISIONING, HIGHER_PRIORITY_AHEAD, MISCONFIGURED, PREEMPTION_IN_PROGRESS

from .codes import UNRECOGNISED
from .context import MessageContext
from .translate import pods_unschedulable, translate


@dataclass(frozen=True)
class Verdict:
    """A Workload's state as the portal reads it, and its wait reason when it waits."""

    state: str  # pending | reserved | admitted | running | evicted | finished | deactivated
    code: str
    message: str
    kueue_message: str = ""
    since: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    ids: tuple[str, ...] = ()


def conditions_of(workload: Mapping) -> dict[str, dict]:
    """Conditions by type."""
    return {c.get("type", ""): c for c in ((workload.get("status") or {}).get("conditions") or [])}


def _true(conditions: Mapping[str, dict], kind: str) -> bool:
    return (conditions.get(kind) or {}).get("status") == "True"


def workload_verdict(
    workload: Mapping,
    *,
    context: MessageContext | None = None,
    pod_messages: Sequence[str] = (),
) -> Verdict:
    """Derive a Workload's state from all its conditions (SEMANTICS.md §7), never from one alone."""
    conditions = conditions_of(workload)
    spec = workload.get("spec") or {}
    status = workload.get("status") or {}
    if _true(conditions, "Finished"):
        return _finished(conditions["Finished"])
    evicted = conditions.get("Evicted") or {}
    if spec.get("active") is False:
        return _deactivated(conditions, context)
    if _true(conditions, "Evicted") and status.get("admission"):
        t = translate(evicted.get("message", ""), reason=evicted.get("reason", ""), context=context)
        return Verdict(
            "evicted",
            PREEMPTION_IN_PROGRESS if evicted.get("reason") == "Preempted" else t.code,
            t.message,
            t.kueue_message,
            evicted.get("lastTransitionTime", ""),
            {**t.details, "evictedReason": evicted.get("reason", "")},
            t.ids,
        )
    if _true(conditions, "Admitted"):
        return _admitted(conditions, context, pod_messages)
    if _true(conditions, "QuotaReserved"):
        return _reserved(conditions, status)
    quota = conditions.get("QuotaReserved")
    requeue = status.get("requeueState") or {}
    if quota is not None and quota.get("status") == "False":
        return _quota_not_reserved(quota, requeue, context, pod_messages)
    if _true(conditions, "Evicted") or (conditions.get("Requeued") or {}).get("status") == "False":
        source = evicted if evicted else conditions["Requeued"]
        t = translate(source.get("message", ""), reason=source.get("reason", ""), context=context)
        details = {**t.details, "evictedReason": source.get("reason", "")}
        if requeue.get("requeueAt"):
            details["requeueAt"] = requeue["requeueAt"]
        return Verdict(
            "pending", t.code, t.message, t.kueue_message, source.get("lastTransitionTime", ""), details, t.ids
        )
    queue = spec.get("queueName", "")
    return Verdict(
        "pending",
        HIGHER_PRIORITY_AHEAD,
        f"Queued in {queue or 'its queue'}; Kueue has not evaluated it yet.",
        "",
        (workload.get("metadata") or {}).get("creationTimestamp", ""),
        {"notEvaluated": True},
        ("pending_evaluation",),
    )


def _finished(finished: Mapping) -> Verdict:
    """Finished=True: succeeded or failed; a workload slice replaced by a resized one is neither."""
    if finished.get("reason") == "WorkloadSliceReplaced":
        t = translate(finished.get("message", ""), reason="WorkloadSliceReplaced")
        since = finished.get("lastTransitionTime", "")
        return Verdict("finished", "", t.message, t.kueue_message, since, t.details, t.ids)
    succeeded = finished.get("reason") == "Succeeded"
    return Verdict(
        "finished",
        "succeeded" if succeeded else "failed",
        finished.get("message") or finished.get("reason", ""),
        since=finished.get("lastTransitionTime", ""),
    )


def _deactivated(conditions: Mapping[str, dict], context: MessageContext | None) -> Verdict:
    """``spec.active: false``: stopped in the cluster, always an admin matter."""
    evicted = conditions.get("Evicted") or {}
    text = evicted.get("message") or (conditions.get("DeactivationTarget") or {}).get("message", "")
    t = translate(text or "The workload is deactivated", reason=evicted.get("reason", ""), context=context)
    code = t.code if t.code in (MISCONFIGURED, UNRECOGNISED) else MISCONFIGURED
    return Verdict(
        "deactivated",
        code,
        t.message,
        t.kueue_message,
        evicted.get("lastTransitionTime", ""),
        {**t.details, "evictedReason": evicted.get("reason", "")},
        t.ids,
    )


def _admitted(conditions: Mapping[str, dict], context: MessageContext | None, pod_messages: Sequence[str]) -> Verdict:
    """Admitted=True: running, starting, or its pods find no nodes."""
    admitted = conditions["Admitted"]
    pods_ready = conditions.get("PodsReady") or {}
    if pods_ready.get("status") == "True":
        return Verdict("running", "running", "All pods are running.", since=pods_ready.get("lastTransitionTime", ""))
    blocked = pods_unschedulable(pod_messages, context=context)
    if blocked is not None:
        return Verdict(
            "admitted",
            blocked.code,
            blocked.message,
            blocked.kueue_message,
            admitted.get("lastTransitionTime", ""),
            blocked.details,
            blocked.ids,
        )
    return Verdict("admitted", "admitted", "Admitted; pods are starting.", since=admitted.get("lastTransitionTime", ""))


#: An admission check's state → (code, how the sentence starts); the worst state present speaks.
CHECK_STATES = {
    "Rejected": (MISCONFIGURED, "Capacity provisioning was rejected, so Kueue stops this job"),
    "Retry": (AWAITING_PROVISIONING, "Capacity provisioning failed; Kueue releases the quota and tries again"),
    "Pending": (AWAITING_PROVISIONING, "Quota is reserved; waiting for capacity to be provisioned"),
    "Ready": (AWAITING_PROVISIONING, "Capacity is provisioned; Kueue admits the job next"),
}
CHECK_STATE_ORDER = ("Rejected", "Retry", "Pending", "Ready")


def _reserved(conditions: Mapping[str, dict], status: Mapping) -> Verdict:
    """QuotaReserved=True but not admitted: the admission checks (provisioning, MultiKueue) decide, worst first."""
    checks = [c for c in (status.get("admissionChecks") or []) if isinstance(c, Mapping)]
    states = [str(c.get("state") or "Pending") for c in checks]
    worst = min(states, key=lambda st: CHECK_STATE_ORDER.index(st) if st in CHECK_STATE_ORDER else 2, default="")
    speaking = [c for c, st in zip(checks, states, strict=True) if st == worst]
    code, head = CHECK_STATES.get(worst, CHECK_STATES["Pending"])
    named = ", ".join(
        f"{c.get('name')}: {c.get('message')}" if c.get("message") else str(c.get("name")) for c in speaking
    )
    text = "; ".join(f"{c.get('name')}: {c.get('message', '')}" for c in speaking) or (
        conditions.get("Admitted") or {}
    ).get("message", "")
    return Verdict(
        "reserved",
        code,
        head + (f" ({named})." if named else "."),
        text,
        conditions["QuotaReserved"].get("lastTransitionTime", ""),
        {
            "admissionChecks": [{k: c.get(k) for k in ("name", "state", "message")} for c in checks],
            "checkState": worst,
        },
        ("admission_check_state", f"admission_check_{worst.lower()}" if worst else "admission_check_none"),
    )


def _quota_not_reserved(
    quota: Mapping, requeue: Mapping, context: MessageContext | None, pod_messages: Sequence[str]
) -> Verdict:
    """QuotaReserved=False: Kueue's message says why, with the requeue backoff when there is one."""
    t = translate(quota.get("message", ""), reason=quota.get("reason", ""), context=context)
    if t.ids and t.ids[0] in ("pods_ready_timeout",) and pod_messages:
        blocked = pods_unschedulable(pod_messages, context=context)
        t = blocked or t
    details = dict(t.details)
    if requeue.get("requeueAt"):
        details["requeueAt"] = requeue["requeueAt"]
        details["requeueCount"] = requeue.get("count")
    message = t.message
    if requeue.get("requeueAt") and t.recognised:
        message += f" Kueue retries it after {requeue['requeueAt']}."
    return Verdict("pending", t.code, message, t.kueue_message, quota.get("lastTransitionTime", ""), details, t.ids)
