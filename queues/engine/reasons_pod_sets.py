"""Which pod set of a multi-pod-set workload is the obstacle: "pod set workers (8 pods × 1 GPU) fits alone;
pod set launcher (1 pod × 64 CPUs) does not."

A workload's pod sets are admitted together (a gang), so Kueue's own message names only the first pod set it
could not assign. The researcher needs to know which part of the job to change: each pod set is tried alone
against the same engine state (quota and nodes), and the wait reason's sentence is prefixed with the verdict.
"""

from __future__ import annotations

import copy
from dataclasses import replace

from kernel.quantity import is_device_resource

from . import messages as msg
from .decisions import WaitReason
from .flavor_assignment import assign
from .records import PS_FIT, ClusterQueueInfo, PodSetInfo, WorkloadInfo
from .scheduler import Engine

#: Codes that come from quota, hardware or placement: the ones a pod set can be the cause of.
POD_SET_CODES = frozenset(
    {
        "quota_exhausted",
        "borrow_limit",
        "class_exhausted",
        "topology_fragmented",
        "health_blocked",
        "exceeds_maximum",
        "no_matching_flavor",
    }
)


def pod_set_words(ps: PodSetInfo) -> str:
    """``workers (8 pods × 1 GPU)``, ``launcher (1 pod × 64 CPUs, 256Gi of memory)``: a pod set and its pod."""
    devices = [r for r in ps.per_pod if is_device_resource(r)]
    shown = devices or [r for r in ("cpu", "memory") if r in ps.per_pod] or list(ps.per_pod)
    what = ", ".join(msg.noun(r, ps.per_pod[r]) for r in shown)
    return f"{ps.name} ({ps.count} pod{'' if ps.count == 1 else 's'} × {what})"


def fits_alone(engine: Engine, wl: WorkloadInfo, cq: ClusterQueueInfo, index: int, memo: dict | None = None) -> bool:
    """Whether pod set ``index`` of ``wl`` would be admitted now without the others (quota and nodes).

    ``memo``: answers by (queue, shape, pod set) for one unchanged engine (a ``ReasonIndex``'s): many pending
    jobs share a shape, and the answer depends on nothing else.
    """
    if memo is None or not wl.shape:  # a workload not queued has no shape to share the answer with
        return _fits_alone(engine, wl, cq, index)
    key = (cq.name, wl.shape, index)
    if key not in memo:
        memo[key] = _fits_alone(engine, wl, cq, index)
    return memo[key]


def _fits_alone(engine: Engine, wl: WorkloadInfo, cq: ClusterQueueInfo, index: int) -> bool:
    """``fits_alone`` computed: one flavor assignment (and placement) of the pod set alone."""
    solo = copy.copy(wl)
    solo.pod_sets = [wl.pod_sets[index]]
    solo.shape = ("pod-set", wl.shape, index)  # the flavor-check cache is keyed by shape
    assignment = assign(engine, solo, cq)
    if assignment.mode != PS_FIT:
        return False
    return all(p.placement is None or p.placement.ok for p in assignment.pod_sets)


def name_pod_sets(
    engine: Engine, wl: WorkloadInfo, cq: ClusterQueueInfo, reason: WaitReason, memo: dict | None = None
) -> WaitReason:
    """``reason`` with the pod sets that fit alone and those that do not named first (several pod sets only).

    ``memo``: see :func:`fits_alone`."""
    # a pod set that asks for nothing the queue or the nodes count (a launcher whose CPUs are not managed) always
    # fits: naming it would only be noise
    asking = [(i, ps) for i, ps in enumerate(wl.pod_sets) if ps.per_pod]
    if len(asking) < 2 or reason.code not in POD_SET_CODES:
        return reason
    fit: list[PodSetInfo] = []
    blocked: list[PodSetInfo] = []
    for index, ps in asking:
        (fit if fits_alone(engine, wl, cq, index, memo) else blocked).append(ps)
    if blocked and fit:
        head = (
            f"{_pod_sets(fit)} {'fits' if len(fit) == 1 else 'fit'} alone; "
            f"{_pod_sets(blocked)} {'does' if len(blocked) == 1 else 'do'} not. "
        )
    elif not blocked:
        head = "Each pod set fits alone, but not all of them together. "
    else:
        head = ""
    details = {**reason.details, "podSetsFit": [ps.name for ps in fit], "podSetsBlocked": [ps.name for ps in blocked]}
    return replace(reason, message=head[:1].upper() + head[1:] + reason.message, details=details)


def _pod_sets(items: list[PodSetInfo]) -> str:
    """``pod set head (…)`` or ``pod sets head (…) and workers (…)``."""
    words = [pod_set_words(ps) for ps in items]
    if len(words) == 1:
        return f"pod set {words[0]}"
    return f"pod sets {', '.join(words[:-1])} and {words[-1]}"
