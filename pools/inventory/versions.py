"""Driver and CUDA versions compared as numbers: GFD says 580.126.09, DRA's semver says 580.126.9."""

from __future__ import annotations

import re

_NUMBER = re.compile(r"\d+")


def version_tuple(version: str) -> tuple[int, ...]:
    """The numeric parts of a version string, trailing zeros dropped ("580.126.09" → (580, 126, 9))."""
    parts = [int(p) for p in _NUMBER.findall(version.split("+", 1)[0].split("-", 1)[0])]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def compare_versions(a: str, b: str) -> int:
    """-1, 0 or 1 as version ``a`` is older than, equal to or newer than ``b``."""
    ta, tb = version_tuple(a), version_tuple(b)
    return (ta > tb) - (ta < tb)


def version_at_least(version: str, minimum: str) -> bool:
    """Whether ``version`` meets ``minimum``; an unknown (empty) version never does."""
    if not version:
        return False
    return compare_versions(version, minimum) >= 0
