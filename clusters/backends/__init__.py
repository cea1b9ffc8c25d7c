"""Cluster backends: the only code that talks to a cluster. One interface, one implementation per kind."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from clusters.backends.base import ClusterBackend
from pools.models import Cluster


def backend_for(cluster: Cluster) -> ClusterBackend:
    """The backend that drives ``cluster``."""
    if cluster.backend == Cluster.Backend.SIMULATED:
        from clusters.backends.simulated import SimulatedBackend

        return SimulatedBackend(cluster)
    if cluster.backend == Cluster.Backend.KUBERNETES:
        from clusters.backends.kubernetes import KubernetesBackend

        return KubernetesBackend(cluster)
    raise ImproperlyConfigured(
        f"cluster {cluster.name}: unknown backend {cluster.backend!r}; use simulated or kubernetes"
    )


__all__ = ["ClusterBackend", "backend_for"]
