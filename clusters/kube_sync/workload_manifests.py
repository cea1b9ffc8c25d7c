"""One manifest builder per workload kind (pools.workload_kinds): what the portal creates for a submission.

Every kind's top-level object carries Kueue's queue-name label (and the priority-class label), the portal's job-id
label and, per pod set of :func:`queues.pod_sets.job_pod_sets`, a pod template built by
:mod:`clusters.kube_sync.pod_templates` (requests, the class's placement, the topology rule, checkpoints). The
kinds Kueue admits by suspension are created suspended (batch Job, JobSet, PyTorchJob, RayJob); the ones it admits
by gating their pods (a session's Pod, an inference Deployment, a LeaderWorkerSet) are created with the queue
label only: Kueue's webhook gates their pods until the Workload is admitted. Pure functions of the portal's rows.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from clusters.kube_sync.api import (
    DEPLOYMENTS,
    JOBS,
    JOBSETS,
    LEADER_WORKER_SETS,
    PODS,
    PYTORCH_JOBS,
    RAY_JOBS,
    Resource,
)
from clusters.kube_sync.batch_manifest import batch_job_spec, job_manifest
from clusters.kube_sync.dra_claims import claim_template, dra_request
from clusters.kube_sync.labels import ACCESS_ANNOTATION, JOB_ID_LABEL
from clusters.kube_sync.pod_templates import ManifestSettings, job_metadata, pod_template
from pools.workload_kinds import WorkloadKind
from queues.models import Job
from queues.pod_sets import SESSION_PORT, PodSetShape, job_pod_sets, session_access

#: The resource of each kind's top-level object.
KIND_RESOURCES: dict[str, Resource] = {
    WorkloadKind.BATCH: JOBS,
    WorkloadKind.JOBSET: JOBSETS,
    WorkloadKind.PYTORCHJOB: PYTORCH_JOBS,
    WorkloadKind.RAYJOB: RAY_JOBS,
    WorkloadKind.SESSION: PODS,
    WorkloadKind.INFERENCE: DEPLOYMENTS,
    WorkloadKind.INFERENCE_LWS: LEADER_WORKER_SETS,
}


class ManifestError(ValueError):
    """The job cannot be expressed as its kind's object (the submission lacks something the kind needs)."""


def kind_resource(kind: str) -> Resource:
    """The API resource of a kind's top-level object."""
    return KIND_RESOURCES[kind]


def _split(job: Job) -> tuple[list[PodSetShape], PodSetShape]:
    shapes = list(job_pod_sets(job))
    return shapes[:-1], shapes[-1]


