"""Batch sizes and small formatting helpers the sync's modules share."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

#: Rows per bulk write and per evaluation chunk.
BATCH = 500


def chunks(items: list, size: int = BATCH) -> Iterable[list]:
    """``items`` in consecutive slices of at most ``size``."""
    for i in range(0, len(items), size):
        yield items[i : i + size]


def iso_time(when: datetime) -> str:
    """A UTC time as Kubernetes writes it (``2026-01-02T03:04:05Z``)."""
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")
