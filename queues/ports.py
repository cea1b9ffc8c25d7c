"""What queues asks of the cluster integration above it, without importing it (dependency inversion).

queues records jobs and policy changes; the cluster integration (the ``clusters`` app) makes the clusters follow.
It registers its implementation when Django starts (``ClustersConfig.ready``); queues calls it only after its
own transaction commits, so a slow or unreachable cluster never holds a request.
"""

from __future__ import annotations

from typing import Protocol

from django.core.exceptions import ImproperlyConfigured


class ClusterPort(Protocol):
    """The cluster integration, as queues sees it."""

    def job_submitted(self, *, job_id: int) -> None:
        """A job was recorded as pending: hand it to its cluster's scheduler."""

    def job_cancelled(self, *, job_id: int) -> None:
        """A job was cancelled in the portal: stop it in its cluster."""

    def policy_push_requested(self, *, push_id: int) -> None:
        """A policy change was recorded for a cluster (a PolicyPush row): apply it there."""


_port: ClusterPort | None = None


def cluster_port_register(port: ClusterPort) -> None:
    """Install the cluster integration (called once at start-up by the app that implements it)."""
    global _port
    _port = port


def cluster_port() -> ClusterPort:
    """The registered cluster integration; a clear error when the app that provides it is not installed."""
    if _port is None:
        raise ImproperlyConfigured("no cluster integration registered: add 'clusters' to INSTALLED_APPS")
    return _port
