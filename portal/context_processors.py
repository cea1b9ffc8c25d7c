"""Template context shared by every page."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest

from portal.demo import demo_logins


def site(request: HttpRequest) -> dict:
    """Expose the site name, the mode and, on a demo installation, the demo logins."""
    logins = []
    if settings.SHOW_DEMO_LOGINS:
        logins = demo_logins()
    return {"PORTAL_NAME": "GPU Pool Portal", "PORTAL_MODE": settings.PORTAL_MODE, "DEMO_LOGINS": logins}
