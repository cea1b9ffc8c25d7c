"""What would start a job sooner: modified copies of it, each verified by the engine ("would start now if…").

Bounded: at most ``MAX_VARIANTS`` variants are explained and ``MAX_SUGGESTIONS`` kept, and the search stops once it
has run ``SUGGESTION_BUDGET_SECONDS``. The variants are explained one after another on one engine
(``engine.WhatIf``: 0.1–0.5 s to build at 10,000 pending jobs, then milliseconds per variant). The job page computes
them on its first view after a change of the cluster's state and stores them with the state version
(``queues.diagnosis_store``).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from datetime import datetime

from pools.models import ResourceClass
from queues import engine
from queues import selectors as sel
from queues.diagnosis_context import (
    EngineContext,
    Suggestion,
    Verdict,
    context_levels,
    context_workload,
    flavor_labels,
    verdict_of,
)
from queues.engine import model as m
from queues.engine_input import ts
from queues.models import Job, PriorityClass, Team
from queues.reservations.holds import lead, until_text

#: At most this many modified workloads are explained per suggestion search.
MAX_VARIANTS = 24
MAX_SUGGESTIONS = 4
#: A search stops trying further variants once it has run this long (at least one variant is always tried).
SUGGESTION_BUDGET_SECONDS = 3.0


def _same_kind(a: ResourceClass, b: ResourceClass) -> bool:
    """Whether class ``b`` can stand in for ``a``: same vendor's resource and same sharing mode.

    (An image built for one vendor's stack does not run on another's, and a dedicated card is never
    swapped for a shared one behind the user's back.)
    """
    return a.sharing == b.sharing and a.resource_name.split("/")[0] == b.resource_name.split("/")[0]


def _variants(job: Job, *, team: Team) -> Iterator[tuple[str, str, dict[str, object], Job]]:
    """Modified copies of a job worth trying, smallest change first: (kind, title, form changes, job)."""
    classes = list(sel.classes_for_team(team, job.cluster))
    # The prefetched instance of the job's class (its flavors are read for every variant).
    rc = next((c for c in classes if c.pk == job.resource_class_id), job.resource_class)
    hardware = sel.classes_hardware(classes if rc in classes else [*classes, rc], cluster=job.cluster)
    job = copy.copy(job)
    job.resource_class = rc
    levels = sel.allowed_topology_levels(rc, hardware[rc.pk]) if rc.pk in hardware else []

    def variant(**changes) -> Job:
        clone = copy.copy(job)  # Model.__getstate__ copies the related-object cache too
        for name, value in changes.items():
            setattr(clone, name, value)
        return clone

    if job.topology_mode == "required" and job.topology_level:
        level = job.topology_level
        yield (
            "topology",
            f"Prefer one {sel.level_label(level)} instead of requiring it",
            {"topology_mode": "preferred", "topology_level": level},
            variant(topology_mode="preferred"),
        )
        if level in levels:
            for wider in reversed(levels[: levels.index(level)]):
                yield (
                    "topology",
                    f"Require one {sel.level_label(wider)} instead of one {sel.level_label(level)}",
                    {"topology_mode": "required", "topology_level": wider},
                    variant(topology_level=wider),
                )
        if rc.topology_mode != ResourceClass.TopologyMode.REQUIRED:
            yield (
                "topology",
                "Drop the topology rule",
                {"topology_mode": "", "topology_level": ""},
                variant(topology_mode="", topology_level=""),
            )
    allowed = sorted(rc.allowed_counts or [])
    dpp, pods = job.devices_per_pod, job.pod_count
    smaller = [c for c in allowed if c < dpp]
    for count in reversed(smaller):
        if dpp % count == 0 and pods * (dpp // count) <= 512:
            more = pods * (dpp // count)
            yield (
                "devices",
                f"Split into {more} pods of {sel.unit_noun(rc.resource_name, count)}",
                {"devices_per_pod": count, "pod_count": more},
                variant(devices_per_pod=count, pod_count=more),
            )
            break
    for count in reversed(smaller):
        yield (
            "devices",
            f"Ask {sel.unit_noun(rc.resource_name, count)} per pod instead of {dpp}",
            {"devices_per_pod": count},
            variant(devices_per_pod=count),
        )
    if pods > 1:
        for fewer in sorted({pods // 2, 1} - {0, pods}, reverse=True):
            yield (
                "devices",
                f"Run {fewer} pod{'s' if fewer != 1 else ''} instead of {pods}",
                {"pod_count": fewer},
                variant(pod_count=fewer),
            )
    for other in classes:
        if other.pk == rc.pk or not _same_kind(rc, other) or dpp not in (other.allowed_counts or []):
            continue
        if job.kind not in (other.allowed_kinds or []):
            continue
        other_levels = sel.allowed_topology_levels(other, hardware[other.pk])
        mode, level = job.topology_mode, job.topology_level
        if level and level not in other_levels:
            mode, level = "", ""
        if other.topology_mode == ResourceClass.TopologyMode.REQUIRED and not mode:
            mode, level = "required", other.topology_level
        yield (
            "class",
            f"Use class {other.name}",
            {"resource_class": other.slug, "topology_mode": mode, "topology_level": level},
            variant(resource_class=other, topology_mode=mode, topology_level=level),
        )
    for pc in sel.priority_classes_for(team):
        if pc.pk == job.priority_class_id:
            continue
        yield (
            "priority",
            f"Submit with priority {pc.name}",
            {"priority_class": pc.name},
            variant(priority_class=pc, priority=pc.value),
        )


def _suggestion_message(kind: str, verdict: Verdict, pc: PriorityClass | None) -> str:
    """Why the verified variant would start, in the user's words."""
    where = f" on {', '.join(verdict.flavors)}" if verdict.flavors else ""
    if verdict.preemption_targets:
        n = len(verdict.preemption_targets)
        text = (
            f"It would start{where} as soon as {n} lower-priority job{'s are' if n != 1 else ' is'} preempted "
            "(checkpointing first where they can)"
        )
    else:
        text = f"It would start now{where}"
    if verdict.borrowing:
        text += ", borrowing idle quota from the cohort"
        if kind == "priority" and pc is not None and not pc.may_preempt:
            text += f" ({pc.name} jobs may themselves be preempted when the lender reclaims its quota)"
        else:
            text += " (a borrowing job may be preempted when the lender reclaims its quota)"
    return text + "."


def suggestions_for(
    ctx: EngineContext, job: Job, *, team: Team, exclude_key: str | None, budget: float | None = None
) -> list[Suggestion]:
    """Verified "would start now if…" changes for a job that cannot start now (bounded: see the module)."""
    budget = SUGGESTION_BUDGET_SECONDS if budget is None else budget
    started = time.monotonic()
    whatif = engine.WhatIf(ctx.without(exclude_key) if exclude_key else ctx.state, ts(ctx.now))
    labels, levels = flavor_labels(ctx), context_levels(ctx)
    out: list[Suggestion] = []
    kinds_done: set[tuple[str, str]] = set()
    tried = 0
    for kind, title, changes, variant in _variants(job, team=team):
        if tried >= MAX_VARIANTS or len(out) >= MAX_SUGGESTIONS:
            break
        if tried and time.monotonic() - started >= budget:
            break
        group = (kind, str(changes.get("resource_class", "")))
        if kind in ("topology", "devices") and group in kinds_done:
            continue  # the smallest working change of a kind is enough
        tried += 1
        workload = context_workload(ctx, variant)
        verdict = verdict_of(whatif.explain(workload), labels, levels)
        if verdict.admissible or verdict.preemption_targets:
            kinds_done.add(group)
            pc = variant.priority_class if kind == "priority" else None
            message = _suggestion_message(kind, verdict, pc) + _window_ahead(ctx, workload, verdict)
            out.append(Suggestion(kind=kind, title=title, message=message, changes=changes))
    return out


def _window_ahead(ctx: EngineContext, workload: m.Workload, verdict: Verdict) -> str:
    """A borrowing variant that would still run when another team's reservation opens on its hardware is told so."""
    if not verdict.borrowing or not ctx.state.reservations:
        return ""
    now = ts(ctx.now)
    end = now + (workload.runtime or 0.0)
    labels = flavor_labels(ctx)
    queue = next((lq.cluster_queue for lq in ctx.state.local_queues if lq.namespace == workload.namespace), None)
    for hold in sorted(ctx.state.reservations, key=lambda h: (h.start, h.name)):
        if hold.cluster_queue == queue or not now < hold.start < end:
            continue
        if labels.get(hold.flavor, hold.flavor) not in verdict.flavors:
            continue
        opens = datetime.fromtimestamp(hold.start, tz=ctx.now.tzinfo) + lead()
        what = f"{hold.count} {labels.get(hold.flavor, hold.flavor)}"
        return (
            f" Reservation {hold.name} of {hold.holder or hold.cluster_queue} ({what}) opens "
            f"{until_text(opens, now=ctx.now)}, before it would end: what it borrows may be reclaimed then."
        )
    return ""
