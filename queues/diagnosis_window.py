"""The diagnosis's forward replay: bounded, on the jobs it can reach, and skipped when a change cannot touch it.

* **Bounded**: the replay stops after the instant of its ``DIAGNOSIS_REPLAY_ADMISSIONS``-th grant of quota (or at
  the ETA horizon). Every time it finds is the unbounded replay's; a job it does not reach gets an ETA extended
  from it, said as such (``queues.diagnosis_pages``).
* **On what it can reach**: the engine is given the quota holders and, of each pending queue whose jobs are
  explained alike by group (BestEffortFIFO, no preemption: ``engine.verdict_sharing_queues``), a prefix in queue
  order that holds the first job of each of its groups; other queues whole. Within a group the engine only ever
  looks at the first job, so the replay is the full one as long as no group runs out of the jobs it was given while
  more wait behind them; when one does, the replay runs again with a longer prefix (``_exhausted``). The jobs left
  out share the verdict of their group's first job (explained once, ``engine.diagnose_window``).
* **Skipped when the change cannot touch it** (``_reusable``): the last window stands when every changed job is a
  pending one behind the first job of its group that the window did not admit (such a job never heads its group
  before the window ends), no event of the last replay lies between its start and now, and nothing was admitted
  or preempted at its start.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings

from pools.models import Cluster
from queues import engine
from queues.diagnosis_context import ETA_HORIZON
from queues.diagnosis_input import InputChange, KeptInput, KeptJob, Timing, timed_workload
from queues.engine import model as m
from queues.engine_input import ts

#: Jobs of a queue given to the engine at least, and the share added to the last window's reach.
MIN_PREFIX = 64
PREFIX_GROWTH = 1.5
#: Replays with longer prefixes before giving the engine whole queues.
MAX_RERUNS = 4

Queue = tuple[str, str]


@dataclass
class Window:
    """One bounded replay: what it admitted when, the explanations, and what the next refresh needs to reuse it."""

    generation: int
    start: float
    #: Where the window's pace is measured from: its start, or, when nothing was granted at the start, the first
    #: event (so a window kept at a later refresh extends exactly as one replayed then would).
    origin: float
    horizon: float
    window_end: float | None
    admitted_at: dict[str, float]
    explanations: dict[str, engine.Explanation]
    #: (``admitted_at``: every job the replay granted quota to, with when it first held it.)
    #: Pending key → the explained key whose explanation it shares (itself when explained).
    explained_as: dict[str, str]
    #: Group → the explained key of its first job (the verdict of the jobs the engine was not given).
    group_head: dict[str, str]
    #: Group → how many of its jobs the window admitted.
    admitted_in_group: dict[str, int]
    #: Queue → how many of its jobs the window admitted.
    admitted_in_queue: dict[Queue, int]
    #: Group → the engine order of its first job the window did not admit (absent: the window admitted them all).
    frontier: dict[str, tuple]
    #: Queue → how many of its jobs, in queue order, the engine was given.
    prefix: dict[Queue, int]
    #: The quota holders' expected ends it was given (its first events).
    end_times: dict[str, float]
    #: Whether a later refresh may keep this window (see ``_reusable``).
    reusable: bool
    granted: int = 0
    replays: int = 1
    kept: bool = False
    state: m.ClusterState | None = field(default=None, repr=False)


def replay_admissions() -> int:
    """How many grants of quota the diagnosis's replay looks ahead (``DIAGNOSIS_REPLAY_ADMISSIONS``)."""
    return int(settings.DIAGNOSIS_REPLAY_ADMISSIONS)


