"""GPU activity from the DCGM scrapes (percent busy per card), kept for a while.

Two DCGM fields say how busy a card is: ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (a profiling metric: the share of time
the graphics/compute engine was active, 0..1) and ``DCGM_FI_DEV_GPU_UTIL`` (percent of the sample period a kernel
ran: a single tiny kernel keeps it near 100 %, so it overstates how busy a card is). :func:`activity_percent`
prefers the first and falls back to the second; one percent per card and scrape is stored either way.

The health ingestion (:func:`pools.health.ingest.health_ingest_scrape`) stores one sample per card and scrape;
:func:`utilisation_over` reads them back for some devices over some intervals (a job's allocations), and
:func:`utilisation_prune` forgets samples older than ``GPU_UTIL_RETENTION_DAYS``. A card whose exporter does not
report the field has no samples: "not scraped", never 0 %.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.db.models import Avg, Count, Max, Min, Q

GPU_UTIL_FIELD = "DCGM_FI_DEV_GPU_UTIL"
ENGINE_ACTIVE_FIELD = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"


def activity_percent(fields: Mapping[str, float]) -> float | None:
    """How busy a card was in one scrape, in percent: ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` × 100 where the exporter
    reports it, else ``DCGM_FI_DEV_GPU_UTIL``; None when it reports neither (not scraped, never 0 %)."""
    if ENGINE_ACTIVE_FIELD in fields:
        return fields[ENGINE_ACTIVE_FIELD] * 100.0
    return fields.get(GPU_UTIL_FIELD)


class GpuUtilSample(models.Model):
    """One scrape's activity of one card (percent: GR engine active where reported, else GPU utilisation)."""

    device = models.ForeignKey("pools.Device", on_delete=models.CASCADE, related_name="util_samples")
    observed_at = models.DateTimeField()
    # DCGM_FI_PROF_GR_ENGINE_ACTIVE × 100 where the exporter reports it, else DCGM_FI_DEV_GPU_UTIL (activity_percent)
    gpu_util = models.FloatField(help_text="Percent of the sample period the GPU was busy (0-100).")

    class Meta:
        app_label = "pools"
        ordering = ["device", "observed_at"]
        constraints = [
            models.UniqueConstraint(fields=["device", "observed_at"], name="gpuutil_once_per_scrape"),
        ]
        indexes = [models.Index(fields=["observed_at"], name="gpuutil_observed")]

    def __str__(self) -> str:
        return f"{self.device_id} {self.gpu_util:.0f}% @ {self.observed_at:%Y-%m-%d %H:%M:%S}"


def utilisation_record(samples: Iterable[tuple[int, float]], *, now: datetime) -> int:
    """Store ``(device id, percent)`` pairs observed at ``now`` (a second scrape at the same instant is ignored)."""
    rows = [GpuUtilSample(device_id=d, observed_at=now, gpu_util=max(0.0, min(100.0, v))) for d, v in samples]
    GpuUtilSample.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)


def utilisation_prune(*, now: datetime) -> int:
    """Forget samples older than ``GPU_UTIL_RETENTION_DAYS``; how many went."""
    cutoff = now - timedelta(days=settings.GPU_UTIL_RETENTION_DAYS)
    deleted, _ = GpuUtilSample.objects.filter(observed_at__lt=cutoff).delete()
    return deleted


@dataclass(frozen=True)
class DeviceUtilisation:
    """A card's utilisation over some intervals: mean, range, number of samples and the first and latest samples'
    times."""

    device_id: int
    samples: int
    average: float
    low: float
    high: float
    last_at: datetime
    first_at: datetime | None = None


def _summaries(samples) -> dict[int, DeviceUtilisation]:  # type: ignore[no-untyped-def]
    """Per device: count, mean, range and latest time of the given samples (one query)."""
    rows = (
        samples.values("device_id")
        .annotate(
            n=Count("pk"),
            avg=Avg("gpu_util"),
            low=Min("gpu_util"),
            high=Max("gpu_util"),
            last=Max("observed_at"),
            first=Min("observed_at"),
        )
        .order_by()
    )
    return {
        r["device_id"]: DeviceUtilisation(r["device_id"], r["n"], r["avg"], r["low"], r["high"], r["last"], r["first"])
        for r in rows
    }


def utilisation_window(device_ids: Iterable[int], *, start: datetime, end: datetime) -> dict[int, DeviceUtilisation]:
    """Per device, the samples in [start, end] (the same window for all; one query per 500 devices)."""
    ids = sorted(set(device_ids))
    found: dict[int, DeviceUtilisation] = {}
    for i in range(0, len(ids), 500):
        window = GpuUtilSample.objects.filter(device_id__in=ids[i : i + 500], observed_at__gte=start,
                                              observed_at__lte=end)  # fmt: skip
        found.update(_summaries(window))
    return found


def utilisation_over(intervals: Iterable[tuple[int, datetime, datetime]]) -> dict[int, DeviceUtilisation]:
    """Per device, the samples within its ``(device id, start, end)`` intervals (one query)."""
    condition = Q()
    for device_id, start, end in intervals:
        condition |= Q(device_id=device_id, observed_at__gte=start, observed_at__lte=end)
    if not condition:
        return {}
    return _summaries(GpuUtilSample.objects.filter(condition))
