"""Compact forms of the cluster objects the portal keeps per job, and the times it reads from them.

Only what the job state machine and the pages need is kept (conditions, admission, nodes, times); managed
fields, pod specs and images are dropped, so a snapshot of a job with its Workload and Pods stays small.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from clusters.kube_sync.labels import JOB_ID_LABEL, JOB_UID_LABEL, POD_SET_LABEL
from clusters.kube_sync.workload_manifests import kind_resource

CONDITION_KEYS = ("type", "status", "reason", "message", "lastTransitionTime")
#: The kinds of the portal's top-level objects (pools.workload_kinds): a Workload owned by one is a portal job's.
TOP_KINDS = frozenset({"Job", "JobSet", "PyTorchJob", "RayJob", "Pod", "Deployment", "LeaderWorkerSet"})


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


def _ended(kind: str, status: str, at: Any, reason: str, message: str) -> dict[str, Any]:
    """A batch-style ``Complete`` / ``Failed`` condition read from another kind's own status."""
    cond = {"type": kind, "status": status, "reason": reason, "message": message}
    if at:
        cond["lastTransitionTime"] = at
    return cond


def _kind_status(obj: dict) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(extra status fields, batch-style end conditions) of a workload kind's top-level object, from its own
    status: JobSet conditions Completed / Failed; PyTorchJob Succeeded / Failed; RayJob jobStatus and
    jobDeploymentStatus; a Pod's phase; a Deployment's or LeaderWorkerSet's ready replicas (they never end)."""
    kind, status = obj.get("kind", ""), obj.get("status") or {}
    conds = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}
    extra: dict[str, Any] = {}
    ended: list[dict[str, Any]] = []

    def true(name: str) -> dict | None:
        c = conds.get(name)
        return c if c and c.get("status") == "True" else None

    if kind in ("JobSet", "PyTorchJob"):
        done = true("Completed" if kind == "JobSet" else "Succeeded")
        failed = true("Failed")
        if done:
            ended.append(_ended("Complete", "True", done.get("lastTransitionTime"), done.get("reason", ""), ""))
        if failed:
            at, reason = failed.get("lastTransitionTime"), failed.get("reason", "")
            ended.append(_ended("Failed", "True", at, reason, failed.get("message", "")))
        for key in ("startTime", "completionTime", "replicaStatuses", "replicatedJobsStatus", "terminalState"):
            if key in status:
                extra[key] = status[key]
    elif kind == "RayJob":
        job_status, deployment = status.get("jobStatus", ""), status.get("jobDeploymentStatus", "")
        extra.update({k: status[k] for k in ("jobStatus", "jobDeploymentStatus", "startTime") if k in status})
        if "endTime" in status:
            extra["completionTime"] = status["endTime"]
        message = status.get("message", "")
        if job_status == "SUCCEEDED":
            ended.append(_ended("Complete", "True", status.get("endTime"), "SUCCEEDED", message))
        elif job_status in ("FAILED", "STOPPED") or deployment == "Failed":
            reason = job_status or deployment
            if "deadline" in message.lower():
                reason = "DeadlineExceeded"
            ended.append(_ended("Failed", "True", status.get("endTime"), reason, message or f"Ray job {reason}"))
    elif kind == "Pod":
        phase = status.get("phase", "")
        extra["phase"] = phase
        if "startTime" in status:
            extra["startTime"] = status["startTime"]
        finished = [
            (s.get("state") or {}).get("terminated", {}).get("finishedAt")
            for s in status.get("containerStatuses") or []
        ]
        at = max((f for f in finished if f), default=None)
        if phase == "Succeeded":
            ended.append(_ended("Complete", "True", at, "Succeeded", ""))
        elif phase == "Failed":
            ended.append(_ended("Failed", "True", at, status.get("reason", "Failed"), status.get("message", "")))
    elif kind in ("Deployment", "LeaderWorkerSet"):
        keys = ("replicas", "readyReplicas", "availableReplicas", "updatedReplicas")
        extra.update({k: status[k] for k in keys if k in status})
    return extra, ended


def compact_top(obj: dict) -> dict[str, Any]:
    """A job's top-level object of any kind reduced to what the state machine reads, in the batch Job's form: a
    batch Job as :func:`compact_batch_job`; another kind with its own status read into batch-style ``Complete`` /
    ``Failed`` conditions (beside its own conditions) and its suspension, times and replica counts."""
    if obj.get("kind", "Job") == "Job":
        return compact_batch_job(obj)
    spec = obj.get("spec") or {}
    suspend = spec.get("suspend", (spec.get("runPolicy") or {}).get("suspend"))
    extra, ended = _kind_status(obj)
    own = [c for c in _conditions((obj.get("status") or {}).get("conditions")) if c.get("type") not in ("Failed",)]
    return {
        "kind": obj["kind"],
        "metadata": _meta(obj, JOB_ID_LABEL),
        "annotations": {
            k: v
            for k, v in ((obj.get("metadata") or {}).get("annotations") or {}).items()
            if k.startswith("gpu-pool-portal.io/checkpoint-done")
        },
        "spec": {"suspend": suspend} if suspend is not None else {},
        "status": {**extra, "conditions": own + ended},
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
        "podSet": (meta.get("labels") or {}).get(POD_SET_LABEL, ""),
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


def is_top_object(job: Any, obj: dict) -> bool:
    """Whether ``obj`` is the job's own top-level object (its kind, namespace and name), not a child of it."""
    meta = obj.get("metadata") or {}
    return obj.get("kind", "Job") == kind_resource(job.kind).kind and (meta.get("namespace"), meta.get("name")) == (
        job.k8s_namespace,
        job.k8s_name,
    )


def job_id_of(obj: dict) -> int | None:
    """The portal job id a Job or Pod carries in its labels."""
    value = ((obj.get("metadata") or {}).get("labels") or {}).get(JOB_ID_LABEL)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def workload_owner(obj: dict) -> tuple[str, str] | None:
    """(namespace, name) of the object of a portal kind that owns a Workload (a batch Job, a JobSet, a Pod …).

    A Pod's name is given whole: the Workload of a Deployment's replica is owned by the replica's Pod, whose name
    starts with the Deployment's (see :func:`owner_candidates`).
    """
    meta = obj.get("metadata") or {}
    for owner in meta.get("ownerReferences") or []:
        if owner.get("kind") in TOP_KINDS and owner.get("name"):
            return meta.get("namespace", ""), owner["name"]
    return None


def owner_uid(obj: dict) -> str:
    """The uid of the portal-kind object that owns a Workload ("" when none)."""
    for owner in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("kind") in TOP_KINDS:
            return owner.get("uid", "")
    return ""


def owner_candidates(name: str) -> list[str]:
    """The names a job's top-level object may have when ``name`` is its own or one of its pods'
    (``<deployment>-<replicaset hash>-<suffix>``, ``<lws>-<group>-<index>``): the name and its dash prefixes,
    longest first."""
    parts = name.split("-")
    return ["-".join(parts[:i]) for i in range(len(parts), 0, -1)]
