"""Template context shared by every page."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from billing.my_usage import leads_or_staff
from portal.demo import demo_logins


def site(request: HttpRequest) -> dict:
    """Expose the site name, the mode, whether the Cost page has something for the user, and the demo logins."""
    logins = []
    if settings.SHOW_DEMO_LOGINS:
        logins = demo_logins()
    user = getattr(request, "user", None)
    return {
        "PORTAL_NAME": "GPU Pool Portal",
        "PORTAL_MODE": settings.PORTAL_MODE,
        "DEMO_LOGINS": logins,
        # Leads and staff see the Cost report; every other member sees their own usage instead of a dead end.
        # Lazy: one query, and only on pages whose navigation asks (not the admin's).
        "SHOW_COST_LINK": SimpleLazyObject(lambda: user is not None and leads_or_staff(user)),
    }
