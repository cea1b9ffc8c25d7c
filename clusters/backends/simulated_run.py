"""What a simulated job's pods "wrote" and the events a cluster would have recorded, from what the simulation did.

A simulated cluster has no containers, so the log is derived from the job's own record: its timeline (starts,
checkpoints, evictions, the end and its reason), its allocations (node and GPU indexes of each pod) and its
simulated runtime (progress lines at each tenth of the run). The same job at the same instant always gives the
same lines; a running job's log grows with the clock, as a real one would.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from pools.models import Allocation
from queues import services as job_services
from queues.models import Job, JobEvent
from queues.pod_sets import pod_names
from queues.ports import PodLog, RunEvent

K = JobEvent.Kind
#: Events that start a run of the pods, and those that end it.
RUN_STARTS = (K.STARTED, K.RESUMED)
RUN_ENDS = (K.REQUEUED, K.SUCCEEDED, K.FAILED, K.CANCELLED, K.TIMED_OUT, K.NODE_LOST)
#: Decisions to evict: the pods keep running (checkpointing, if they can) until the requeue stops them.
EVICTION_NOTICES = (K.PREEMPTED, K.EVICTED)
FINAL_KINDS = (K.SUCCEEDED, K.FAILED, K.CANCELLED, K.TIMED_OUT)
PROGRESS_STEPS = 10


def stamp(when: datetime) -> str:
    """The timestamp ``kubectl logs --timestamps`` puts before a line (UTC, seconds)."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Run:
    """One stretch of the pods running: from a start to an end event (or still running)."""

    start: datetime
    end_event: JobEvent | None = None
    checkpoints: list[JobEvent] = field(default_factory=list)
    #: Seconds of work already done when the run started (kept by a checkpoint).
    work_before: float = 0.0
    #: Why the pods are being evicted (the preemption's or queue stop's message), once decided.
    eviction: str = ""


def _runs(events: list[JobEvent]) -> list[_Run]:
    """The job's runs, each with its checkpoint events and what ended it."""
    runs: list[_Run] = []
    current: _Run | None = None
    carried = 0.0
    for event in events:
        if event.kind in RUN_STARTS:
            if current is not None:  # a start without an end: the previous run ended here
                runs.append(current)
            current = _Run(start=event.at, work_before=carried)
        elif current is None:
            continue
        elif event.kind in (K.CHECKPOINT_REQUESTED, K.CHECKPOINT_DONE):
            current.checkpoints.append(event)
        elif event.kind in EVICTION_NOTICES:
            current.eviction = current.eviction or event.message
        elif event.kind in RUN_ENDS:
            current.end_event = event
            kept = any(c.kind == K.CHECKPOINT_DONE for c in current.checkpoints)
            carried = current.work_before + (event.at - current.start).total_seconds() if kept else 0.0
            runs.append(current)
            current = None
    if current is not None:
        runs.append(current)
    return runs


def _pod_place(allocations: list[Allocation], pod: int, at: datetime) -> tuple[str, list[int]]:
    """Node name and GPU indexes pod ``pod`` held at ``at`` (the allocation open then)."""
    held = [
        a for a in allocations if a.pod_index == pod and a.started_at <= at and (a.ended_at is None or a.ended_at > at)
    ]
    if not held:
        return "", []
    return held[0].device.node.name, sorted(a.device.index for a in held if a.device.index is not None)


def _end_lines(job: Job, run: _Run, pod: int) -> list[str]:
    """What the container printed as its run ended, and its exit."""
    event = run.end_event
    if event is None:
        return []
    at = stamp(event.at)
    kind = event.kind
    if kind == K.SUCCEEDED:
        return [f"{at} Run complete.", f"{at} Container main terminated: exit code 0 (Completed)"]
    if kind == K.FAILED:
        if pod == 0:
            return [
                f"{at} Traceback (most recent call last):",
                f"{at} RuntimeError: simulated failure (the job was submitted to fail at the end of its run)",
                f"{at} Container main terminated: exit code 1 (Error)",
            ]
        return [
            f"{at} Received SIGTERM: pod 0 failed, the Job stops its other pods",
            f"{at} Container main terminated: exit code 143",
        ]
    if kind == K.TIMED_OUT:
        limit = timedelta(seconds=job.max_runtime_seconds or 0)
        return [
            f"{at} Killed at the job's maximum runtime of {limit} (DeadlineExceeded)",
            f"{at} Container main terminated: exit code 137",
        ]
    if kind == K.CANCELLED:
        return [f"{at} Received SIGTERM: the job was cancelled", f"{at} Container main terminated: exit code 143"]
    if kind == K.NODE_LOST:
        return [f"{at} (log ends: the node left the cluster)"]
    why = run.eviction or event.message
    return [f"{at} Received SIGTERM: evicted ({why})", f"{at} Container main terminated: exit code 143"]


