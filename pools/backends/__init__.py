"""Cluster backends: the only code that talks to a cluster. One interface, one implementation per kind."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from pools.backends.base import ClusterBackend
from pools.models import Cluster


def backend_for(cluster: Cluster) -> ClusterBackend:
    """The backend that drives ``cluster``."""
    if cluster.backend == Cluster.Backend.SIMULATED:
        from pools.backends.simulated import SimulatedBackend

        return SimulatedBackend(cluster)
    raise ImproperlyConfigured(
        f"cluster {cluster.name}: the {cluster.backend} backend is not part of this build yet; "
        "use the simulated backend"
    )


__all__ = ["ClusterBackend", "backend_for"]
