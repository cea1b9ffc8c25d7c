"""Protected work in a Kubernetes cluster: Kueue decides who is preempted, so the portal raises a protected job's
Workload priority while its protection holds and lowers it after (docs/admin.md, *Protected work*).

The mechanism is the one Kueue documents as always mutable: the job object's ``kueue.x-k8s.io/priority-class`` label
(Kueue copies the WorkloadPriorityClass's name and value onto the Workload). While a rule holds, the label names
``KUBE_PROTECTED_PRIORITY_CLASS``, a WorkloadPriorityClass the configuration push keeps one above every portal
priority; once none holds, the job's own class again (or no label). Limits, each documented: a queue with
``reclaimWithinCohort: Any`` disregards priority and may still reclaim a protected borrower (the engine models
exactly that: ``Protection.by_priority``); a change takes effect at the next sweep (``GUARANTEES_SWEEP_SECONDS``),
so a checkpoint window shorter than that may be missed (the class's grace is at least a minute); Kueue's preemption
gates (``spec.preemptionGates``, alpha) gate a workload's *own* preemptions, not its being preempted, so they do
not serve here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from clusters.kube_sync.api import KubeApi, KubeNotFound
from clusters.kube_sync.conf import kube_setting
from clusters.kube_sync.labels import PRIORITY_LABEL
from clusters.kube_sync.workload_manifests import kind_resource
from clusters.models import KubeJobState
from pools.models import Cluster, ResourceClass
from queues.engine.protection import RULE_TEXT, protected_until
from queues.models import Job, JobEvent, PriorityClass
from queues.protection import engine_protection
from queues.services import record_event

log = logging.getLogger(__name__)

#: Largest value a WorkloadPriorityClass may have (int32).
MAX_PRIORITY = 2**31 - 1


def protected_priority_class() -> str:
    """The name of the WorkloadPriorityClass a protected job's Workload is raised to."""
    return str(kube_setting("KUBE_PROTECTED_PRIORITY_CLASS"))


def protected_priority_value() -> int:
    """One above every priority class of the portal: no LowerPriority policy may preempt a protected job."""
    top = PriorityClass.objects.order_by("-value").values_list("value", flat=True).first()
    return min((top if top is not None else 0) + 1, MAX_PRIORITY)


def protection_offered() -> bool:
    """Whether any resource class offers protected work (only then is the protected priority class pushed)."""
    return ResourceClass.objects.exclude(
        protect_min_runtime_seconds__isnull=True,
        protect_min_runtime_max_seconds__isnull=True,
        protect_finishing_seconds__isnull=True,
        protect_finishing_max_seconds__isnull=True,
        protect_checkpoint_grace_seconds__isnull=True,
    ).exists()


@dataclass
class ProtectionReport:
    """What one sweep changed: jobs raised, lowered, and errors (a job whose object is gone is just forgotten)."""

    raised: list[int] = field(default_factory=list)
    lowered: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _patch_label(api: KubeApi, job: Job, value: str | None) -> None:
    """Set (or, with None, remove) the priority-class label of the job's object (JSON merge patch)."""
    api.patch(
        kind_resource(job.kind),
        name=job.k8s_name,
        namespace=job.k8s_namespace,
        body={"metadata": {"labels": {PRIORITY_LABEL: value}}},
    )


def kube_protection_sync(*, cluster: Cluster, api: KubeApi, now: datetime | None = None) -> ProtectionReport:
    """Raise the Kueue priority of the cluster's running jobs whose protection holds now, and lower it again for
    those whose protection ended (or that no longer run). Idempotent: a second run changes nothing."""
    now = now or timezone.now()
    report = ProtectionReport()
    states = (
        KubeJobState.objects.filter(cluster=cluster)
        .exclude(job__k8s_uid="")
        .filter(job__state__in=(Job.State.ADMITTED, Job.State.RUNNING))
        .select_related("job__resource_class", "job__priority_class")
    )
    raised_states = KubeJobState.objects.filter(cluster=cluster, protected_until__isnull=False).select_related(
        "job__priority_class"
    )
    seen: set[int] = set()
    for st in [*states, *raised_states]:
        if st.pk in seen:
            continue
        seen.add(st.pk)
        job = st.job
        held = None
        if job.state in (Job.State.ADMITTED, Job.State.RUNNING) and job.admitted_at is not None:
            protection = engine_protection(job)
            held = protected_until(protection, job.admitted_at.timestamp(), now.timestamp())
        try:
            if held is not None:
                until = datetime.fromtimestamp(held[0], tz=now.tzinfo)
                if st.protected_until is None:
                    _patch_label(api, job, protected_priority_class())
                    _raised(job, st, until=until, rule=held[1], now=now)
                    report.raised.append(job.pk)
                elif st.protected_until != until:
                    KubeJobState.objects.filter(pk=st.pk).update(protected_until=until)
            elif st.protected_until is not None:
                if job.state in (Job.State.ADMITTED, Job.State.RUNNING, Job.State.PENDING, Job.State.PREEMPTING):
                    _patch_label(api, job, job.priority_class.name if job.priority_class is not None else None)
                _lowered(job, st, now=now)
                report.lowered.append(job.pk)
        except KubeNotFound:
            KubeJobState.objects.filter(pk=st.pk).update(protected_until=None)  # its object is gone: nothing to lower
    return report


@transaction.atomic
def _raised(job: Job, st: KubeJobState, *, until: datetime, rule: str, now: datetime) -> None:
    """Record that the job's Workload priority was raised for its protection."""
    KubeJobState.objects.filter(pk=st.pk).update(protected_until=until)
    record_event(
        job,
        JobEvent.Kind.NOTE,
        f"Protected from preemption until {timezone.localtime(until):%H:%M} ({RULE_TEXT.get(rule, rule)}): its "
        f"Kueue priority is raised to {protected_priority_class()} while the protection holds.",
        at=now,
        details={"protection": "raised", "rule": rule, "until": until.isoformat()},
    )


@transaction.atomic
def _lowered(job: Job, st: KubeJobState, *, now: datetime) -> None:
    """Record that the job's Workload priority is its own again."""
    KubeJobState.objects.filter(pk=st.pk).update(protected_until=None)
    own = job.priority_class.name if job.priority_class is not None else "none"
    record_event(
        job,
        JobEvent.Kind.NOTE,
        f"Protection from preemption ended: its Kueue priority is its own again ({own}).",
        at=now,
        details={"protection": "lowered"},
    )
