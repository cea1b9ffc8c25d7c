"""The collector behind ``/metrics`` and the registry it lives on (not prometheus-client's global one)."""

from __future__ import annotations

from collections.abc import Iterable

from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from portal.metrics.liveness_metrics import liveness_families
from portal.metrics.ops_metrics import ops_families
from portal.metrics.queue_metrics import queue_families


class PortalCollector(Collector):
    """Reads the portal's current state from the database at each scrape: a fixed number of grouped queries."""

    def collect(self) -> Iterable[Metric]:
        """Every metric family, computed now."""
        now = timezone.now()
        yield from queue_families(now)
        yield from ops_families(now)
        yield from liveness_families(now)

    def describe(self) -> Iterable[Metric]:
        """Nothing: registering must not query the database (prometheus-client calls this at registration)."""
        return []


def portal_registry() -> CollectorRegistry:
    """A registry holding only the portal collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PortalCollector())
    return registry


def metrics_text() -> bytes:
    """The current metrics in Prometheus' text exposition format."""
    return generate_latest(portal_registry())
