"""One per-flavor reason → its final code and sentence, decided with the pool view; the reason that speaks."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from kernel.quantity import is_device_resource
from queues.engine.messages import noun
from queues.engine.model import HEALTH_TAINT_KEYS
from queues.engine.wait_codes import (
    BORROW_LIMIT,
    CLASS_EXHAUSTED,
    HEALTH_BLOCKED,
    HIGHER_PRIORITY_AHEAD,
    NEVER_FITS,
    NEVER_FITS_ORDER,
    QUOTA_EXHAUSTED,
    QUOTA_LENT_OUT,
    TOPOLOGY_FRAGMENTED,
)

from .context import FlavorReason, MessageContext, format_amount, parse_amount, resource_label
from .patterns import SKIP_REASON_IDS, exclusion_counts

#: TAS reasons that say "the pods do not fit the nodes" (decided by :func:`placement_code`).
TAS_PLACEMENT_IDS = ("tas_fits_only_some", "tas_fits_none", "tas_exclusion_stats", "tas_multilayer_no_fit")


def lent_out(reason: FlavorReason, ctx: MessageContext | None) -> tuple[str, dict[str, Any]] | None:
    """The sentence and figures of ``quota_lent_out``, when the team uses less than its quota and queues of its
    cohort that borrowed hold the rest; None otherwise."""
    resource, flavor = reason.resource, reason.flavor
    figures = ctx.quota(flavor, resource) if ctx else None
    request = ctx.request.get(resource) if ctx else None
    missing = parse_amount(str(reason.numbers.get("missing", "")), resource)
    if ctx is None or figures is None or request is None or missing is None or figures.used >= figures.nominal:
        return None
    holders = ctx.borrowers(flavor, resource)
    if not holders:
        return None
    lent = min(figures.nominal - figures.used, sum(h["units"] for h in holders))
    label, units = ctx.label(flavor), resource_label(resource)
    coming = (
        f"{format_amount(missing, resource)} must come back for this job to start."
        if missing <= lent
        else f"all {format_amount(lent, resource)} must come back and {format_amount(missing - lent, resource)} "
        "more must free up in the cohort for this job to start."
    )
    named = ", ".join(f"{h['clusterQueue']} {format_amount(h['units'], resource)}" for h in holders[:5])
    if len(holders) > 5:
        named += f" and {len(holders) - 5} more"
    if figures.reclaim == "Never":
        back = "Its queue does not reclaim lent quota (reclaimWithinCohort: Never): it comes back as their jobs end."
    elif figures.reclaim:
        back = (
            f"Its queue reclaims lent quota (reclaimWithinCohort: {figures.reclaim}), but Kueue found no borrowed "
            "job to preempt for this one: it comes back as their jobs end."
        )
    else:
        back = "It comes back as their jobs end, or when Kueue reclaims it."
    plain = (
        f"Your team uses {format_amount(figures.used, resource)} of its {format_amount(figures.nominal, resource)} "
        f"{units} on {label} and this job needs {format_amount(request, resource)}. {format_amount(lent, resource)} "
        f"{units} of its unused quota are lent out, in use by queues that borrowed them ({named} above their own "
        f"quota); {coming} {back}"
    )
    return plain, {"lent": lent, "lentTo": holders, "reclaim": figures.reclaim}


def quota_code(reason: FlavorReason, ctx: MessageContext | None) -> tuple[str, str]:
    """quota_exhausted | borrow_limit | class_exhausted | higher_priority_ahead, and the sentence that says why."""
    resource, flavor = reason.resource, reason.flavor
    missing = parse_amount(str(reason.numbers.get("missing", "")), resource)
    label = ctx.label(flavor) if ctx else flavor
    units = resource_label(resource)
    what = f"{format_amount(missing, resource)} more {units} needed"
    figures = ctx.quota(flavor, resource) if ctx else None
    if figures is None or missing is None:
        return QUOTA_EXHAUSTED, f"Your team's quota of {units} on {label} is in use: {what}."
    request = ctx.request.get(resource) if ctx else None
    nominal = figures.nominal
    quota = format_amount(nominal, resource)
    if request is not None and figures.used + request <= nominal:
        return (
            HIGHER_PRIORITY_AHEAD,
            f"Your team is within its quota of {quota} {units} on {label}, but that "
            f"capacity is held by other work ahead of this job (lent to the cohort or reserved for an earlier "
            f"job): {what}.",
        )
    if not figures.in_cohort:
        return (
            QUOTA_EXHAUSTED,
            f"Your team's quota of {quota} {units} on {label} is in use "
            f"({format_amount(figures.used, resource)} reserved) and it cannot borrow: {what}.",
        )
    cohort_free = None
    if figures.cohort_capacity is not None and figures.cohort_used is not None:
        cohort_free = figures.cohort_capacity - figures.cohort_used
    if figures.borrowing_limit is not None and request is not None:
        ceiling = nominal + figures.borrowing_limit
        if figures.used + request > ceiling and (cohort_free is None or cohort_free >= missing):
            return (
                BORROW_LIMIT,
                f"The cohort has idle {units} on {label}, but your team reached its borrowing limit "
                f"({format_amount(figures.borrowing_limit, resource)} above its quota of {quota}): {what}.",
            )
    if cohort_free is not None and cohort_free < missing:
        return (
            CLASS_EXHAUSTED,
            f"Every {label} device the cohort shares is in use ({format_amount(figures.cohort_used, resource)} of "
            f"{format_amount(figures.cohort_capacity, resource)} reserved): {what}.",
        )
    return (
        QUOTA_EXHAUSTED,
        f"Your team's quota of {quota} {units} on {label} is in use and the cohort cannot lend more now: {what}.",
    )


def placement_code(
    *, flavors: Sequence[str], ctx: MessageContext | None, health_excluded_nodes: int, full_nodes: int, fit_none: bool
) -> tuple[str, dict[str, Any]]:
    """health_blocked | topology_fragmented | class_exhausted for "the pods do not fit the nodes"."""
    resource = ctx.device_resource() if ctx else ""
    needed = ctx.request.get(resource) if ctx and resource else None
    figures = [ctx.pool[(f, resource)] for f in flavors if ctx and (f, resource) in ctx.pool] if ctx else []
    if figures and needed is not None:
        free = sum(p.free for p in figures)
        excluded = sum(p.health_excluded for p in figures)
        evidence = {"free": free, "healthExcluded": excluded, "needed": needed, "resource": resource}
        if free >= needed:
            return TOPOLOGY_FRAGMENTED, evidence
        if free + excluded >= needed:
            return HEALTH_BLOCKED, evidence
        return CLASS_EXHAUSTED, evidence
    if health_excluded_nodes:
        return HEALTH_BLOCKED, {"healthExcludedNodes": health_excluded_nodes}
    if fit_none and full_nodes:
        return CLASS_EXHAUSTED, {"fullNodes": full_nodes}
    return TOPOLOGY_FRAGMENTED, {}


def health_nodes_phrase(ctx: MessageContext | None, flavors: Sequence[str], resource: str) -> tuple[str, list[dict]]:
    """The nodes holding the health-excluded capacity, each with how many units and why ("8 H100 GPUs on gpu-a2
    (tainted nvidia.com/gpu-xid-error=true:NoSchedule by NVSentinel's fault quarantine; condition GpuXidError=True:
    …)"), at most five named; and the same as figures for the details. ("", []) when the portal knows none."""
    if ctx is None or not resource:
        return "", []
    nodes = ctx.health_nodes_of(flavors, resource)
    label = ctx.label(flavors[0]) if len(set(flavors)) == 1 else ""
    parts = []
    for n in nodes[:5]:
        why = f" ({'; '.join(n.causes)})" if n.causes else ""
        parts.append(f"{noun(resource, n.units, label)} on {n.node}{why}")
    if len(nodes) > 5:
        parts.append(f"and {len(nodes) - 5} more node(s)")
    figures = [{"node": n.node, "units": n.units, "causes": list(n.causes)} for n in nodes]
    return "; ".join(parts), figures


def is_health_taint(text: str, ctx: MessageContext | None) -> bool:
    """Whether a printed taint (``key=value:Effect`` or ``{key value Effect}``) is a health exclusion."""
    keys = ctx.health_taint_keys if ctx else HEALTH_TAINT_KEYS
    key = re.split(r"[=:\s{}]", text.strip("{} "), maxsplit=1)[0]
    return key in keys


def decide(reason: FlavorReason, ctx: MessageContext | None) -> FlavorReason:
    """A per-flavor reason with its final code and sentence."""
    n = reason.numbers
    label = ctx.label(reason.flavor) if ctx and reason.flavor else reason.flavor
    res = resource_label(reason.resource) if reason.resource else ""
    if reason.id == "insufficient_unused_quota":
        lent = lent_out(reason, ctx)
        if lent is not None:
            plain, figures = lent
            return replace(reason, code=QUOTA_LENT_OUT, plain=plain, numbers={**reason.numbers, **figures})
        code, plain = quota_code(reason, ctx)
        return replace(reason, code=code, plain=plain)
    if reason.id == "max_capacity_exceeded":
        request = parse_amount(n["request"], reason.resource)
        previous = parse_amount(n["previous"], reason.resource) or 0
        maximum = n["max"]
        total = (request or 0) + previous
        if maximum == "<unlimited>":  # Kueue's overflow edge case: the sum does not fit its counters
            plain = (
                f"This job asks for {format_amount(total, reason.resource)} {res} on {label}, more than Kueue can "
                "count for your team's queue (it reports the maximum as unlimited): it cannot run as submitted."
            )
        else:
            plain = (
                f"This job asks for {format_amount(total, reason.resource)} {res} on {label}, more than your team's "
                f"queue can ever give ({maximum}): it cannot run as submitted."
            )
        return replace(reason, plain=plain)
    if reason.id == "max_capacity_exceeded_legacy":
        if "request" in n:
            plain = (
                f"This job asks for {n['request']} {res} on {label}, more than your team's queue can ever give "
                f"({n['max']}): it cannot run as submitted."
            )
        else:
            plain = f"This job asks for more {res} on {label} than your team's queue can ever give."
        return replace(reason, plain=plain)
    if reason.id == "zero_count_probe_exceeded":
        plain = (
            f"A pod set of this job with no pods still needs room for one pod ({n['request']} {res}) on {label}, "
            f"more than your team's queue can ever give ({n['max']}): it cannot run as submitted."
        )
        return replace(reason, plain=plain)
    if reason.id == "borrowing_limit_exceeded":
        plain = f"Your team reached its borrowing limit for {res} on {label}; it waits for its own quota to free up."
        return replace(reason, plain=plain)
    if reason.id == "nomination_mapping_skip":
        return replace(reason, plain=f"{label} was skipped: Kueue keeps the flavor it nominated in this round.")
    if reason.id == "variant_flavor_skip":
        return replace(reason, plain=f"{label} is not allowed for this variant of the job.")
    if reason.id == "slice_flavor_mismatch":
        original = str(n.get("original", ""))
        original = ctx.label(original) if ctx else original
        plain = f"{label} cannot be used: the running part of this job is on {original}, and it must stay."
        return replace(reason, plain=plain)
    if reason.id == "resource_not_in_clusterqueue":
        return replace(reason, plain=f"Your team's queue offers no {res} at all.")
    if reason.id == "untolerated_taint":
        taint = f"{n.get('key')}={n.get('value')}:{n.get('effect')}"
        return replace(reason, plain=f"{label} nodes carry taint {taint}, which this job does not tolerate.")
    if reason.id == "node_affinity_mismatch":
        return replace(reason, plain=f"{label} does not match this job's hardware requirements.")
    if reason.id == "flavor_not_found":
        return replace(reason, plain=f"The queue names flavor {reason.flavor}, which does not exist in the cluster.")
    if reason.id == "flavor_considered_missing_resource":
        return replace(reason, plain=f"{label} has no quota for {res}.")
    if reason.id in ("tas_flavor_not_tas", "tas_flavor_only_tas", "tas_level_missing"):
        why = {
            "tas_flavor_not_tas": "cannot place pods by topology",
            "tas_flavor_only_tas": "only takes jobs that ask for a topology",
            "tas_level_missing": "has no such topology level",
        }[reason.id]
        return replace(reason, plain=f"{label} {why}.")
    if reason.id == "tas_cache_missing":
        return replace(reason, plain=f"Kueue does not know the topology of {label} yet (just created?).")
    if reason.id == "tas_no_requested_level":
        level = n.get("level") or n.get("domain_level") or n.get("podset_level") or ""
        return replace(reason, plain=f"The requested topology level {level} does not exist.")
    if reason.id in TAS_PLACEMENT_IDS:
        return _decide_placement(reason, ctx)
    return replace(reason, plain=reason.text)


def _decide_placement(reason: FlavorReason, ctx: MessageContext | None) -> FlavorReason:
    """A TAS placement failure: health_blocked, topology_fragmented or class_exhausted, from the pool view."""
    n = reason.numbers
    stats = exclusion_counts(n.get("exclusions"))
    health_nodes = sum(v for k, v in stats["taints"].items() if is_health_taint(k, ctx))
    full_nodes = sum(stats["resources"].values())
    topology = n.get("topology", "")
    flavors = (ctx.topology_flavors.get(topology) if ctx else None) or ([reason.flavor] if reason.flavor else [])
    fit_none = reason.id == "tas_fits_none"
    code, evidence = placement_code(
        flavors=flavors, ctx=ctx, health_excluded_nodes=health_nodes, full_nodes=full_nodes, fit_none=fit_none
    )
    numbers = {**n, "excluded": stats, **evidence}
    unit = n.get("unit", "pod")
    if reason.id == "tas_fits_only_some":
        head = f"Only {n['fit']} of {n['total']} {unit}s fit together in one topology domain"
    elif fit_none:
        head = f"None of the {n['total']} {unit}s fit in a topology domain"
    elif reason.id == "tas_multilayer_no_fit":
        head = "The slices do not fit the requested topology layers"
    else:
        head = "Some nodes cannot take the pods"
    tail = {
        HEALTH_BLOCKED: "nodes excluded for health hold the missing room",
        TOPOLOGY_FRAGMENTED: "there are enough free devices, but not together",
        CLASS_EXHAUSTED: "the devices are in use",
    }[code]
    if n.get("total_nodes"):
        tail += f" ({n['total_nodes']} nodes, {health_nodes} excluded for health, {full_nodes} full)"
    if code == HEALTH_BLOCKED:
        phrase, figures = health_nodes_phrase(ctx, flavors, ctx.device_resource() if ctx else "")
        if phrase:
            tail += f": {phrase}"
            numbers.update(unhealthyNodes=[f["node"] for f in figures], healthNodes=figures)
    return replace(reason, code=code, numbers=numbers, plain=f"{head}: {tail}.")


def pick(reasons: Sequence[FlavorReason], ctx: MessageContext | None) -> FlavorReason:
    """The reason that speaks for the pod set: the class's preferred flavor that can wait, else the most severe;
    within a flavor, the reason about the device before those about CPU and memory.

    Flavors outside the class are noise ("doesn't match node affinity" is how the portal confines a class).
    """
    class_flavors = list(ctx.class_flavors) if ctx else []
    relevant = [r for r in reasons if not class_flavors or not r.flavor or r.flavor in class_flavors]
    if class_flavors:
        # a TAS reason names a topology, not a flavor: keep it with the flavor it belongs to
        relevant = relevant or list(reasons)
    pool = relevant or list(reasons)
    pool = [r for r in pool if r.id not in SKIP_REASON_IDS] or pool

    device = ctx.device_resource() if ctx else ""

    def order(r: FlavorReason) -> tuple[int, int]:
        # Kueue lists every short resource of a flavor in name order (cpu, memory, nvidia.com/gpu): the device the
        # class is about speaks for the flavor, not the CPU and memory that come with it.
        at = class_flavors.index(r.flavor) if r.flavor in class_flavors else len(class_flavors)
        rank = 0 if r.resource and r.resource == device else 1 if is_device_resource(r.resource or "") else 2
        return at, rank

    waitable = sorted((r for r in pool if r.code not in NEVER_FITS), key=order)
    if waitable:
        return waitable[0]
    return sorted(pool, key=lambda r: (NEVER_FITS_ORDER.index(r.code), order(r)))[0]


def plain_numbers(reason: FlavorReason) -> dict[str, Any]:
    """The figures of a reason, quantities converted to canonical integers where they parse."""
    out: dict[str, Any] = {}
    for key, value in reason.numbers.items():
        if isinstance(value, str) and key in ("missing", "request", "previous", "max") and reason.resource:
            parsed = parse_amount(value, reason.resource)
            out[key] = parsed if parsed is not None else value
        elif isinstance(value, str) and value.isdigit():
            out[key] = int(value)
        else:
            out[key] = value
    return out