def diagnosis_window(
    kept: KeptInput,
    cluster: Cluster,
    timing: Timing,
    *,
    now: datetime,
    previous: Window | None,
    change: InputChange | None,
) -> Window:
    """The window at ``now``: the previous one when the change cannot touch it, else a bounded replay."""
    start = ts(now)
    if previous is not None and _reusable(previous, kept, change, timing, start=start):
        previous.kept = True
        return previous
    groups = _queue_groups(kept)
    prefix = _first_prefixes(kept, groups, previous, change)
    window = None
    for replays in range(1, MAX_RERUNS + 2):
        window = _replay(kept, cluster, timing, groups, prefix, start=start, horizon=ts(now + ETA_HORIZON))
        window.replays = replays
        short = _exhausted(kept, groups, window)
        if not short:
            return window
        for queue in short:
            prefix[queue] = len(kept.queues[queue]) if replays >= MAX_RERUNS else max(2 * prefix[queue], MIN_PREFIX)
    assert window is not None
    return window


@dataclass
class _QueueGroups:
    """Per sharing queue: each group's first place in queue order and its size."""

    first: dict[str, int]
    size: dict[str, int]


def _queue_groups(kept: KeptInput) -> dict[Queue, _QueueGroups]:
    return {
        queue: _QueueGroups(kept.group_firsts(queue), kept.group_sizes.get(queue, {}))
        for queue in kept.queues
        if kept.cluster_queue_of.get(queue) in kept.sharing
    }


def _first_prefixes(
    kept: KeptInput, groups: dict[Queue, _QueueGroups], previous: Window | None, change: InputChange | None
) -> dict[Queue, int]:
    """How many jobs of each sharing queue the engine is given: what the last window reached plus a margin, and the
    first job of each group that window did not admit (a share of the replay's admissions at first); always at
    least every group's first job."""
    sharing = len(groups) or 1
    moved = len(change.jobs) if change is not None else None
    out: dict[Queue, int] = {}
    for queue, g in groups.items():
        if previous is not None and queue in previous.prefix:
            members = kept.queues[queue]
            reach = _reach(previous, kept, queue, moved)
            behind = [previous.frontier[group] for group in g.size if group in previous.frontier]
            frontier = max((bisect.bisect_left(members, (order,)) + 1 for order in behind), default=0)
            wanted = max(MIN_PREFIX, math.ceil(PREFIX_GROWTH * reach) + MIN_PREFIX, frontier)
        else:
            wanted = max(MIN_PREFIX, math.ceil(2 * replay_admissions() / sharing))
        out[queue] = max(wanted, max(g.first.values(), default=-1) + 1)
    return out


def _reach(previous: Window, kept: KeptInput, queue: Queue, moved: int | None) -> int:
    """The place in ``queue`` (now) after the last of its jobs the previous window admitted: they were among the
    jobs it was given, and at most ``moved`` jobs joined the queue since (None: look at all of it)."""
    members = kept.queues.get(queue, [])
    if moved is not None:
        members = members[: previous.prefix[queue] + moved]
    admitted = previous.admitted_at
    jobs = kept.jobs
    reached = 0
    for index, (_, job_id) in enumerate(members):
        if jobs[job_id].key in admitted:
            reached = index + 1
    return reached


