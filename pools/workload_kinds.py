"""The workload kinds a job can be, and what each one is made of: the one definition of that closed set.

A resource class says which kinds it allows (``ResourceClass.allowed_kinds``); a job has one kind
(``Job.kind``). Each kind is what one of Kueue's integrations admits: a batch/v1 Job, a JobSet, a Kubeflow
PyTorchJob, a KubeRay RayJob, a plain Pod (a development session), a Deployment or a LeaderWorkerSet (an
inference service). A job is made of *pod sets*, as a Kueue Workload is: the *primary* pod set carries the
job's ``pod_count`` and ``devices_per_pod`` (the workers, the replicas, the session's pod), and the kind's
*companion* pod sets (a launcher, a Ray head, a PyTorch master, an LWS leader) come before it, in the order
Kueue lists a workload's pod sets for that integration.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import models


class WorkloadKind(models.TextChoices):
    """What a job runs as on the cluster."""

    BATCH = "batch", "Batch job"
    JOBSET = "jobset", "Distributed training (JobSet)"
    PYTORCHJOB = "pytorchjob", "Distributed training (PyTorchJob)"
    RAYJOB = "rayjob", "Ray job"
    SESSION = "session", "Development session"
    INFERENCE = "inference", "Inference service"
    INFERENCE_LWS = "inference-lws", "Multi-node inference service (LeaderWorkerSet)"


@dataclass(frozen=True)
class CompanionPodSet:
    """A pod set a kind has besides its primary one, with its default shape."""

    name: str
    count: int = 1
    #: most pods it may have (a Ray head, a PyTorch master, a launcher, one leader per group: one)
    max_count: int = 1
    #: devices per pod when it does not run like a primary pod (a launcher or a Ray head: none)
    devices_per_pod: int = 0
    #: it runs what a primary pod runs and asks for as many devices (a PyTorch master, an LWS leader)
    devices_like_primary: bool = False
    #: per-pod requests of a device-less companion (one with devices gets the class's requests per device)
    cpu: str = "4"
    memory: str = "16Gi"


@dataclass(frozen=True)
class KindSpec:
    """What a workload kind is made of and how it lives."""

    kind: str
    #: the name of the pod set that carries ``pod_count`` x ``devices_per_pod``
    primary_pod_set: str
    #: pod sets before the primary one, in Kueue's order for the integration
    companions: tuple[CompanionPodSet, ...] = ()
    #: sessions and services run until stopped: no max runtime applies and no run "ends"
    runs_until_stopped: bool = False
    #: Kueue's ``integrations.frameworks`` entry that admits this kind
    kueue_framework: str = "batch/job"
    #: the Kubernetes kind of the object the job runs as (a Kubernetes event's involved object)
    object_kind: str = "Job"
    #: the image a submission without one gets (empty: the submitter must give one)
    default_image: str = ""
    #: what it is, its pod sets and how it ends, in the researcher's words (the submit form's help)
    summary: str = ""

    @property
    def label(self) -> str:
        """The kind in words."""
        return WorkloadKind(self.kind).label


KINDS: dict[str, KindSpec] = {
    WorkloadKind.BATCH: KindSpec(
        kind=WorkloadKind.BATCH,
        primary_pod_set="main",
        summary="One gang of pods that runs to completion (a Kubernetes Job).",
    ),
    WorkloadKind.JOBSET: KindSpec(
        kind=WorkloadKind.JOBSET,
        object_kind="JobSet",
        primary_pod_set="workers",
        companions=(CompanionPodSet(name="launcher"),),
        kueue_framework="jobset.x-k8s.io/jobset",
        summary=(
            "A launcher (no devices by default) and workers, admitted together as one JobSet; ends when the "
            "workers finish."
        ),
    ),
    WorkloadKind.PYTORCHJOB: KindSpec(
        kind=WorkloadKind.PYTORCHJOB,
        object_kind="PyTorchJob",
        primary_pod_set="worker",
        companions=(CompanionPodSet(name="master", devices_like_primary=True),),
        kueue_framework="kubeflow.org/pytorchjob",
        summary=(
            "A PyTorch master and workers, each with the same devices (a Kubeflow PyTorchJob); ends when the "
            "workers finish."
        ),
    ),
    WorkloadKind.RAYJOB: KindSpec(
        kind=WorkloadKind.RAYJOB,
        object_kind="RayJob",
        primary_pod_set="workers",
        companions=(CompanionPodSet(name="head"),),
        kueue_framework="ray.io/rayjob",
        summary=(
            "A Ray head (no devices by default) and GPU workers (a KubeRay RayJob); ends when the Ray job's "
            "entrypoint finishes."
        ),
    ),
    WorkloadKind.SESSION: KindSpec(
        kind=WorkloadKind.SESSION,
        object_kind="Pod",
        primary_pod_set="session",
        runs_until_stopped=True,
        kueue_framework="pod",
        default_image="quay.io/jupyter/pytorch-notebook:cuda12-latest",
        summary=(
            "A JupyterLab pod that runs until you stop it (or it stays idle past the class's idle window); the "
            "job page shows how to reach it."
        ),
    ),
    WorkloadKind.INFERENCE: KindSpec(
        kind=WorkloadKind.INFERENCE,
        object_kind="Deployment",
        primary_pod_set="replicas",
        runs_until_stopped=True,
        kueue_framework="deployment",
        summary="Model-server replicas (a Deployment) that hold their devices until you stop the service.",
    ),
    WorkloadKind.INFERENCE_LWS: KindSpec(
        kind=WorkloadKind.INFERENCE_LWS,
        object_kind="LeaderWorkerSet",
        primary_pod_set="workers",
        companions=(CompanionPodSet(name="leader", devices_like_primary=True),),
        runs_until_stopped=True,
        kueue_framework="leaderworkerset.x-k8s.io/leaderworkerset",
        summary=(
            "Multi-node serving: a leader and workers with the same devices (a LeaderWorkerSet), until you stop "
            "the service."
        ),
    ),
}
"""Every kind's spec, by kind."""


def kind_spec(kind: str) -> KindSpec:
    """The spec of ``kind``; KeyError for a kind that is not one of WorkloadKind's."""
    return KINDS[kind]


def default_allowed_kinds() -> list[str]:
    """What a class allows unless an admin says otherwise: batch jobs only."""
    return [WorkloadKind.BATCH.value]
