"""The suspended batch/v1 Job of a batch submission, and the JobSpec a JobSet's replicated jobs reuse."""

from __future__ import annotations

from typing import Any

from clusters.kube_sync.pod_templates import PodTimings, job_metadata, pod_template
from queues.models import Job
from queues.pod_sets import PodSetShape, job_pod_sets


def batch_job_spec(job: Job, pod_set: PodSetShape, timings: PodTimings, *, backoff_limit: int) -> dict[str, Any]:
    """A batch/v1 JobSpec running one pod set (all its pods at once, Indexed when more than one), not suspended:
    the caller suspends what Kueue admits (the Job itself, or the JobSet around it)."""
    spec: dict[str, Any] = {
        "parallelism": pod_set.count,
        "completions": pod_set.count,
        "backoffLimit": backoff_limit,
        # a pod lost to a node drain or failure is replaced without counting as a failure of the job
        "podFailurePolicy": {
            "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
        },
        "template": pod_template(job, pod_set, timings),
    }
    if pod_set.count > 1:
        spec["completionMode"] = "Indexed"
    if job.max_runtime_seconds:
        spec["activeDeadlineSeconds"] = job.max_runtime_seconds
    return spec


def job_manifest(job: Job, *, backoff_limit: int, ttl_seconds: int, grace_seconds: int, checkpoint_grace: int) -> dict:
    """The suspended batch/v1 Job for a portal job (Kueue admits it; the portal never unsuspends it itself)."""
    timings = PodTimings(grace_seconds=grace_seconds, checkpoint_grace=checkpoint_grace)
    spec = {"suspend": True, **batch_job_spec(job, job_pod_sets(job)[-1], timings, backoff_limit=backoff_limit)}
    if ttl_seconds:
        spec["ttlSecondsAfterFinished"] = ttl_seconds
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": job_metadata(job), "spec": spec}
