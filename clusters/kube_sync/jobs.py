"""Submitting a portal job to its cluster as its kind's object (a suspended batch Job, JobSet, PyTorchJob or
RayJob; a session's Pod, an inference Deployment or LeaderWorkerSet), and cancelling it."""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from clusters.kube_sync.api import RESOURCE_CLAIM_TEMPLATES, KubeApi, KubeConflict, KubeNotFound, KubeRejected
from clusters.kube_sync.conf import kube_setting
from clusters.kube_sync.observe import compact_top, job_id_of
from clusters.kube_sync.pod_templates import ManifestSettings, PodSettings
from clusters.kube_sync.workload_manifests import ManifestError, claim_templates, kind_resource, workload_manifest
from clusters.models import KubeJobState
from queues import job_sync
from queues import services as job_services
from queues.models import Job
from queues.ports import SentObjects

log = logging.getLogger(__name__)


def manifest_settings() -> ManifestSettings:
    """The ``KUBE_*`` settings the manifest builders read, now."""
    return ManifestSettings(
        backoff_limit=int(kube_setting("KUBE_JOB_BACKOFF_LIMIT")),
        ttl_seconds=int(kube_setting("KUBE_JOB_TTL_SECONDS_AFTER_FINISHED")),
        pod=PodSettings(
            grace_seconds=int(kube_setting("KUBE_TERMINATION_GRACE_SECONDS")),
            checkpoint_grace=int(kube_setting("KUBE_CHECKPOINT_GRACE_SECONDS")),
        ),
        session_ingress_domain=str(kube_setting("KUBE_SESSION_INGRESS_DOMAIN")),
    )


def job_manifest_now(job: Job) -> dict:
    """What the portal sends for this job with the current settings (ManifestError when it cannot)."""
    return workload_manifest(job, manifest_settings())


#: The claim templates' owner uid before the cluster assigned one (their object is not created yet).
UID_NOT_YET_ASSIGNED = "(assigned by the cluster when the object is created)"


def job_objects_now(job: Job) -> list[dict]:
    """The job's top-level object and its DRA ResourceClaimTemplates, built as :func:`kube_job_create` builds them
    with the current settings (ManifestError when the job cannot be its kind's object)."""
    manifest = job_manifest_now(job)
    owner = {**manifest, "metadata": {**manifest["metadata"], "uid": job.k8s_uid or UID_NOT_YET_ASSIGNED}}
    return [manifest, *claim_templates(job, owner)]


def job_sent_objects(job: Job, *, simulated: bool) -> SentObjects:
    """What the portal sends (or, on a simulated cluster, would send) for the job, as the job page shows it."""
    try:
        objects = job_objects_now(job)
    except ManifestError as exc:
        return SentObjects(objects=[], simulated=simulated, error=str(exc))
    return SentObjects(objects=objects, simulated=simulated, created=bool(job.k8s_uid) and not simulated)


def job_for_manifest(job_id: int) -> Job:
    """The job with the rows the manifest builders read."""
    return (
        Job.objects.select_related("team", "owner", "resource_class", "priority_class", "cluster")
        .prefetch_related("resource_class__flavor_links__flavor")
        .get(pk=job_id)
    )


