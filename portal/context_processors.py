"""Template context shared by every page."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from billing.my_usage import leads_or_staff
from pools.health.selectors import reads_health
from portal.demo import demo_logins
from queues.selectors import teams_of
from queues.visibility import sees_every_team


def site(request: HttpRequest) -> dict:
    """Expose the site name, the mode, whether the user is in a team (the Submit link), whether the Cost page has
    something for the user, whether the health pages are theirs to read, the demo logins and whether single sign-on
    is on."""
    logins = []
    if settings.SHOW_DEMO_LOGINS:
        logins = demo_logins()
    user = getattr(request, "user", None)

    def has_team() -> bool:
        teams = getattr(request, "user_teams", None)  # the queues pages have read them already
        if teams is not None:
            return bool(teams)
        return user is not None and teams_of(user).exists()

    return {
        "PORTAL_NAME": "GPU Pool Portal",
        "PORTAL_MODE": settings.PORTAL_MODE,
        "DEMO_LOGINS": logins,
        "OIDC_ENABLED": settings.OIDC_ENABLED,
        "OIDC_PROVIDER_NAME": settings.OIDC_PROVIDER_NAME,
        # Leads and staff see the Cost report; every other member sees their own usage instead of a dead end.
        # Lazy: one query, and only on pages whose navigation asks (not the admin's).
        "SHOW_COST_LINK": SimpleLazyObject(lambda: user is not None and leads_or_staff(user)),
        # called by the template only where the navigation is drawn: one query, on pages that show it
        "NAV_HAS_TEAM": has_team,
        # the health pages: staff without a query; others (operators read them) by their permissions, once
        "NAV_READS_HEALTH": SimpleLazyObject(lambda: user is not None and reads_health(user)),
        # admins and operators read the status page (the navigation and the pages' "live data paused" note link it)
        "CAN_SEE_STATUS": SimpleLazyObject(lambda: user is not None and sees_every_team(user)),
    }
