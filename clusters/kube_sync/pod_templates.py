"""The pod template of one pod set of a job: what every workload kind's manifest is built from.

Requests per pod set come from :func:`queues.pod_sets.job_pod_sets`; the class's node affinity, its flavors'
tolerations, the job's topology rule and checkpoint settings apply to every pod set alike, so Kueue places all of
a job's pod sets under the same rule (gang) and every kind's manifest carries exactly what the batch Job does.
Pure functions of the portal's rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from clusters.kube_sync.dra_claims import CLAIM_NAME, DraRequest, claim_template_name
from clusters.kube_sync.labels import (
    CLASS_LABEL,
    JOB_ID_LABEL,
    MANAGED_BY,
    POD_SET_LABEL,
    PORTAL,
    PREFERRED_TOPOLOGY,
    PREFIX,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    REQUIRED_TOPOLOGY,
    TEAM_LABEL,
    managed_labels,
)
from pools.health.selectors import validation_pinning
from queues.class_facts import class_node_affinity
from queues.engine.model import DEGRADED_DEVICES_LABEL
from queues.models import Job
from queues.pod_sets import PodSetShape

#: Weight (1-100) of the preference for nodes without degraded devices, beside kube-scheduler's other scores.
DEGRADED_NODE_WEIGHT = 50


@dataclass(frozen=True)
class PodSettings:
    """What every pod template of a job reads: the backend's grace periods (``KUBE_*``) and, on a cluster whose
    devices of the job's class are DRA devices, their claim request."""

    grace_seconds: int
    checkpoint_grace: int
    dra: DraRequest | None = None


@dataclass(frozen=True)
class ManifestSettings:
    """The backend settings the manifest builders read (``KUBE_*``)."""

    backoff_limit: int
    ttl_seconds: int
    pod: PodSettings
    #: Sessions are reached at https://<name>.<domain>/ when set (an ingress controller serves the domain).
    session_ingress_domain: str = ""


def job_labels(job: Job) -> dict[str, str]:
    """Labels of a job's top-level object: the portal's, and Kueue's queue and priority class."""
    labels = managed_labels(
        **{
            JOB_ID_LABEL: str(job.pk),
            TEAM_LABEL: job.team.slug,
            CLASS_LABEL: job.resource_class.slug,
            QUEUE_LABEL: job.team.local_queue_name,
        }
    )
    if job.priority_class is not None:
        labels[PRIORITY_LABEL] = job.priority_class.name
    return labels


def job_annotations(job: Job) -> dict[str, str]:
    """Annotations of a job's top-level object: checkpoint settings and the owner."""
    annotations, _ = checkpoint_settings(job)
    annotations[f"{PREFIX}/owner"] = job.owner.get_username()
    return annotations


def job_metadata(job: Job) -> dict[str, Any]:
    """``metadata`` of a job's top-level object."""
    return {
        "name": job.k8s_name,
        "namespace": job.k8s_namespace or job.team.namespace,
        "labels": job_labels(job),
        "annotations": job_annotations(job),
    }


def requests(job: Job, pod_set: PodSetShape) -> dict[str, str]:
    """Requests of one pod of the pod set: the class's device resource (when it has devices), cpu and memory."""
    out = {job.resource_class.resource_name: str(pod_set.devices_per_pod)} if pod_set.devices_per_pod else {}
    return {**out, "cpu": pod_set.cpu, "memory": pod_set.memory}


def affinity(job: Job, *, pinned: bool) -> dict[str, Any] | None:
    """Required node affinity that confines the job to its class's flavors (Kueue skips the others), and a
    preference for nodes without degraded devices (not for a burn-in job pinned to its node)."""
    terms = []
    for term in class_node_affinity(job):
        exprs = [{"key": r.key, "operator": r.operator, "values": list(r.values)} for r in term.match_expressions]
        if exprs:
            terms.append({"matchExpressions": exprs})
    node_affinity: dict[str, Any] = {}
    if terms:
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    if not pinned:
        away = {"key": DEGRADED_DEVICES_LABEL, "operator": "DoesNotExist"}
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": DEGRADED_NODE_WEIGHT, "preference": {"matchExpressions": [away]}}
        ]
    return {"nodeAffinity": node_affinity} if node_affinity else None


def tolerations(job: Job) -> list[dict[str, str]]:
    """Tolerations of the class's flavors' node taints (else Kueue skips those flavors: "untolerated taint")."""
    out: list[dict[str, str]] = []
    for link in job.resource_class.flavor_links.all():
        for taint in link.flavor.node_taints or []:
            tol = {"key": taint.get("key", ""), "operator": "Equal", "value": taint.get("value", "") or ""}
            if taint.get("effect"):
                tol["effect"] = taint["effect"]
            if not tol["value"]:
                tol = {
                    "key": tol["key"],
                    "operator": "Exists",
                    **({"effect": taint["effect"]} if "effect" in taint else {}),
                }
            if tol not in out:
                out.append(tol)
    return out


