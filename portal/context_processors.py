"""Template context shared by every page."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from django.conf import settings
from django.http import HttpRequest


def _demo_login(entry: Mapping | Sequence | str) -> dict[str, str]:
    """One demo login as ``{username, password, role}`` from a dict, a (username, password[, role]) tuple or a name."""
    if isinstance(entry, Mapping):
        return {
            "username": str(entry.get("username", "")),
            "password": str(entry.get("password", "")),
            "role": str(entry.get("role", entry.get("description", ""))),
        }
    if isinstance(entry, str):
        return {"username": entry, "password": "", "role": ""}
    username, password, role, *_ = [*entry, "", "", ""]
    return {"username": str(username), "password": str(password), "role": str(role)}


def site(request: HttpRequest) -> dict:
    """Expose the site name, the mode and the demo logins (``settings.DEMO_LOGINS``, empty by default)."""
    return {
        "PORTAL_NAME": "GPU Pool Portal",
        "PORTAL_MODE": settings.PORTAL_MODE,
        "DEMO_LOGINS": [_demo_login(e) for e in getattr(settings, "DEMO_LOGINS", None) or []],
    }