def kube_job_create(*, job_id: int, api: KubeApi, now: datetime | None = None) -> str:
    """Create the job's object of its kind (idempotent: a retry finds its own object); returns what happened.

    Transient failures raise :class:`~clusters.kube_sync.api.KubeUnavailable` for the task to retry. A rejected
    Job fails the portal job with the cluster's reason; a missing namespace or a refusal leaves it pending with
    a ``misconfigured`` reason (the reconciler submits it again once an admin fixed the queue).
    """
    now = now or timezone.now()
    job = job_for_manifest(job_id)
    if job.is_final:
        return "final"
    if job.k8s_uid:
        return "exists"
    resource = kind_resource(job.kind)
    try:
        manifest = job_manifest_now(job)
    except ManifestError as exc:
        with transaction.atomic():
            job = job_sync.job_lock(job_id=job.pk)
            job_services.job_finish(job, state=Job.State.FAILED, now=now, message=f"Nothing was submitted: {exc}")
        return "rejected"
    try:
        created = api.create(resource, manifest)
    except KubeConflict as exc:
        if not exc.already_exists:
            raise
        created = api.get(resource, name=job.k8s_name, namespace=job.k8s_namespace)
        if job_id_of(created) != job.pk:
            with transaction.atomic():
                job = job_sync.job_lock(job_id=job.pk)
                job_services.job_finish(
                    job,
                    state=Job.State.FAILED,
                    now=now,
                    message=f"A Kubernetes {resource.kind} named {job.k8s_namespace}/{job.k8s_name} already exists "
                    "and is not this job's; nothing was submitted.",
                )
            return "name-taken"
    except (KubeRejected, KubeNotFound) as exc:
        with transaction.atomic():
            job = job_sync.job_lock(job_id=job.pk)
            if exc.status == 422:
                job_services.job_finish(
                    job, state=Job.State.FAILED, now=now, message=f"The cluster rejected the job: {exc.message}"
                )
                return "rejected"
            job_services.job_set_wait_reason(
                job,
                code="misconfigured",
                message=f"The cluster refused the job ({exc.message}); an admin must fix the team's queue setup.",
                details={"status": exc.status},
                now=now,
            )
        return "refused"
    problem = _create_claim_templates(job, created, api=api)
    if problem:
        api.delete(
            resource,
            name=job.k8s_name,
            namespace=job.k8s_namespace,
            propagation_policy=str(kube_setting("KUBE_DELETE_PROPAGATION")),
            uid=created["metadata"]["uid"],
        )
        with transaction.atomic():
            job = job_sync.job_lock(job_id=job.pk)
            job_services.job_finish(job, state=Job.State.FAILED, now=now, message=problem)
        return "rejected"
    with transaction.atomic():
        job = job_sync.job_lock(job_id=job.pk)
        job_sync.job_set_cluster_refs(job, uid=created["metadata"]["uid"])
        state, made = KubeJobState.objects.get_or_create(
            job=job, defaults={"cluster": job.cluster, "batch_job": compact_top(created), "observed_at": now}
        )
        if not made and not state.batch_job:
            state.batch_job = compact_top(created)
            state.save(update_fields=["batch_job"])
        if job.is_final:  # cancelled while the request was in flight
            transaction.on_commit(lambda: kube_job_delete(job_id=job.pk, api=api))
    return "created"


def _create_claim_templates(job: Job, created: dict, *, api: KubeApi) -> str:
    """The ResourceClaimTemplates of a DRA job, owned by its created object (one already there is its own: a
    retry); what the cluster refused ("" when all are there). Transient failures propagate for the task to retry."""
    for template in claim_templates(job, created):
        try:
            api.create(RESOURCE_CLAIM_TEMPLATES, template)
        except KubeConflict as exc:
            if not exc.already_exists:
                raise
        except (KubeRejected, KubeNotFound) as exc:
            name = template["metadata"]["name"]
            return f"The cluster rejected the job's device claim {name}: {exc.message}; nothing runs."
    return ""


def kube_job_delete(*, job_id: int, api: KubeApi) -> bool:
    """Delete a job's object of its kind with ``KUBE_DELETE_PROPAGATION`` (its Jobs, Pods and Workload follow);
    returns whether something was deleted.

    Absent already is fine, and so is a 409 on the uid precondition: the name now belongs to another object (the
    portal's is gone), which is left alone.
    """
    job = Job.objects.get(pk=job_id)
    if not job.k8s_name or not job.k8s_uid:
        return False
    try:
        api.delete(
            kind_resource(job.kind),
            name=job.k8s_name,
            namespace=job.k8s_namespace,
            propagation_policy=str(kube_setting("KUBE_DELETE_PROPAGATION")),
            uid=job.k8s_uid,
        )
    except KubeConflict as exc:
        log.info("job %s: %s/%s is another Job now (%s); not deleted", job.pk, job.k8s_namespace, job.k8s_name, exc)
        return False
    return True