def _replay(
    kept: KeptInput,
    cluster: Cluster,
    timing: Timing,
    groups: dict[Queue, _QueueGroups],
    prefix: dict[Queue, int],
    *,
    start: float,
    horizon: float,
) -> Window:
    """One bounded replay with the given prefixes."""
    workloads = [timed_workload(k, cluster, timing) for k in kept.holders()]
    explain: list[str] = []
    represented: dict[str, str] = {}
    explained_as: dict[str, str] = {}
    group_head: dict[str, str] = {}
    jobs = kept.jobs
    given: dict[Queue, list[KeptJob]] = {}
    for queue, members in kept.queues.items():
        shared = queue in groups
        these = given[queue] = [jobs[job_id] for _, job_id in (members[: prefix[queue]] if shared else members)]
        for kept_job in these:
            key = kept_job.key
            workloads.append(timed_workload(kept_job, cluster, timing))
            if not shared:
                explain.append(key)
                explained_as[key] = key
                continue
            head = group_head.get(kept_job.group)
            if head is None:
                group_head[kept_job.group] = key
                explain.append(key)
                explained_as[key] = key
            else:
                represented[key] = head
                explained_as[key] = head
    state = dataclasses.replace(kept.base, workloads=tuple(workloads))
    found = engine.diagnose_window(
        state,
        sorted(explain),
        start,
        timing.end_times,
        horizon=horizon,
        default_runtime=timing.default_runtime,
        max_admissions=replay_admissions(),
        represented_by=represented,
    )
    admitted_at = found.held_at  # every grant (the exhaustion check must see groups whose verdict needs no replay)
    admitted_in_group: dict[str, int] = {}
    admitted_in_queue: dict[Queue, int] = {}
    frontier: dict[str, tuple] = {}
    for queue, these in given.items():
        count = 0
        for kept_job in these:
            group = kept_job.group
            if kept_job.key in admitted_at:
                admitted_in_group[group] = admitted_in_group.get(group, 0) + 1
                count += 1
            elif group not in frontier:
                frontier[group] = kept_job.order
        admitted_in_queue[queue] = count
    # A group whose jobs given were all admitted while more wait is a replay to run again (``_exhausted``): in the
    # window that stands, a group without a frontier among the jobs given has no job left.
    quiet_start = not any(e.admissible or e.preemption_targets for e in found.explanations.values()) and not any(
        at <= start for at in admitted_at.values()
    )
    first_event = min(timing.end_times.values(), default=start)
    return Window(
        generation=kept.generation,
        start=start,
        origin=max(start, first_event) if quiet_start else start,
        horizon=horizon,
        window_end=found.window_end,
        admitted_at=dict(admitted_at),
        explanations=dict(found.explanations),
        explained_as=explained_as,
        group_head=group_head,
        admitted_in_group=admitted_in_group,
        admitted_in_queue=admitted_in_queue,
        frontier=frontier,
        prefix=dict(prefix),
        end_times=dict(timing.end_times),
        reusable=quiet_start and _nothing_preempts(kept, groups) and (found.window_end is not None or not frontier),
        granted=found.granted,
        state=state,
    )


def _nothing_preempts(kept: KeptInput, groups: dict[Queue, _QueueGroups]) -> bool:
    """No queue that could preempt or stop holds pending jobs (so the window neither evicts nor drains)."""
    if any(q.stop_policy != "None" for q in kept.base.local_queues) or any(
        c.stop_policy != "None" for c in kept.base.cluster_queues
    ):
        return False
    return all(queue in groups for queue, members in kept.queues.items() if members)


def _exhausted(kept: KeptInput, groups: dict[Queue, _QueueGroups], window: Window) -> list[Queue]:
    """The sharing queues with a group whose jobs given to the engine were all admitted while more of it wait
    behind them: from then on the replay differed from the full one."""
    short = []
    for queue, g in groups.items():
        given: dict[str, int] = {}
        admitted: dict[str, int] = {}
        for _, job_id in kept.queues[queue][: window.prefix[queue]]:
            kept_job = kept.jobs[job_id]
            group = kept_job.group
            given[group] = given.get(group, 0) + 1
            if kept_job.key in window.admitted_at:
                admitted[group] = admitted.get(group, 0) + 1
        if any(g.size[group] > n and admitted.get(group, 0) == n for group, n in given.items()):
            short.append(queue)
    return short


def _reusable(previous: Window, kept: KeptInput, change: InputChange | None, timing: Timing, *, start: float) -> bool:
    """Whether the previous window is what a replay at ``start`` would find (see the module docstring)."""
    if change is None or not previous.reusable or previous.generation != kept.generation or start < previous.start:
        return False
    if timing.end_times != previous.end_times or any(end <= start for end in previous.end_times.values()):
        return False  # a holder ends at another time, or the last replay has had events since its start
    for before, after in change.jobs.values():
        for entry in (before, after):
            if entry is None:
                continue
            if entry.holding:
                return False
            behind = previous.frontier.get(entry.group)
            if behind is None or entry.order <= behind:
                return False  # a new group, one the window emptied, or a job at or before the group's frontier
    return True
