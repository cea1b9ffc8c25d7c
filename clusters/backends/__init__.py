"""Cluster backends: the only code that talks to a cluster. One interface, one implementation per kind."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from clusters.backends.base import ClusterBackend
from clusters.backends.kubernetes import KubernetesBackend
from clusters.backends.simulated import SimulatedBackend
from pools.models import Cluster

BACKENDS: dict[str, type] = {
    Cluster.Backend.SIMULATED: SimulatedBackend,
    Cluster.Backend.KUBERNETES: KubernetesBackend,
}


def backend_for(cluster: Cluster) -> ClusterBackend:
    """The backend that drives ``cluster``."""
    try:
        return BACKENDS[cluster.backend](cluster)
    except KeyError:
        raise ImproperlyConfigured(
            f"cluster {cluster.name}: unknown backend {cluster.backend!r}; use simulated or kubernetes"
        ) from None


__all__ = ["ClusterBackend", "backend_for"]
