"""Template context shared by every page."""

from django.conf import settings
from django.http import HttpRequest


def site(request: HttpRequest) -> dict:
    """Expose the site name and the mode to templates."""
    return {"PORTAL_NAME": "GPU Pool Portal", "PORTAL_MODE": settings.PORTAL_MODE}