def checkpoint_settings(job: Job) -> tuple[dict[str, str], list[dict[str, str]]]:
    """Checkpoint settings as annotations (for people and controllers) and env (for the program)."""
    annotations: dict[str, str] = {}
    env: list[dict[str, str]] = []
    if job.checkpoint_path:
        annotations[f"{PREFIX}/checkpoint-path"] = job.checkpoint_path
        env.append({"name": "PORTAL_CHECKPOINT_PATH", "value": job.checkpoint_path})
    if job.checkpoint_signal:
        annotations[f"{PREFIX}/checkpoint-signal"] = job.checkpoint_signal
        env.append({"name": "PORTAL_CHECKPOINT_SIGNAL", "value": job.checkpoint_signal})
    if job.checkpoint_command:
        annotations[f"{PREFIX}/checkpoint-command"] = json.dumps(list(job.checkpoint_command))
    if job.checkpoint_interval_seconds:
        annotations[f"{PREFIX}/checkpoint-interval-seconds"] = str(job.checkpoint_interval_seconds)
        env.append({"name": "PORTAL_CHECKPOINT_INTERVAL_SECONDS", "value": str(job.checkpoint_interval_seconds)})
    return annotations, env


def pod_template(
    job: Job,
    pod_set: PodSetShape,
    settings: PodSettings,
    *,
    restart_policy: str = "Never",
    container_name: str = "main",
    run_command: bool = True,
    ports: tuple[tuple[str, int], ...] = (),
) -> dict[str, Any]:
    """The PodTemplateSpec of one pod set: requests, the class's placement, the topology rule, checkpoints.

    ``run_command``: the container runs the job's command and args (a Ray pod runs the image's own, the job's
    command being the RayJob's entrypoint). ``ports``: (name, port) the container serves.
    """
    pod_labels = {JOB_ID_LABEL: str(job.pk), TEAM_LABEL: job.team.slug, MANAGED_BY: PORTAL, POD_SET_LABEL: pod_set.name}
    annotations, checkpoint_env = checkpoint_settings(job)
    annotations[f"{PREFIX}/owner"] = job.owner.get_username()
    if job.topology_mode and job.topology_level:
        key = REQUIRED_TOPOLOGY if job.topology_mode == "required" else PREFERRED_TOPOLOGY
        annotations[key] = job.topology_level
    per_pod = requests(job, pod_set)
    claimed = settings.dra is not None and pod_set.devices_per_pod > 0
    if claimed:  # the devices come from the pod set's ResourceClaimTemplate, not as an extended resource
        per_pod.pop(job.resource_class.resource_name, None)
    env = [{"name": k, "value": str(v)} for k, v in sorted((job.env or {}).items())]
    env += [{"name": "PORTAL_JOB_ID", "value": str(job.pk)}, {"name": "PORTAL_POD_SET", "value": pod_set.name}]
    env += checkpoint_env
    limits = {k: v for k, v in per_pod.items() if k != "cpu"}
    container: dict[str, Any] = {
        "name": container_name,
        "image": job.image,
        "env": env,
        "resources": {"requests": per_pod, "limits": limits},
    }
    if claimed:
        container["resources"]["claims"] = [{"name": CLAIM_NAME}]
    if run_command and job.command:
        container["command"] = list(job.command)
    if run_command and job.args:
        container["args"] = list(job.args)
    if ports:
        container["ports"] = [{"name": name, "containerPort": port} for name, port in ports]
    if job.checkpoint_command:
        # Kueue suspends an evicted job by deleting its pods: the hook writes the checkpoint before SIGTERM.
        container["lifecycle"] = {"preStop": {"exec": {"command": list(job.checkpoint_command)}}}
    spec: dict[str, Any] = {
        "restartPolicy": restart_policy,
        "containers": [container],
        "terminationGracePeriodSeconds": settings.checkpoint_grace if job.checkpoint_path else settings.grace_seconds,
    }
    if claimed:
        spec["resourceClaims"] = [{"name": CLAIM_NAME, "resourceClaimTemplateName": claim_template_name(job, pod_set)}]
    pinning = validation_pinning(job_id=job.pk) if job.pk else None
    placement = affinity(job, pinned=pinning is not None)
    if placement:
        spec["affinity"] = placement
    tols = tolerations(job)
    if pinning is not None:
        # A repair ticket's burn-in job: on the ticket's node only, tolerating the portal's health taint there.
        spec["nodeSelector"] = {"kubernetes.io/hostname": pinning.node_name}
        tols += [dict(t) for t in pinning.tolerations if t not in tols]
    if tols:
        spec["tolerations"] = tols
    return {"metadata": {"labels": pod_labels, "annotations": annotations}, "spec": spec}
