"""Fewer cyclic-garbage collections while the engine runs a burst of cycles.

A replay allocates millions of short-lived tuples and dicts; with CPython's default young-generation threshold
(700 allocations) the collector runs every few cycles and rescans the engine's long-lived structures, which
cost about a sixth of a replay's time. The engine creates few reference cycles, so during a burst the young
generation is collected less often (the thresholds are restored afterwards; nothing is left uncollected).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

#: Allocations between young-generation collections during a burst (CPython's default is 700).
BURST_THRESHOLD = 50_000


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Raise the young-generation threshold for the duration of the block (nested uses keep the outer one)."""
    old = gc.get_threshold()
    if old[0] >= BURST_THRESHOLD or not gc.isenabled():
        yield
        return
    gc.set_threshold(BURST_THRESHOLD, *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


@contextmanager
def paused_collections() -> Iterator[None]:
    """No cyclic-garbage collection for the duration of the block (reference counting still frees nearly all).

    For one bounded computation (a diagnosis: one engine, one replay, seconds long) whose objects rarely form
    cycles: even at ``BURST_THRESHOLD`` each young-generation collection rescans tens of thousands of objects the
    computation still holds (about 7 % of a 10,000-job diagnosis); the cycles left, if any, are collected after it.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
