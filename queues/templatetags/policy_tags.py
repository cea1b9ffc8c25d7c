"""Template tags of the policy admin pages."""

from __future__ import annotations

from django import template
from django.utils.html import format_html

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
