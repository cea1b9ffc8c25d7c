"""The suspended batch/v1 Job of a batch submission, and the JobSpec a JobSet's replicated jobs reuse."""

from __future__ import annotations

from typing import Any

from clusters.kube_sync.pod_templates import ManifestSettings, PodSettings, job_metadata, pod_template
from queues.models import Job
from queues.pod_sets import PodSetShape, job_pod_sets


def batch_job_spec(job: Job, pod_set: PodSetShape, settings: PodSettings, *, backoff_limit: int) -> dict[str, Any]:
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
        "template": pod_template(job, pod_set, settings),
    }
    if pod_set.count > 1:
        spec["completionMode"] = "Indexed"
    if job.max_runtime_seconds:
        spec["activeDeadlineSeconds"] = job.max_runtime_seconds
    return spec


def job_manifest(job: Job, settings: ManifestSettings) -> dict:
    """The suspended batch/v1 Job for a portal job (Kueue admits it; the portal never unsuspends it itself)."""
    primary = job_pod_sets(job)[-1]
    spec = {"suspend": True, **batch_job_spec(job, primary, settings.pod, backoff_limit=settings.backoff_limit)}
    if settings.ttl_seconds:
        spec["ttlSecondsAfterFinished"] = settings.ttl_seconds
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": job_metadata(job), "spec": spec}
