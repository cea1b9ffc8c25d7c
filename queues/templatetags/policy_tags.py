"""Template tags of the policy admin pages."""

from __future__ import annotations

from django import template
from django.utils.html import format_html

from queues.policy.whatif import TeamOutcome, utilisation_verdict

register = template.Library()


def _fmt(value, kind: str) -> str:
    if value is None:
        return "–"
    if kind == "duration":
        seconds = float(value)
        if seconds < 3600:
            return f"{seconds / 60:.0f} min"
        return f"{seconds / 3600:.1f} h"
    if kind == "percent":
        percent = float(value) * 100
        return f"{percent:.0f}%" if percent >= 10 else f"{percent:.1f}%"
    if kind == "int":
        return f"{int(value)}"
    return f"{float(value):.1f}"


@register.simple_tag
def whatif_cell(before, after, kind: str, lower_is_better) -> str:
    """``before → after``, the after value marked better or worse when it moved and direction matters."""
    before = None if before == "" else before  # a queue that exists on one side only
    after = None if after == "" else after
    if before == after or lower_is_better is None or before is None or after is None:
        css = ""
    elif (after < before) == bool(lower_is_better):
        css = "whatif-better"
    else:
        css = "whatif-worse"
    if before == after:
        return format_html("{}", _fmt(after, kind))
    return format_html('{} → <span class="{}">{}</span>', _fmt(before, kind), css, _fmt(after, kind))


@register.simple_tag
def whatif_utilisation_cell(before: TeamOutcome | None, after: TeamOutcome | None) -> str:
    """A team's utilisation ``before → after``, marked by ``utilisation_verdict`` (the GPU-hours its jobs used, not
    the ratio: a rise that comes from a quota cut is not an improvement); the title says why."""
    before = before or None  # a queue that exists on one side only renders as ""
    after = after or None
    old = before.utilisation if before else None
    new = after.utilisation if after else None
    if old == new:
        return format_html("{}", _fmt(new, "percent"))
    verdict = utilisation_verdict(before, after)
    why = ""
    if before and after:
        used = f"GPU-hours used {before.used_device_hours:.1f} → {after.used_device_hours:.1f}"
        quota = before.nominal_device_hours, after.nominal_device_hours
        if quota[1] < quota[0]:
            why = f"Quota cut (nominal GPU-h {quota[0]:.0f} → {quota[1]:.0f}); coloured by {used}"
        elif quota[1] > quota[0]:
            why = f"Quota raised (nominal GPU-h {quota[0]:.0f} → {quota[1]:.0f}); coloured by {used}"
        else:
            why = f"Coloured by {used}"
    css = f"whatif-{verdict}" if verdict else "whatif-neutral"
    return format_html(
        '{} → <span class="{}" title="{}" data-verdict="{}">{}</span>',
        _fmt(old, "percent"),
        css,
        why,
        verdict or "neutral",
        _fmt(new, "percent"),
    )