def _object(resource: Resource, job: Job, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": job_metadata(job), "spec": spec}


def jobset_manifest(job: Job, settings: ManifestSettings) -> dict[str, Any]:
    """A suspended JobSet: one replicated Job per pod set (its pods all at once), Kueue admitting them together."""
    replicated = [
        {
            "name": ps.name,
            "replicas": 1,
            "template": {
                "metadata": {"labels": {JOB_ID_LABEL: str(job.pk)}},
                "spec": batch_job_spec(job, ps, settings.pod, backoff_limit=settings.backoff_limit),
            },
        }
        for ps in job_pod_sets(job)
    ]
    spec: dict[str, Any] = {"suspend": True, "network": {"enableDNSHostnames": True}, "replicatedJobs": replicated}
    if settings.ttl_seconds:
        spec["ttlSecondsAfterFinished"] = settings.ttl_seconds
    return _object(JOBSETS, job, spec)


def pytorchjob_manifest(job: Job, settings: ManifestSettings) -> dict[str, Any]:
    """A suspended PyTorchJob: the Master replica and the Workers (the training operator wants a container
    named ``pytorch``)."""
    replicas = {
        ps.name.capitalize(): {
            "replicas": ps.count,
            "restartPolicy": "Never",
            "template": pod_template(job, ps, settings.pod, container_name="pytorch"),
        }
        for ps in job_pod_sets(job)
    }
    run_policy: dict[str, Any] = {"suspend": True, "backoffLimit": settings.backoff_limit, "cleanPodPolicy": "None"}
    if job.max_runtime_seconds:
        run_policy["activeDeadlineSeconds"] = job.max_runtime_seconds
    if settings.ttl_seconds:
        run_policy["ttlSecondsAfterFinished"] = settings.ttl_seconds
    return _object(PYTORCH_JOBS, job, {"pytorchReplicaSpecs": replicas, "runPolicy": run_policy})


def rayjob_manifest(job: Job, settings: ManifestSettings) -> dict[str, Any]:
    """A suspended RayJob: a head group and one worker group of fixed size, the job's command as the entrypoint,
    submitted over HTTP (no submitter pod: Kueue's pod sets are the head and the workers) and the Ray cluster
    shut down when the job ends."""
    entrypoint = shlex.join([*(job.command or []), *(job.args or [])])
    if not entrypoint:
        raise ManifestError("A Ray job needs a command: it is the RayJob's entrypoint.")
    companions, primary = _split(job)
    head = companions[0]
    ray_ports = (("gcs", 6379), ("dashboard", 8265), ("client", 10001))
    workers = {
        "groupName": primary.name,
        "replicas": primary.count,
        "minReplicas": primary.count,
        "maxReplicas": primary.count,
        "rayStartParams": {},
        "template": pod_template(job, primary, settings.pod, container_name="ray-worker", run_command=False),
    }
    spec: dict[str, Any] = {
        "suspend": True,
        "entrypoint": entrypoint,
        "submissionMode": "HTTPMode",
        "shutdownAfterJobFinishes": True,
        "rayClusterSpec": {
            "headGroupSpec": {
                "rayStartParams": {},
                "template": pod_template(
                    job, head, settings.pod, container_name="ray-head", run_command=False, ports=ray_ports
                ),
            },
            "workerGroupSpecs": [workers],
        },
    }
    if job.max_runtime_seconds:
        spec["activeDeadlineSeconds"] = job.max_runtime_seconds
    if settings.ttl_seconds:
        spec["ttlSecondsAfterFinished"] = settings.ttl_seconds
    return _object(RAY_JOBS, job, spec)


def session_manifest(job: Job, settings: ManifestSettings) -> dict[str, Any]:
    """A development session: one plain Pod under Kueue's pod integration (its webhook gates the pod until the
    Workload is admitted), serving the notebook on :data:`SESSION_PORT`, restarted until stopped."""
    _, primary = _split(job)
    template = pod_template(job, primary, settings.pod, restart_policy="Always", ports=(("http", SESSION_PORT),))
    meta = job_metadata(job)
    meta["labels"] = {**template["metadata"]["labels"], **meta["labels"]}
    access = session_access(job, ingress_domain=settings.session_ingress_domain)
    meta["annotations"] = {
        **template["metadata"]["annotations"],
        **meta["annotations"],
        ACCESS_ANNOTATION: json.dumps(access, sort_keys=True),
    }
    return {"apiVersion": PODS.api_version, "kind": PODS.kind, "metadata": meta, "spec": template["spec"]}


def inference_manifest(job: Job, settings: ManifestSettings) -> dict[str, Any]:
    """An inference service: a Deployment of ``pod_count`` replicas under Kueue's deployment integration (its
    webhook copies the queue label onto the pods and gates them until each replica's Workload is admitted)."""
    _, primary = _split(job)
    spec = {
        "replicas": primary.count,
        "selector": {"matchLabels": {JOB_ID_LABEL: str(job.pk)}},
        "template": pod_template(job, primary, settings.pod, restart_policy="Always"),
    }
    return _object(DEPLOYMENTS, job, spec)


def lws_manifest(job: Job, settings: ManifestSettings) -> dict[str, Any]:
    """A multi-node inference service: one LeaderWorkerSet group (a leader and ``pod_count`` workers), restarted
    as a group, under Kueue's LeaderWorkerSet integration."""
    companions, primary = _split(job)
    leader = companions[0]
    spec = {
        "replicas": 1,
        "startupPolicy": "LeaderCreated",
        "leaderWorkerTemplate": {
            "size": 1 + primary.count,
            "restartPolicy": "RecreateGroupOnPodRestart",
            "leaderTemplate": pod_template(job, leader, settings.pod, restart_policy="Always"),
            "workerTemplate": pod_template(job, primary, settings.pod, restart_policy="Always"),
        },
    }
    return _object(LEADER_WORKER_SETS, job, spec)


def workload_manifest(job: Job, settings: ManifestSettings) -> dict[str, Any]:
    """The object the portal creates for a job of any kind (ManifestError when the job cannot be one); on a
    cluster whose devices of the class are DRA devices, its pod sets claim them (:func:`claim_templates`)."""
    settings = replace(settings, pod=replace(settings.pod, dra=dra_request(job)))
    builders: dict[str, Callable[[Job, ManifestSettings], dict]] = {
        WorkloadKind.BATCH: job_manifest,
        WorkloadKind.JOBSET: jobset_manifest,
        WorkloadKind.PYTORCHJOB: pytorchjob_manifest,
        WorkloadKind.RAYJOB: rayjob_manifest,
        WorkloadKind.SESSION: session_manifest,
        WorkloadKind.INFERENCE: inference_manifest,
        WorkloadKind.INFERENCE_LWS: lws_manifest,
    }
    return builders[job.kind](job, settings)


def claim_templates(job: Job, owner: dict[str, Any]) -> list[dict[str, Any]]:
    """The ResourceClaimTemplates the job's pod sets with devices reference, owned by the job's created object
    (none where the class's devices are extended resources)."""
    request = dra_request(job)
    if request is None:
        return []
    return [claim_template(job, ps, request, owner) for ps in job_pod_sets(job) if ps.devices_per_pod]
