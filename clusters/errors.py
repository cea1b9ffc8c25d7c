"""Errors of a request to a cluster, whatever its backend: callers retry on ClusterUnavailable only."""

from __future__ import annotations


class ClusterError(Exception):
    """A request to a cluster failed; ``message`` says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ClusterUnavailable(ClusterError):
    """The cluster could not be reached (or kept failing transiently): try again later."""


class ClusterRejected(ClusterError):
    """The cluster refused the request itself; retrying will not help."""
