"""Wait reasons that name a reservation: ``capacity_reserved`` for a job that waits only because one holds capacity.

A pending workload whose primary reason is about quota (its team's quota, its borrowing limit, a cohort with nothing
left to lend, a higher-priority job ahead) is explained again on the same state without the holds in force; if it
would be admitted there, the holds of other teams in its cohort tree are what keeps it waiting, and its reason becomes
``capacity_reserved``: "8 H100 GPUs are reserved for Speech until 17:00 (reservation speech-eval); without that
reservation this job would start now." The reason it had otherwise stays in ``details.underlying`` (and its Kueue
text, which Kueue writes whatever the cause, is kept).

Only workloads of a cohort tree where a hold of another queue is in force, on a flavor and resource its queue offers
for what it asks, are explained again, on one extra engine per pass: nothing changes, and nothing is built, where no
reservation is in force.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from .decisions import Explanation, WaitReason
from .messages import noun
from .model import QuotaHold
from .reasons import explain_all, explain_wl
from .records import WorkloadInfo
from .reservations import cohort_roots
from .scheduler import Engine
from .wait_codes import (
    BORROW_LIMIT,
    CAPACITY_RESERVED,
    CLASS_EXHAUSTED,
    HIGHER_PRIORITY_AHEAD,
    QUOTA_EXHAUSTED,
    QUOTA_LENT_OUT,
)

#: The codes a reservation holding quota can be the cause of (placement, health and errors are not); a quota
#: "lent out" under a hold is restated only where the job would start without the hold, as for the others.
ATTRIBUTABLE = frozenset({QUOTA_EXHAUSTED, QUOTA_LENT_OUT, BORROW_LIMIT, HIGHER_PRIORITY_AHEAD, CLASS_EXHAUSTED})


def blocking_holds(engine: Engine, wl: WorkloadInfo) -> list[QuotaHold]:
    """The holds in force of other queues of ``wl``'s cohort tree on a flavor and resource its queue offers for it."""
    if not engine.holds or wl.cq is None or wl.cq not in engine.cqs:
        return []
    spec = engine.cqs[wl.cq].spec
    if spec.cohort is None:
        return []
    roots = cohort_roots(engine.spec_state.cohorts)
    root = roots.get(spec.cohort, spec.cohort)
    wanted = {r for ps in wl.spec.pod_sets for r, v in ps.requests.items() if v}
    offered = {(fq.name, rq.name) for g in spec.resource_groups for fq in g.flavors for rq in fq.resources}
    out = []
    for hold in engine.holds:
        if hold.cluster_queue == wl.cq or hold.resource not in wanted or (hold.flavor, hold.resource) not in offered:
            continue
        other = engine.cqs.get(hold.cluster_queue)
        if other is None or other.spec.cohort is None or roots.get(other.spec.cohort, other.spec.cohort) != root:
            continue
        out.append(hold)
    return out


def hold_phrase(engine: Engine, holds: list[QuotaHold]) -> str:
    """ "8 H100 GPUs are reserved for Speech until 17:00 (reservation speech-eval)", joined with "and"."""
    parts = []
    for hold in holds:
        flavor = engine.flavors.get(hold.flavor)
        label = (flavor.display_name if flavor is not None else None) or hold.flavor
        verb = "is" if hold.count == 1 else "are"
        until = hold.until or f"t={hold.end:g}s"
        parts.append(
            f"{noun(hold.resource, hold.count, label)} {verb} reserved for {hold.holder or hold.cluster_queue} "
            f"until {until} (reservation {hold.name})"
        )
    return " and ".join(parts)


def reserved_reason(engine: Engine, reason: WaitReason, holds: list[QuotaHold]) -> WaitReason:
    """``reason`` (a quota reason) restated as ``capacity_reserved``, naming ``holds``."""
    details = dict(reason.details)
    details["underlying"] = {"code": reason.code, "message": reason.message}
    details["reservations"] = [
        {
            "name": h.name,
            "clusterQueue": h.cluster_queue,
            "holder": h.holder or h.cluster_queue,
            "flavor": h.flavor,
            "resource": h.resource,
            "count": h.count,
            "start": h.start,
            "end": h.end,
            "until": h.until,
        }
        for h in holds
    ]
    message = f"{hold_phrase(engine, holds)}; without that reservation this job would start now."
    return WaitReason(
        code=CAPACITY_RESERVED,
        message=message[0].upper() + message[1:],
        kueue_message=reason.kueue_message,
        kueue_reason=reason.kueue_reason,
        details=details,
    )


def attribute(engine: Engine, explanations: Mapping[str, Explanation]) -> dict[str, Explanation]:
    """``explanations`` (of ``engine``'s workloads, as it is now) with each wait a reservation causes restated."""
    out = dict(explanations)
    if not engine.holds:
        return out
    candidates: dict[str, list[QuotaHold]] = {}
    for key, explanation in explanations.items():
        reason = explanation.reason
        if explanation.admissible or reason is None or reason.code not in ATTRIBUTABLE:
            continue
        wl = engine.workloads.get(key)
        if wl is None:
            continue
        holds = blocking_holds(engine, wl)
        if holds:
            candidates[key] = holds
    if not candidates:
        return out
    unheld = Engine(replace(engine.export_state(), reservations=()), engine.now)
    targets = [unheld.workloads[key] for key in sorted(candidates) if key in unheld.workloads]
    free = explain_all(unheld, targets)
    for key, holds in candidates.items():
        verdict = free.get(key)
        reason = explanations[key].reason
        if verdict is not None and verdict.admissible and reason is not None:
            out[key] = replace(explanations[key], reason=reserved_reason(engine, reason, holds))
    return out


def explain_all_held(engine: Engine, workloads: list[WorkloadInfo]) -> dict[str, Explanation]:
    """``reasons.explain_all`` with the waits reservations cause named (``attribute``)."""
    return attribute(engine, explain_all(engine, workloads))


def explain_held(engine: Engine, wl: WorkloadInfo) -> Explanation:
    """``reasons.explain_wl`` of one workload with the wait a reservation causes named (``attribute``)."""
    return attribute(engine, {wl.key: explain_wl(engine, wl)})[wl.key]


__all__ = [
    "ATTRIBUTABLE",
    "attribute",
    "blocking_holds",
    "explain_all_held",
    "explain_held",
    "hold_phrase",
    "reserved_reason",
]
