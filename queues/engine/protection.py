"""Protected work: when a running workload's preemption protection (``model.Protection``) keeps it from being a
preemption candidate, why, and until when (docs/engine.md, *Protected work*).

Times are the engine's seconds; ``start`` is the workload's admission (its run's start). Three rules, each of which
may protect at an instant:

* ``min_runtime`` — before ``start + min_runtime``;
* ``finishing`` — in ``[start + max_runtime - finishing_window, start + max_runtime)``: it ends by then anyway;
* ``checkpoint`` — its checkpoints fall at ``start + k * interval`` (k >= 1); it may be preempted only in the
  ``grace`` seconds after one, and is protected until the next one otherwise.

A workload is protected while any rule holds; it stops being protected at the first instant no rule holds
(``protected_until`` follows one rule's end into the next).
"""

from __future__ import annotations

from .model import Protection

MIN_RUNTIME = "min_runtime"
FINISHING = "finishing"
CHECKPOINT = "checkpoint"

#: Each rule in words, for the sentences that name it.
RULE_TEXT = {
    MIN_RUNTIME: "it has not yet run its minimum runtime",
    FINISHING: "it is finishing (in the last minutes of its maximum runtime)",
    CHECKPOINT: "it is preempted only just after a checkpoint, and its next checkpoint is due",
}


def _checkpoints_done(p: Protection, start: float, now: float) -> int:
    """How many checkpoints the workload has written by ``now`` (at ``start + k * interval``, k >= 1)."""
    interval = p.checkpoint_interval or 0.0
    if interval <= 0 or now < start:
        return 0
    k = int((now - start) // interval)
    while start + (k + 1) * interval <= now:  # floating point: an instant exactly at a checkpoint counts it
        k += 1
    while k > 0 and start + k * interval > now:
        k -= 1
    return k


def rules_at(p: Protection, start: float, now: float) -> list[tuple[str, float]]:
    """The rules that protect the workload at ``now``, each with the instant it stops protecting."""
    out: list[tuple[str, float]] = []
    if p.min_runtime > 0 and now < start + p.min_runtime:
        out.append((MIN_RUNTIME, start + p.min_runtime))
    if p.max_runtime is not None and p.finishing_window > 0:
        end = start + p.max_runtime
        if end - p.finishing_window <= now < end:
            out.append((FINISHING, end))
    interval = p.checkpoint_interval or 0.0
    if interval > 0:
        k = _checkpoints_done(p, start, now)
        if k == 0 or now - (start + k * interval) > p.checkpoint_grace:
            out.append((CHECKPOINT, start + (k + 1) * interval))
    return out


def protected_until(p: Protection | None, start: float | None, now: float) -> tuple[float, str] | None:
    """(the first instant the workload may be preempted, the rule protecting it now) — None when it may be now.

    One rule's end may fall inside another's stretch (a minimum runtime that ends between two checkpoints): the
    answer follows them to the first instant none holds.
    """
    if p is None or start is None:
        return None
    rules = rules_at(p, start, now)
    if not rules:
        return None
    rule, until = max(rules, key=lambda r: (r[1], r[0]))
    for _ in range(8):
        later = rules_at(p, start, until)
        if not later:
            break
        until = max(end for _, end in later)
    return until, rule


def next_release(p: Protection, start: float, after: float) -> float | None:
    """The first instant after ``after`` at which a protection of the workload may lapse (None: never again)."""
    candidates = []
    if p.min_runtime > 0 and after < start + p.min_runtime:
        candidates.append(start + p.min_runtime)
    interval = p.checkpoint_interval or 0.0
    if interval > 0:
        candidates.append(start + (_checkpoints_done(p, start, after) + 1) * interval)
    if p.max_runtime is not None and candidates and min(candidates) >= start + p.max_runtime:
        return None  # it has ended by then
    return min(candidates) if candidates else None


def remaining_text(seconds: float) -> str:
    """How long a protection still holds, for people: "12 more minutes", "1 h 30 min more", "a moment more"."""
    minutes = int(-(-max(seconds, 0.0) // 60))
    if minutes <= 0:
        return "a moment more"
    if minutes < 120:
        return f"{minutes} more minute{'s' if minutes != 1 else ''}"
    hours, rest = divmod(minutes, 60)
    return f"{hours} h {rest} min more" if rest else f"{hours} more hours"


def protection_sentence(victims: list[dict], now: float) -> str:
    """The sentence a wait reason adds when the jobs it would preempt are protected, as of ``now``.

    ``victims``: ``{"workload": key, "until": instant, "rule": rule}`` each (a reason's ``protectedVictims``).
    """
    phrases = [
        f"not preempting {v['workload']}: protected for {remaining_text(float(v['until']) - now)} "
        f"({RULE_TEXT.get(str(v['rule']), str(v['rule']))})"
        for v in victims[:5]
    ]
    if len(victims) > 5:
        phrases.append(f"and {len(victims) - 5} more protected job(s)")
    return (
        f"It could start by preempting, but the jobs it would preempt are protected: {'; '.join(phrases)}. "
        "It can preempt them once that ends."
    )