def _run_lines(job: Job, run: _Run, pod: int, allocations: list[Allocation], *, now: datetime) -> list[str]:
    node, gpus = _pod_place(allocations, pod, run.start)
    at = stamp(run.start)
    where = f" on {node}" if node else ""
    devices = f" (GPU {', '.join(map(str, gpus))})" if gpus else ""
    lines = [f"{at} Container main started{where}{devices}, image {job.image}"]
    command = " ".join([*job.command, *job.args])
    if command:
        lines.append(f"{at} $ {command}")
    if run.work_before and job.checkpoint_path:
        lines.append(
            f"{at} Resuming from the checkpoint in {job.checkpoint_path} ({run.work_before:.0f} s of work kept)"
        )
    # Progress at each tenth of the simulated runtime reached while this run lasted.
    total = job_services.default_runtime(job).total_seconds()
    until = run.end_event.at if run.end_event is not None else now
    timed: list[tuple[datetime, str]] = []
    for step in range(1, PROGRESS_STEPS + 1):
        work = total * step / PROGRESS_STEPS
        when = run.start + timedelta(seconds=work - run.work_before)
        if work <= run.work_before or when > until:
            continue
        timed.append((when, f"{stamp(when)} progress {step * 100 // PROGRESS_STEPS}% ({work:.0f} of {total:.0f} s)"))
    for event in run.checkpoints:
        if event.kind == K.CHECKPOINT_REQUESTED:
            signal = job.checkpoint_signal or "SIGTERM"
            text = f"Received {signal}: writing a checkpoint to {job.checkpoint_path or 'the checkpoint path'}"
        else:
            text = f"Checkpoint written to {job.checkpoint_path or 'the checkpoint path'}"
        timed.append((event.at, f"{stamp(event.at)} {text}"))
    lines += [text for _, text in sorted(timed, key=lambda t: t[0])]
    return lines + _end_lines(job, run, pod)


def simulated_job_logs(job: Job, *, tail_lines: int, now: datetime) -> list[PodLog]:
    """Each pod's log up to ``now`` (its last ``tail_lines`` lines), from the job's timeline and allocations."""
    events = list(job.events.order_by("at", "pk"))
    runs = _runs(events)
    allocations = list(Allocation.objects.filter(job=job).select_related("device__node").order_by("started_at", "pk"))
    logs = []
    for pod, name in enumerate(pod_names(job)):
        if not runs:
            logs.append(PodLog(pod=name, lines=[], note="No container has started yet."))
            continue
        lines = [line for run in runs for line in _run_lines(job, run, pod, allocations, now=now)]
        node, _ = _pod_place(allocations, pod, runs[-1].start)
        logs.append(PodLog(pod=name, lines=lines[-tail_lines:], node=node))
    return logs


#: JobEvent kind → (type, reason, involved object kind) of the Kubernetes event a real cluster would record.
EVENT_OF: dict[str, tuple[str, str, str]] = {
    K.SUBMITTED: ("Normal", "SuccessfulCreate", "Job"),
    K.WAIT_REASON: ("Normal", "Pending", "Workload"),
    K.ADMITTED: ("Normal", "Admitted", "Workload"),
    K.STARTED: ("Normal", "Started", "Pod"),
    K.RESUMED: ("Normal", "Started", "Pod"),
    K.CHECKPOINT_REQUESTED: ("Normal", "Killing", "Pod"),
    K.PREEMPTED: ("Normal", "Preempted", "Workload"),
    K.EVICTED: ("Normal", "Evicted", "Workload"),
    K.REQUEUED: ("Normal", "Requeued", "Workload"),
    K.SUCCEEDED: ("Normal", "Completed", "Job"),
    K.FAILED: ("Warning", "BackoffLimitExceeded", "Job"),
    K.CANCELLED: ("Normal", "Deleted", "Job"),
    K.TIMED_OUT: ("Warning", "DeadlineExceeded", "Job"),
    K.NODE_LOST: ("Warning", "NodeNotReady", "Pod"),
}


def simulated_job_events(job: Job) -> list[RunEvent]:
    """The events a cluster would have recorded for the job, from its timeline (oldest first)."""
    name = job.k8s_name or job.name
    first_pod = pod_names(job)[0]
    out = []
    for event in job.events.order_by("at", "pk"):
        if event.kind not in EVENT_OF:
            continue
        kind, reason, obj = EVENT_OF[event.kind]
        if obj == "Job":  # the job's own object: a JobSet, a RayJob, a Deployment... as its kind runs
            obj = job.kind_spec.object_kind
        involved = f"Pod/{first_pod}" if obj == "Pod" else f"{obj}/{name}"
        out.append(RunEvent(at=event.at, type=kind, reason=reason, involved=involved, message=event.message))
    return out
