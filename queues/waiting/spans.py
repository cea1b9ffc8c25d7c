"""A job's waiting as spans of one wait code each, read from its timeline, and their split into weeks.

Pure Python over ``(kind, at, code)`` tuples, so the rollup, the tests and the benchmark share one reading:

* a job waits from ``submitted`` (or ``requeued``) until ``admitted`` or until it ends (cancelled, failed…);
* while it waits, each ``wait_reason`` event closes the span before it and opens one with its code;
* the time before the first reason of a wait counts toward that first reason (the job waited for what the first
  diagnosis found: the diagnosis runs after the submission, not before it); a wait that ends before any reason
  was recorded counts as ``""`` (cause *no reason recorded*);
* a ``wait_reason`` event outside a wait (a job synced from a cluster without its submission) opens one;
* the last span of a job still waiting is open (``end`` is None): it grows until the next event.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta, tzinfo

#: Timeline kinds that start a wait.
STARTS = frozenset({"submitted", "requeued"})
#: Timeline kinds that end a wait.
ENDS = frozenset({"admitted", "succeeded", "failed", "cancelled", "timed_out"})
#: The wait-reason change.
REASON = "wait_reason"
#: Every kind the attribution reads (the rollup's event filter).
KINDS = STARTS | ENDS | {REASON}


@dataclass(frozen=True, slots=True)
class Span:
    """[start, end) of one wait code of a job (``end`` None: still waiting)."""

    code: str
    start: datetime
    end: datetime | None


def wait_spans(events: Iterable[tuple[str, datetime, str]]) -> list[Span]:
    """The wait spans of one job from its events ``(kind, at, code)``, in timeline order (at, then id)."""
    spans: list[Span] = []
    waiting = False
    since: datetime | None = None
    code: str | None = None  # None: no reason yet in this wait
    for kind, at, event_code in events:
        if kind in STARTS:
            if not waiting:
                waiting, since, code = True, at, None
        elif kind == REASON:
            new = event_code or ""
            if not waiting:
                waiting, since, code = True, at, new
                continue
            if code is None:
                code = new  # the undiagnosed start of the wait counts toward the first reason
                continue
            if new == code:
                continue
            assert since is not None
            if at > since:
                spans.append(Span(code, since, at))
            since, code = at, new
        elif kind in ENDS and waiting:
            assert since is not None
            if at > since:
                spans.append(Span(code or "", since, at))
            waiting, since, code = False, None, None
    if waiting:
        assert since is not None
        spans.append(Span(code or "", since, None))
    return spans


def week_start(when: datetime, tz: tzinfo) -> date:
    """The Monday of the week ``when`` falls in, in ``tz``."""
    local = when.astimezone(tz).date()
    return local - timedelta(days=local.weekday())


def week_bounds(monday: date, tz: tzinfo) -> tuple[datetime, datetime]:
    """[Monday 00:00, next Monday 00:00) of a week in ``tz`` (aware; a DST change makes it 167 or 169 hours)."""
    lo = datetime(monday.year, monday.month, monday.day, tzinfo=tz)
    after = monday + timedelta(days=7)
    return lo, datetime(after.year, after.month, after.day, tzinfo=tz)


def duration_us(start: datetime, end: datetime) -> int:
    """Whole microseconds from ``start`` to ``end``."""
    delta = end - start
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def split_weeks(start: datetime, end: datetime, tz: tzinfo) -> Iterator[tuple[date, int]]:
    """(Monday, µs) of [start, end) in each week it touches."""
    monday = week_start(start, tz)
    while True:
        lo, hi = week_bounds(monday, tz)
        a, b = max(start, lo), min(end, hi)
        if b > a:
            yield monday, duration_us(a, b)
        if end <= hi:
            return
        monday += timedelta(days=7)
