"""Compact forms of the cluster objects the portal keeps per job, and the times it reads from them.

Only what the job state machine and the pages need is kept (conditions, admission, nodes, times); managed
fields, pod specs and images are dropped, so a snapshot of a job with its Workload and Pods stays small.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from clusters.kube_sync.manifests import JOB_ID_LABEL, JOB_UID_LABEL

CONDITION_KEYS = ("type", "status", "reason", "message", "lastTransitionTime")


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp as an aware datetime (None when absent or unreadable)."""
    if not value or not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _conditions(raw: Any) -> list[dict[str, Any]]:
    return [{k: c.get(k) for k in CONDITION_KEYS if c.get(k) is not None} for c in raw or [] if isinstance(c, dict)]


def _meta(obj: dict, *labels: str) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    out = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if k in meta}
    if meta.get("deletionTimestamp"):
        out["deletionTimestamp"] = meta["deletionTimestamp"]
    kept = {k: v for k, v in (meta.get("labels") or {}).items() if k in labels}
    if kept:
        out["labels"] = kept
    return out


def compact_workload(obj: dict) -> dict[str, Any]:
    """A Workload reduced to what the state machine and the wait reason read."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    meta = _meta(obj, JOB_UID_LABEL)
    owners = [
        {k: o.get(k) for k in ("kind", "name", "uid")} for o in (obj.get("metadata") or {}).get("ownerReferences") or []
    ]
    if owners:
        meta["ownerReferences"] = owners
    out_spec: dict[str, Any] = {
        "queueName": spec.get("queueName", ""),
        "podSets": [{"name": p.get("name"), "count": p.get("count", 1)} for p in spec.get("podSets") or []],
    }
    if "active" in spec:
        out_spec["active"] = spec["active"]
    if "priority" in spec:
        out_spec["priority"] = spec["priority"]
    out_status: dict[str, Any] = {"conditions": _conditions(status.get("conditions"))}
    for key in ("admission", "requeueState", "unhealthyNodes", "schedulingStats", "reclaimablePods"):
        if status.get(key):
            out_status[key] = status[key]
    if status.get("admissionChecks"):
        out_status["admissionChecks"] = [
            {k: c.get(k) for k in ("name", "state", "message", "lastTransitionTime")} for c in status["admissionChecks"]
        ]
    return {"metadata": meta, "spec": out_spec, "status": out_status}


def compact_batch_job(obj: dict) -> dict[str, Any]:
    """A batch/v1 Job reduced to its suspension, counts, times and conditions."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    return {
        "metadata": _meta(obj, JOB_ID_LABEL),
        "annotations": {
            k: v
            for k, v in ((obj.get("metadata") or {}).get("annotations") or {}).items()
            if k.startswith("gpu-pool-portal.io/checkpoint-done")
        },
        "spec": {k: spec.get(k) for k in ("suspend", "parallelism", "completions") if k in spec},
        "status": {
            **{
                k: status[k]
                for k in ("active", "ready", "succeeded", "failed", "startTime", "completionTime", "terminating")
                if k in status
            },
            "conditions": _conditions(status.get("conditions")),
        },
    }


def compact_pod(obj: dict) -> dict[str, Any]:
    """A Pod reduced to its node, phase, readiness, restarts, times and scheduling verdict."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}
    statuses = status.get("containerStatuses") or []
    started = [s.get("state", {}).get("running", {}).get("startedAt") for s in statuses]
    finished = [s.get("state", {}).get("terminated", {}).get("finishedAt") for s in statuses]
    out: dict[str, Any] = {
        "uid": meta.get("uid", ""),
        "rv": meta.get("resourceVersion", ""),
        "node": spec.get("nodeName", ""),
        "phase": status.get("phase", ""),
        "restarts": sum(int(s.get("restartCount") or 0) for s in statuses),
        "ready": (conditions.get("Ready") or {}).get("status") == "True",
        "index": (meta.get("annotations") or {}).get("batch.kubernetes.io/job-completion-index"),
        "created": meta.get("creationTimestamp"),
    }
    if status.get("startTime"):
        out["startTime"] = status["startTime"]
    if any(started):
        out["runningSince"] = min(s for s in started if s)
    if finished and all(finished):
        out["finishedAt"] = max(finished)
    if meta.get("deletionTimestamp"):
        out["deletionTimestamp"] = meta["deletionTimestamp"]
    scheduled = conditions.get("PodScheduled")
    if scheduled and scheduled.get("status") == "False":
        out["unschedulable"] = {k: scheduled.get(k) for k in ("reason", "message", "lastTransitionTime")}
    claims = status.get("resourceClaimStatuses") or []
    if claims:
        out["claims"] = [c.get("resourceClaimName") for c in claims if c.get("resourceClaimName")]
    return out


def pod_is_live(pod: dict) -> bool:
    """A pod that still holds its node (not deleted, not finished)."""
    return (
        not pod.get("deleted") and not pod.get("deletionTimestamp") and pod.get("phase") not in ("Succeeded", "Failed")
    )


def pod_end(pod: dict) -> datetime | None:
    """When a pod stopped holding its devices: its containers' end, else its deletion time."""
    return (
        parse_time(pod.get("finishedAt"))
        or parse_time(pod.get("deletionTimestamp"))
        or parse_time(pod.get("deletedAt"))
    )


def job_id_of(obj: dict) -> int | None:
    """The portal job id a Job or Pod carries in its labels."""
    value = ((obj.get("metadata") or {}).get("labels") or {}).get(JOB_ID_LABEL)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def workload_owner(obj: dict) -> tuple[str, str] | None:
    """(namespace, Job name) of the batch Job that owns a Workload."""
    meta = obj.get("metadata") or {}
    for owner in meta.get("ownerReferences") or []:
        if owner.get("kind") == "Job" and owner.get("name"):
            return meta.get("namespace", ""), owner["name"]
    return None
