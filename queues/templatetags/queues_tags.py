"""Template helpers of the researcher pages: durations, ETAs, state badges, topology level names."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from decimal import Decimal

from django import template
from django.utils import timezone

from kernel.labels import duration_short, duration_words
from pools.workload_kinds import KINDS, kind_spec
from queues import selectors as sel
from queues.engine import wait_codes

register = template.Library()

#: Badge colour (a portal.css badge class) per job state.
STATE_BADGES = {
    "pending": "degraded",
    "admitted": "validating",
    "running": "in-use",
    "preempting": "quarantined",
    "suspended": "cordoned",
    "succeeded": "free",
    "failed": "unhealthy",
    "cancelled": "retired",
    "timed-out": "unhealthy",
}


@register.filter
def state_badge(state: str) -> str:
    """The badge class of a job state."""
    return f"badge-{STATE_BADGES.get(state, 'cordoned')}"


@register.filter
def assigned_nodes(assignment: dict) -> list[str]:
    """The distinct nodes of an admission's pod sets (``Job.assignment``), in order of first use."""
    nodes = (node for ps in (assignment or {}).get("podSets", []) for node in ps.get("nodes", []))
    return list(dict.fromkeys(nodes))


@register.filter
def never_fits(code: str) -> bool:
    """Whether a wait code means the job can never start as it is (one set: queues.engine.wait_codes.NEVER_FITS)."""
    return wait_codes.never_fits(code)


def _human(seconds: float) -> str:
    return duration_short(seconds)


@register.filter
def duration(value: timedelta | float | int | None) -> str:
    """A length of time for people: ``42 s``, ``25 min``, ``3 h 5 min``, ``2 d 4 h``."""
    if value is None or value == "":
        return ""
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    return _human(seconds)


@register.filter
def ran_for(started: datetime | None, finished: datetime | None) -> str:
    """How long something ran, in words: ``started|ran_for:finished`` → "45 seconds", "3 hours 5 minutes"."""
    if started is None or finished is None:
        return ""
    return duration_words((finished - started).total_seconds())


@register.filter
def until(when: datetime | None) -> str:
    """Time from now to ``when``: ``in 25 min``; ``now`` when past."""
    if when is None:
        return ""
    seconds = (when - timezone.now()).total_seconds()
    return "now" if seconds < 30 else f"in {_human(seconds)}"


@register.filter
def since(when: datetime | None) -> str:
    """Time from ``when`` to now: ``12 min``."""
    if when is None:
        return ""
    return _human((timezone.now() - when).total_seconds())


@register.filter
def ago(when: datetime | None) -> str:
    """When something happened, cheaply (the job list renders it per row): ``12 min ago``; a date past 2 days."""
    if when is None:
        return ""
    seconds = (timezone.now() - when).total_seconds()
    if seconds < 60:
        return "just now"
    if seconds < 2 * 86400:
        return f"{_human(seconds)} ago"
    local = timezone.localtime(when)
    return f"{local:%b} {local.day}, {local:%Y %H:%M}"


@register.filter
def level_label(level: str) -> str:
    """``cloud.provider.com/topology-rack`` → ``rack``; hostname → ``node``."""
    return sel.level_label(level) if level else ""


@register.simple_tag
def units(resource_name: str, n: int) -> str:
    """``8 GPUs``, ``1 MIG slice``."""
    return sel.unit_noun(resource_name, int(n or 0))


@register.filter
def percent(part: int, whole: int) -> int:
    """``part`` as a whole percentage of ``whole`` (0 when whole is 0), capped at 100."""
    if not whole:
        return 0
    return min(round(100 * part / whole), 100)


@register.filter
def counts_label(rc) -> str:
    """The counts a class allows per pod with their unit: ``1, 2, 4, 8 GPUs``, ``1 time-shared GPU``."""
    counts = sorted(rc.allowed_counts or [1])
    unit = sel.unit_noun(rc.resource_name, 2 if counts != [1] else 1).split(" ", 1)[1]
    return f"{', '.join(map(str, counts))} {unit}"


@register.filter
def device_hours(seconds: float | None) -> str:
    """Device-seconds as device-hours with one decimal: 45000 → "12.5"."""
    return f"{(seconds or 0) / 3600:,.1f}"


@register.filter
def hours1(value: Decimal | float | None) -> str:
    """Device-hours with two decimals for a job's small numbers: Decimal("0.0833") → "0.08 h"."""
    return f"{Decimal(value or 0):,.2f} h"


@register.filter
def amounts(money: dict | None) -> str:
    """Money per currency (``{"EUR": Decimal("3.5")}`` → "3.50 EUR"); "0.00" when none."""
    parts = [f"{Decimal(v):,.2f} {c}" for c, v in sorted((money or {}).items()) if v]
    return " · ".join(parts) or "0.00"


@register.filter
def kind_help(kind: str) -> str:
    """What a workload kind is and how it ends, for the submit form."""
    return kind_spec(kind).summary if kind in KINDS else ""


@register.filter
def form_field(form, name: str):  # type: ignore[no-untyped-def]
    """The bound field ``name`` of ``form`` (fields added per kind have names templates cannot spell)."""
    return form[name]


#: How a reason written to the job's team reads to someone outside it (an operator, an admin): "your team" is
#: the job's team, named; "your queue", "your borrowing limit", "your own quota" are its.
_SECOND_PERSON = (
    (re.compile(r"\bYour team's\b"), "Team {team}'s"),
    (re.compile(r"\byour team's\b"), "team {team}'s"),
    (re.compile(r"\bYour team\b"), "Team {team}"),
    (re.compile(r"\byour team\b"), "team {team}"),
    (re.compile(r"\bYour\b"), "Its"),
    (re.compile(r"\byour\b"), "its"),
)


@register.filter
def for_outsider(message: str, team_name: str) -> str:
    """A wait reason or timeline line, as read by someone outside the job's team ("Team Vision uses 2 of its 16…")."""
    text = str(message or "")
    for pattern, words in _SECOND_PERSON:
        text = pattern.sub(words.format(team=team_name).replace("\\", "\\\\"), text)
    return text
