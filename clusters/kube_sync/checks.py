"""Checks other apps add to the reconciler, without the reconciler importing them (billing sits above clusters).

A check is a function ``check(cluster) -> list[Finding]``; it reports, it repairs nothing. An app registers its
checks in its ``AppConfig.ready`` (billing: usage records still open after their allocation ended).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pools.models import Cluster


@dataclass(frozen=True)
class Finding:
    """One mismatch a registered check reports: a kind (a stable code) and a sentence for the report."""

    kind: str
    message: str


ReconcileCheck = Callable[[Cluster], list[Finding]]

_checks: dict[str, ReconcileCheck] = {}


def reconcile_check_register(name: str, check: ReconcileCheck) -> None:
    """Add (or, under the same name, replace) a check the reconciler runs over every cluster."""
    _checks[name] = check


def reconcile_checks() -> list[ReconcileCheck]:
    """The registered checks, in the order they were first registered."""
    return list(_checks.values())
