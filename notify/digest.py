"""The text of a digest: one event as itself, several as a count per kind and the first lines (pure)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime

from django.conf import settings

from notify.kinds import Kind
from notify.models import Event

PREFIX = "[GPU Pool Portal]"


def _same(text: str) -> str:
    return text


def _line(event: Event, *, now: datetime, redact: Callable[[str], str] = _same) -> str:
    """One event as a line: its title, its message and, for a reclaim, the grace left now."""
    text = redact(f"{event.title}: {event.message}")
    deadline = (event.details or {}).get("deadline")
    if event.kind == Kind.RECLAIM and deadline:
        left = (datetime.fromisoformat(deadline) - now).total_seconds()
        text += f" ({int(left)} s of grace left)" if left > 0 else " (the grace period is over)"
    return text


def digest_compose(events: Sequence[Event], *, now: datetime, redact: Callable[[str], str] = _same) -> tuple[str, str]:
    """(subject, text) of a digest of ``events`` (oldest first), at most ``NOTIFY_DIGEST_LINES`` lines of detail;
    ``redact`` is the recipient's privacy rule (queues.privacy), applied again to each line and the subject (the
    events were written redacted; rows recorded before that rule was applied there are covered too)."""
    link = settings.NOTIFY_PORTAL_URL.rstrip("/")
    footer = f"\n\nAll notifications and preferences: {link}/notifications/" if link else ""
    if len(events) == 1:
        event = events[0]
        return f"{PREFIX} {redact(event.title)}"[:200], _line(event, now=now, redact=redact) + footer
    counts = Counter(e.kind for e in events)
    summary = ", ".join(f"{n} × {Kind(kind).label.lower()}" for kind, n in counts.most_common())
    limit = settings.NOTIFY_DIGEST_LINES
    lines = [f"• {_line(e, now=now, redact=redact)}" for e in events[:limit]]
    if len(events) > limit:
        lines.append(f"… and {len(events) - limit} more.")
    subject = f"{PREFIX} {len(events)} updates on your jobs"
    return subject, f"{len(events)} updates: {summary}.\n\n" + "\n".join(lines) + footer
