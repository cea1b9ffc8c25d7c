"""``{% live_note rendered_at "5 s" %}``: the pages' "updated …; refreshes every …" line, or, when the live data is
paused, the sentence that says so (one predicate: liveness.selectors.live_data_status)."""

from __future__ import annotations

from django import template
from django.utils import timezone

from liveness.selectors import live_data_status

register = template.Library()

#: Where a request keeps the answer, so that a page with several live fragments asks once.
REQUEST_ATTR = "_liveness_live_data"


@register.inclusion_tag("liveness/live_note.html", takes_context=True)
def live_note(context, rendered_at=None, every: str = "", while_text: str = "") -> dict:
    """The live note of a polling page or fragment: when it was rendered, how often it refreshes (``every``, e.g.
    "5 s"; empty: it does not poll), and the live data's pause when there is one."""
    request = context.get("request")
    live = getattr(request, REQUEST_ATTR, None) if request is not None else None
    if live is None:
        live = live_data_status()
        if request is not None:
            setattr(request, REQUEST_ATTR, live)
    return {
        "rendered_at": rendered_at or timezone.now(),
        "every": every,
        "while_text": while_text,
        "live": live,
        # the site's context processor says whether the user may open the status page (admins and operators)
        "status_link": bool(context.get("CAN_SEE_STATUS")),
    }
