"""The entry points: one Kueue text → a :class:`Translation`, and the kube-scheduler's texts for admitted pods."""

from __future__ import annotations

import re
from collections.abc import Iterable

from queues.engine.wait_codes import CLASS_EXHAUSTED, HEALTH_BLOCKED, NO_MATCHING_FLAVOR, TOPOLOGY_FRAGMENTED

from .codes import UNRECOGNISED, reason_hint
from .context import MessageContext, Translation
from .flavors import decide, health_nodes_phrase, is_health_taint, pick, placement_code, plain_numbers
from .patterns import scan_reasons
from .sentences import podset_translation, whole_translation


def translate(message: str, *, reason: str = "", context: MessageContext | None = None) -> Translation:
    """The portal's reading of a Kueue condition or event message (see :mod:`queues.kueue_messages`)."""
    text = (message or "").strip()
    if text.endswith(" ..."):  # events are truncated at 1 KiB
        text = text[:-4]
    result = podset_translation(text, context) or whole_translation(text, reason, context)
    if result is None and text:
        found, unknown = scan_reasons(text)
        if found and not unknown:
            decided = [decide(r, context) for r in found]
            main = pick(decided, context)
            result = Translation(
                main.code,
                main.plain,
                text,
                tuple(sorted({r.id for r in decided})),
                {"flavor": main.flavor, "resource": main.resource, **plain_numbers(main)},
            )
    if result is None:
        hint = reason_hint(reason)
        details = {"unrecognised": True, "reason": reason}
        if hint:
            details["reasonHint"] = hint
        return Translation(UNRECOGNISED, text or "(no message)", text, (), details)
    if reason:
        result.details.setdefault("reason", reason)
    return result


# --- the kube-scheduler's view of pods of an admitted workload ----------------------------------------------------

_SCHED_INSUFFICIENT = re.compile(r"(?P<n>\d+) Insufficient (?P<resource>\S+?)[.,]?(?=\s|$)")
_SCHED_TAINT = re.compile(r"(?P<n>\d+) node\(s\) had untolerated taint\(?s?\)? \{(?P<taint>[^}]*)\}")
_SCHED_CORDONED = re.compile(r"(?P<n>\d+) node\(s\) were unschedulable")
_SCHED_AFFINITY = re.compile(r"(?P<n>\d+) node\(s\) didn't match Pod's node affinity/selector")
_SCHED_TOTAL = re.compile(r"^0/(?P<total>\d+) nodes are available")


def pods_unschedulable(messages: Iterable[str], *, context: MessageContext | None = None) -> Translation | None:
    """Why the pods of an admitted workload do not get nodes, from the scheduler's ``FailedScheduling`` texts."""
    texts = [m for m in messages if m]
    if not texts:
        return None
    text = texts[0]
    main = text.split(" preemption:", 1)[0]
    health = sum(int(m.group("n")) for m in _SCHED_TAINT.finditer(main) if is_health_taint(m.group("taint"), context))
    cordoned = sum(int(m.group("n")) for m in _SCHED_CORDONED.finditer(main))
    insufficient = {m.group("resource"): int(m.group("n")) for m in _SCHED_INSUFFICIENT.finditer(main)}
    total = _SCHED_TOTAL.search(main)
    if not (health or cordoned or insufficient or _SCHED_AFFINITY.search(main)):
        return Translation(UNRECOGNISED, text, text, (), {"unrecognised": True, "source": "kube-scheduler"})
    flavors = list(context.class_flavors) if context else []
    code, evidence = placement_code(
        flavors=flavors,
        ctx=context,
        health_excluded_nodes=health + cordoned,
        full_nodes=sum(insufficient.values()),
        fit_none=True,
    )
    if not (health or cordoned or insufficient):
        code = NO_MATCHING_FLAVOR
    details = {
        "source": "kube-scheduler",
        "nodes": int(total.group("total")) if total else None,
        "insufficient": insufficient,
        "healthExcludedNodes": health,
        "cordonedNodes": cordoned,
        **evidence,
    }
    plain = {
        HEALTH_BLOCKED: "Admitted, but the pods cannot start: the free capacity sits on nodes excluded for health "
        "(tainted or cordoned).",
        TOPOLOGY_FRAGMENTED: "Admitted, but the pods cannot start: enough devices are free in total, not on the "
        "same nodes.",
        CLASS_EXHAUSTED: "Admitted, but the pods cannot start: the nodes' devices are in use.",
        NO_MATCHING_FLAVOR: "Admitted, but no node matches the pods' requirements.",
    }[code]
    if code == HEALTH_BLOCKED:
        phrase, figures = health_nodes_phrase(context, flavors, context.device_resource() if context else "")
        if phrase:
            head = "Admitted, but the pods cannot start: the free capacity sits on nodes excluded for health"
            plain = f"{head}: {phrase}."
            details.update(unhealthyNodes=[f["node"] for f in figures], healthNodes=figures)
    return Translation(code, plain, text, ("kube_scheduler_unschedulable",), details)


# --- reading a whole Workload -------------------------------------------------------------------------------------
