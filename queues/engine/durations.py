"""Durations as scenario files and Kueue's Configuration write them: ``90s``, ``1500ms``, ``10m``, ``1h30m0s``."""

from __future__ import annotations

import math
import re

_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration(text: str | int | float) -> float:
    """Parse "90s", "1500ms", "10m", "1h30m", "2d" or a plain number of seconds."""
    if isinstance(text, bool):
        raise ValueError(f"invalid duration {text!r}")
    if isinstance(text, int | float):
        if text < 0:
            raise ValueError(f"invalid duration {text!r}: must not be negative")
        return float(text)
    value = str(text).strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise ValueError(f"invalid duration {text!r}: expected e.g. '90s', '1500ms', '10m', '1h30m'")
        if seconds < 0:
            raise ValueError(f"invalid duration {text!r}: must not be negative")
        return seconds
    pos = 0
    total = 0.0
    unit = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
    for match in _DURATION_RE.finditer(value):
        if match.start() != pos:
            break
        total += float(match.group(1)) * unit[match.group(2)]
        pos = match.end()
    if pos != len(value) or not value:
        raise ValueError(f"invalid duration {text!r}: expected e.g. '90s', '1500ms', '10m', '1h30m'")
    return total


__all__ = ["parse_duration"]
