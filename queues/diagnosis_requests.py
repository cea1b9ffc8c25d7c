"""A job's stored diagnosis as a page shows it, and the refresh it asks for when the cluster's state moved on.

A page view reads the job's entry at the cluster's current state version (``diagnosis_store``: one indexed read).
When there is none, the state changed since the last refresh: the first view that notices asks for one refresh of
that version (``diagnosis_refresh_request``: the ``queues.diagnosis_refresh`` task; with Celery eager, as in
development and tests, it runs there and then) and, until it is stored, the view shows the last
stored entry, marked ``stale``. So a poll never runs the engine, whatever the queue, and a change is diagnosed
once, by the worker that keeps the cluster's engine input, not by every open page.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Q

from pools.state_version import state_version
from queues import tasks
from queues.diagnosis_store import StoredJobDiagnosis, stored_job_diagnosis
from queues.models import ClusterDiagnosis, Job

#: A refresh asked for and not stored after this long is asked for again (its worker may have died).
REQUEST_TIMEOUT = timedelta(minutes=1)


def diagnosis_refresh_request(cluster_id: int, *, version: int, now: datetime) -> bool:
    """Ask for a refresh of the cluster's stored diagnoses at ``version``, unless one was asked for it (or a later
    version) less than ``REQUEST_TIMEOUT`` ago. Returns whether this call asked."""
    asked = (
        ClusterDiagnosis.objects.filter(cluster_id=cluster_id)
        .filter(
            Q(requested_version__lt=version) | Q(requested_at__isnull=True) | Q(requested_at__lt=now - REQUEST_TIMEOUT)
        )
        .update(requested_version=version, requested_at=now)
    )
    if not asked:
        _, asked = ClusterDiagnosis.objects.get_or_create(
            cluster_id=cluster_id,
            defaults={"state_version": 0, "computed_at": now, "requested_version": version, "requested_at": now},
        )
    if asked:
        # Sent at once, not at commit: what it diagnoses is committed already (a version moves at commit), and a
        # page view runs outside a transaction anyway.
        tasks.diagnosis_refresh.delay(cluster_id)
    return bool(asked)


def job_stored_entry(job: Job, *, now: datetime) -> StoredJobDiagnosis | None:
    """The pending job's stored diagnosis at the current state version, else the last one stored (``stale``) after
    asking for a refresh; None when the job has none (not diagnosed yet, or not among the pending workloads)."""
    version = state_version(job.cluster_id)
    found = stored_job_diagnosis(job, version=version, now=now)
    if found is not None:
        return found
    diagnosis_refresh_request(job.cluster_id, version=version, now=now)
    return stored_job_diagnosis(job, version=version, now=now) or stored_job_diagnosis(
        job, version=version, now=now, stale=True
    )
