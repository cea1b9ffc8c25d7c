"""A job's preemptions as steps, for the job page: checkpoint asked → written → evicted → requeued → resumed.

Read from the job's timeline (``JobEvent``), which every path writes the same way (the simulated cluster, the
Kubernetes sync, a stopped queue): each preemption or queue-stop eviction opens an episode; the steps after it are
filled in as their events come, and the episode ends when the job runs again (or ends).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from kernel.labels import duration_words
from queues.models import Job, JobEvent

K = JobEvent.Kind

#: The steps of an episode, in order.
STEPS = ("asked", "written", "evicted", "requeued", "resumed")
STEP_LABELS = {
    "asked": "Checkpoint asked",
    "written": "Checkpoint written",
    "evicted": "Evicted",
    "requeued": "Requeued",
    "resumed": "Resumed from it",
}
#: Events that end an episode without the job running again.
_FINAL = (K.SUCCEEDED, K.FAILED, K.CANCELLED, K.TIMED_OUT)


@dataclass
class Step:
    """One step of a preemption: done (with its time), skipped (with why) or still to come."""

    key: str
    label: str
    state: str = "pending"  # done | skipped | pending
    at: datetime | None = None
    note: str = ""


@dataclass
class PreemptionEpisode:
    """One preemption (or queue-stop eviction) of the job and what followed it."""

    started_at: datetime
    why: str
    steps: list[Step] = field(default_factory=list)
    lost_device_hours: float | None = None
    kept_seconds: int = 0

    @property
    def ongoing(self) -> bool:
        """Whether some step is still to come."""
        return any(s.state == "pending" for s in self.steps)


def _open(event: JobEvent, message: str, checkpoint_policy: bool) -> PreemptionEpisode:
    episode = PreemptionEpisode(started_at=event.at, why=message)
    episode.steps = [Step(key, STEP_LABELS[key]) for key in STEPS]
    if not checkpoint_policy:
        note = "no checkpoint policy: evicted at once"
        episode.steps[0].state = episode.steps[1].state = "skipped"
        episode.steps[0].note = episode.steps[1].note = note
    return episode


def job_preemption_episodes(job: Job, *, events: Iterable[JobEvent], texts: Iterable[str]) -> list[PreemptionEpisode]:
    """The job's preemptions, oldest first, from its timeline events in order (``texts``: each event's message as
    the viewer may read it, in the same order)."""
    policy = bool(job.checkpoint_path and (job.checkpoint_signal or job.checkpoint_command))
    out: list[PreemptionEpisode] = []
    current: PreemptionEpisode | None = None
    for event, text in zip(events, texts, strict=True):
        kind = event.kind
        if kind in (K.PREEMPTED, K.EVICTED):
            if current is not None and current.steps[2].state == "pending":
                continue  # a second notice of the same eviction (the preemptor's reason after a drain's)
            current = _open(event, text, policy)
            out.append(current)
            continue
        if current is None:
            continue
        steps = {s.key: s for s in current.steps}
        if kind == K.CHECKPOINT_REQUESTED:
            steps["asked"].state, steps["asked"].at, steps["asked"].note = "done", event.at, ""
        elif kind == K.CHECKPOINT_DONE:
            steps["written"].state, steps["written"].at, steps["written"].note = "done", event.at, ""
        elif kind == K.REQUEUED:
            details = event.details or {}
            for key in ("evicted", "requeued"):
                steps[key].state, steps[key].at = "done", event.at
            if steps["written"].state == "pending":
                periodic = details.get("periodicCheckpointAt")
                steps["written"].state = "skipped"
                steps["written"].note = (
                    f"not written before the eviction; its periodic checkpoint of {periodic[11:16]} kept the work"
                    if periodic
                    else "not written before the eviction"
                )
                if steps["asked"].state == "pending":
                    steps["asked"].state, steps["asked"].note = "skipped", "the job has no checkpoint to ask for"
            current.lost_device_hours = details.get("lostDeviceHours")
            current.kept_seconds = int(details.get("keptSeconds") or 0)
        elif kind in (K.RESUMED, K.STARTED) and steps["requeued"].state == "done":
            kept = int((event.details or {}).get("keptSeconds") or job.run_seconds_banked or 0)
            steps["resumed"].state, steps["resumed"].at = "done", event.at
            if steps["written"].state == "done" or current.kept_seconds:
                steps["resumed"].note = f"{duration_words(kept)} of work kept" if kept else ""
            else:
                steps["resumed"].label = "Restarted"
                steps["resumed"].note = "from the beginning: no checkpoint kept its work"
            current = None
        elif kind in _FINAL:
            for step in current.steps:
                if step.state == "pending":
                    step.state, step.note = "skipped", f"the job ended ({event.get_kind_display().lower()})"
            current = None
    return out
