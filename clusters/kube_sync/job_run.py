"""A job's run as the cluster saw it: the last lines of its pods' logs and the events about it, read on demand.

Read while a person waits on the job page: one attempt per request with a short read timeout
(``KUBE_RUN_READ_TIMEOUT``), and the first unanswered request ends the read (KubeUnavailable) instead of
trying the next pod. Pods are found by the portal's job-id label, on every pod template of every workload kind;
events by ``involvedObject.name`` of the job's object (a Job, a JobSet, …), its Workload and each pod.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.utils.dateparse import parse_datetime

from clusters.kube_sync.api import EVENTS, PODS, KubeApi, KubeNotFound, KubeRejected, Obj
from clusters.kube_sync.conf import kube_setting
from clusters.kube_sync.labels import JOB_ID_LABEL
from queues.models import Job
from queues.ports import PodLog, RunEvent


def _timeout() -> float:
    return float(kube_setting("KUBE_RUN_READ_TIMEOUT"))


def job_pods(job: Job, *, api: KubeApi) -> list[Obj]:
    """The job's pods (oldest first, at most JOB_LOG_MAX_PODS), of every pod set, by the portal's job-id label."""
    if not job.k8s_name:
        return []
    page = api.list_page(
        PODS,
        namespace=job.k8s_namespace,
        label_selector=f"{JOB_ID_LABEL}={job.pk}",
        read_timeout=_timeout(),
        attempts=1,
    )
    pods = sorted(page.items, key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]))
    return pods[: int(kube_setting("JOB_LOG_MAX_PODS"))]


def _container(pod: Obj) -> str:
    containers = (pod.get("spec") or {}).get("containers") or []
    return containers[0].get("name", "") if containers else ""


def kube_job_logs(job: Job, *, api: KubeApi, tail_lines: int) -> list[PodLog]:
    """The last ``tail_lines`` lines of each of the job's pods; a pod whose container has not started says so."""
    out = []
    for pod in job_pods(job, api=api):
        name = pod["metadata"]["name"]
        node = (pod.get("spec") or {}).get("nodeName", "")
        try:
            text = api.pod_log(
                namespace=job.k8s_namespace,
                name=name,
                container=_container(pod),
                tail_lines=tail_lines,
                read_timeout=_timeout(),
            )
        except (KubeNotFound, KubeRejected) as exc:
            # 400 "container ... is waiting to start" / 404 pod gone: the API server's words, for this pod only.
            out.append(PodLog(pod=name, lines=[], node=node, note=str(exc.body.get("message") or exc.message)))
            continue
        out.append(PodLog(pod=name, lines=text.splitlines()[-tail_lines:], node=node))
    return out


def _when(event: Obj) -> datetime | None:
    raw = event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp")
    if not raw:
        raw = (event.get("metadata") or {}).get("creationTimestamp")
    return parse_datetime(raw) if raw else None


def kube_job_events(job: Job, *, api: KubeApi) -> list[RunEvent]:
    """Events whose involved object is the job's object, its Workload or one of its pods, oldest first."""
    if not job.k8s_name:
        return []
    names = [job.k8s_name]
    if job.workload_name:
        names.append(job.workload_name)
    names += [p["metadata"]["name"] for p in job_pods(job, api=api)]
    out = []
    seen: set[str] = set()
    for name in names:
        page = api.list_page(
            EVENTS,
            namespace=job.k8s_namespace,
            field_selector=f"involvedObject.name={name}",
            read_timeout=_timeout(),
            attempts=1,
        )
        for event in page.items:
            uid = (event.get("metadata") or {}).get("uid") or (event.get("metadata") or {}).get("name", "")
            if uid in seen:
                continue
            seen.add(uid)
            involved = event.get("involvedObject") or {}
            out.append(
                RunEvent(
                    at=_when(event),
                    type=str(event.get("type") or "Normal"),
                    reason=str(event.get("reason") or ""),
                    involved=f"{involved.get('kind', '')}/{involved.get('name', '')}",
                    message=str(event.get("message") or ""),
                    count=int(event.get("count") or 1),
                )
            )
    return sorted(out, key=lambda e: (e.at is None, e.at or datetime.min.replace(tzinfo=UTC), e.reason))
