"""Services the cluster sync calls: the writes of jobs that come from what a cluster shows.

The transitions themselves are those of :mod:`queues.services` (``job_admit``, ``job_start``, ``job_finish``,
``job_preempt``, ``job_evict``, ``job_requeue``, ``job_set_wait_reason``). These add what only a cluster's sync
(the Kubernetes sync, the reconciler, the simulated cluster) needs: the row locks it takes before a transition,
the Kubernetes references of a job, a Kueue message the portal does not recognise, one wait reason for many
jobs at once, and the run time a checkpoint banked. No code outside ``queues`` writes a Job row.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from django.db import transaction
from django.db.models import QuerySet

from kernel.db import update_rows
from queues.models import Job, JobEvent
from queues.services import WAIT_FIELDS, WaitReasonBatch, job_set_wait_reason, record_event

BATCH = 500


def job_lock(*, job_id: int) -> Job:
    """The job with its row locked until the caller's transaction ends (taken before changing its state)."""
    return Job.objects.select_for_update().get(pk=job_id)


def jobs_locked(jobs: QuerySet[Job]) -> list[Job]:
    """The jobs of a queryset, their own rows locked (not the joined ones) and taken in pk order, the one order
    every writer of jobs locks in."""
    return list(jobs.select_for_update(of=("self",)).order_by("pk"))


def job_set_cluster_refs(job: Job, *, uid: str = "", workload_name: str = "") -> None:
    """Remember the Kubernetes uid of a job's batch Job and the name of its Workload (references, not state)."""
    jobs_set_cluster_refs([(job, uid, workload_name)])


def jobs_set_cluster_refs(changes: Iterable[tuple[Job, str, str]]) -> None:
    """Many jobs' references at once: ``[(job, uid, workload_name)]`` (empty strings leave a field as it is);
    one ``UPDATE`` per field and batch."""
    changes = list(changes)
    uids = [(job, uid) for job, uid, _ in changes if uid and job.k8s_uid != uid]
    names = [(job, name) for job, _, name in changes if name and job.workload_name != name]
    for field, pairs in (("k8s_uid", uids), ("workload_name", names)):
        for job, value in pairs:
            setattr(job, field, value)
        update_rows(Job, [job for job, _ in pairs], [field])


def job_set_unrecognised_wait(job: Job, *, text: str, details: Mapping, now: datetime) -> bool:
    """Show a Kueue message the portal does not recognise as the job's wait (no code), with a timeline note;
    nothing when it already shows it. Returns changed."""
    if job.wait_message == text and job.wait_reason == "" and job.wait_details.get("unrecognised"):
        return False
    details = {**details, "unrecognised": True}
    if job.wait_reason == "":
        job_set_wait_reason(job, code="", message=text, kueue_message=text, details=details, now=now)
    else:
        # job_set_wait_reason labels a change of code with a code of the closed set; "none" has no label there
        job.wait_reason, job.wait_message, job.kueue_message = "", text, text
        job.wait_details, job.wait_since = details, now
        job.save(update_fields=WAIT_FIELDS)
    record_event(
        job,
        JobEvent.Kind.NOTE,
        f"Kueue says (not recognised by the portal): {text}",
        at=now,
        details={"unrecognised": True, "kueueMessage": text},
    )
    return True


def jobs_set_wait_reason(
    *, job_ids: Iterable[int], code: str, message: str, details: Mapping | None = None, now: datetime
) -> int:
    """``job_set_wait_reason`` for many jobs given the same reason: locked and written per batch of 500, each in
    its own transaction (one ``UPDATE`` and one ``bulk_create`` per batch). Returns how many changed."""
    ids = sorted(set(job_ids))
    changed = 0
    for start in range(0, len(ids), BATCH):
        with transaction.atomic():
            batch = WaitReasonBatch()
            for job in jobs_locked(Job.objects.filter(pk__in=ids[start : start + BATCH])):
                batch.set_wait_reason(job, code=code, message=message, details=details, now=now)
            changed += batch.flush()
    return changed


def job_set_run_seconds_banked(job: Job, *, seconds: int) -> None:
    """Record the run time a written checkpoint saved (the job resumes from it; the simulated cluster counts it)."""
    job.run_seconds_banked = seconds
    job.save(update_fields=["run_seconds_banked"])
