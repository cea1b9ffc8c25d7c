"""Submitting a portal job to its cluster as a suspended batch/v1 Job, and cancelling it."""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from clusters.kube_sync.api import JOBS, KubeApi, KubeConflict, KubeNotFound, KubeRejected
from clusters.kube_sync.conf import kube_setting
from clusters.kube_sync.manifests import job_manifest
from clusters.kube_sync.observe import compact_batch_job, job_id_of
from clusters.models import KubeJobState
from kernel.db import update_rows
from queues import services as job_services
from queues.models import Job

log = logging.getLogger(__name__)


def job_set_cluster_refs(job: Job, *, uid: str = "", workload_name: str = "") -> None:
    """Remember the Kubernetes uid of a job's batch Job and the name of its Workload (references, not state)."""
    changes = {}
    if uid and job.k8s_uid != uid:
        changes["k8s_uid"] = uid
    if workload_name and job.workload_name != workload_name:
        changes["workload_name"] = workload_name
    if changes:
        Job.objects.filter(pk=job.pk).update(**changes)
        for name, value in changes.items():
            setattr(job, name, value)


def jobs_set_cluster_refs(changes: list[tuple[Job, str, str]]) -> None:
    """Many jobs' references at once: ``[(job, uid, workload_name)]`` (empty strings leave a field as it is)."""
    uids = [(job, uid) for job, uid, _ in changes if uid and job.k8s_uid != uid]
    names = [(job, name) for job, _, name in changes if name and job.workload_name != name]
    for field, pairs in (("k8s_uid", uids), ("workload_name", names)):
        for job, value in pairs:
            setattr(job, field, value)
        update_rows(Job, [job for job, _ in pairs], [field])


def _manifest(job: Job) -> dict:
    return job_manifest(
        job,
        backoff_limit=int(kube_setting("KUBE_JOB_BACKOFF_LIMIT")),
        ttl_seconds=int(kube_setting("KUBE_JOB_TTL_SECONDS_AFTER_FINISHED")),
        grace_seconds=int(kube_setting("KUBE_TERMINATION_GRACE_SECONDS")),
        checkpoint_grace=int(kube_setting("KUBE_CHECKPOINT_GRACE_SECONDS")),
    )


def _job(job_id: int) -> Job:
    return (
        Job.objects.select_related("team", "owner", "resource_class", "priority_class", "cluster")
        .prefetch_related("resource_class__flavor_links__flavor")
        .get(pk=job_id)
    )


def kube_job_create(*, job_id: int, api: KubeApi, now: datetime | None = None) -> str:
    """Create the job's suspended batch Job (idempotent: a retry finds its own Job); returns what happened.

    Transient failures raise :class:`~clusters.kube_sync.api.KubeUnavailable` for the task to retry. A rejected
    Job fails the portal job with the cluster's reason; a missing namespace or a refusal leaves it pending with
    a ``misconfigured`` reason (the reconciler submits it again once an admin fixed the queue).
    """
    now = now or timezone.now()
    job = _job(job_id)
    if job.is_final:
        return "final"
    if job.k8s_uid:
        return "exists"
    manifest = _manifest(job)
    try:
        created = api.create(JOBS, manifest)
    except KubeConflict as exc:
        if not exc.already_exists:
            raise
        created = api.get(JOBS, name=job.k8s_name, namespace=job.k8s_namespace)
        if job_id_of(created) != job.pk:
            with transaction.atomic():
                job = Job.objects.select_for_update().get(pk=job.pk)
                job_services.job_finish(
                    job,
                    state=Job.State.FAILED,
                    now=now,
                    message=f"A Kubernetes Job named {job.k8s_namespace}/{job.k8s_name} already exists and is not "
                    "this job's; nothing was submitted.",
                )
            return "name-taken"
    except (KubeRejected, KubeNotFound) as exc:
        with transaction.atomic():
            job = Job.objects.select_for_update().get(pk=job.pk)
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
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)
        job_set_cluster_refs(job, uid=created["metadata"]["uid"])
        state, made = KubeJobState.objects.get_or_create(
            job=job, defaults={"cluster": job.cluster, "batch_job": compact_batch_job(created), "observed_at": now}
        )
        if not made and not state.batch_job:
            state.batch_job = compact_batch_job(created)
            state.save(update_fields=["batch_job"])
        if job.is_final:  # cancelled while the request was in flight
            transaction.on_commit(lambda: kube_job_delete(job_id=job.pk, api=api))
    return "created"


def kube_job_delete(*, job_id: int, api: KubeApi) -> bool:
    """Delete a job's batch Job (its Pods follow); returns whether something was deleted.

    Absent already is fine, and so is a 409 on the uid precondition: the name now belongs to another Job (the
    portal's is gone), which is left alone.
    """
    job = Job.objects.get(pk=job_id)
    if not job.k8s_name or not job.k8s_uid:
        return False
    try:
        api.delete(
            JOBS,
            name=job.k8s_name,
            namespace=job.k8s_namespace,
            propagation_policy=str(kube_setting("KUBE_DELETE_PROPAGATION")),
            uid=job.k8s_uid,
        )
    except KubeConflict as exc:
        log.info("job %s: %s/%s is another Job now (%s); not deleted", job.pk, job.k8s_namespace, job.k8s_name, exc)
        return False
    return True
