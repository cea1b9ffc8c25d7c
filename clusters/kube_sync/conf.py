"""Settings of the kubernetes backend: the ``KUBE_*`` names, declared with their defaults in portal/settings.py."""

from __future__ import annotations

from typing import Any

from django.conf import settings


def kube_setting(name: str) -> Any:
    """``settings.<name>``, read at call time (so a test's override applies)."""
    return getattr(settings, name)
