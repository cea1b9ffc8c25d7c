"""The GPU utilisation of a job's devices while it held them, from the DCGM samples the health ingestion keeps.

A MIG slice or a time-shared replica reads its card's samples (DCGM reports busy time per card), so a shared
card's figure is the whole card's. No sample for any of the job's cards is "not scraped", not 0 %.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pools.gpu_usage import DeviceUtilisation, utilisation_over
from pools.models import Allocation
from queues.models import Job


@dataclass(frozen=True)
class CardUtilisation:
    """One card the job held: where, which pods, whether it is shared, and its utilisation (None: not scraped)."""

    label: str
    pods: tuple[int, ...]
    shared: bool
    util: DeviceUtilisation | None


@dataclass(frozen=True)
class JobUtilisation:
    """Every card the job held, and the mean over those with samples (None when none was scraped)."""

    cards: list[CardUtilisation]
    average: float | None

    @property
    def scraped(self) -> bool:
        """Whether any of the job's cards had a DCGM sample while it held it."""
        return self.average is not None


def job_utilisation(job: Job, *, now: datetime) -> JobUtilisation:
    """Utilisation of the job's cards over its allocations (open ones up to ``now``), in two queries."""
    allocations = Allocation.objects.filter(job=job).select_related("device__node", "device__parent")
    intervals = []
    cards: dict[int, dict] = {}
    for a in allocations.order_by("pod_index", "device__index", "started_at"):
        card = a.device.parent or a.device
        intervals.append((card.pk, a.started_at, a.ended_at or now))
        entry = cards.setdefault(
            card.pk, {"label": f"{card.node.name} GPU {card.index}", "pods": set(), "shared": a.device.parent_id}
        )
        entry["pods"].add(a.pod_index)
    found = utilisation_over(intervals)
    rows = [
        CardUtilisation(label=e["label"], pods=tuple(sorted(e["pods"])), shared=bool(e["shared"]), util=found.get(pk))
        for pk, e in cards.items()
    ]
    scraped = [r.util.average for r in rows if r.util is not None]
    return JobUtilisation(cards=rows, average=sum(scraped) / len(scraped) if scraped else None)
