"""Sign-in lockout by address as well as by (username, address): a password spray is slowed.

django-axes locks one username from one address after ``AXES_FAILURE_LIMIT`` failures (5), which leaves a spray —
one or two passwords tried against many usernames from one address — untouched: every pair stays under the limit.
This handler (``AXES_HANDLER``) adds a second limit: ``AXES_ADDRESS_FAILURE_LIMIT`` failed sign-ins (20) from one
address, whatever the usernames, within ``AXES_COOLOFF_MINUTES``, lock that address's sign-ins (portal, admin and
single sign-on: a refused sign-on counts) until the cool-off has passed since its last failure. It is higher than the
per-user limit, so that several people behind one NAT who mistype do not lock each other out.
"""

from __future__ import annotations

from axes.handlers.database import AxesDatabaseHandler
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Sum
from django.utils import timezone


def address_failures(ip_address: str) -> int:
    """Failed sign-ins from ``ip_address`` within the cool-off, over every username."""
    since = timezone.now() - settings.AXES_COOLOFF_TIME
    recent = AccessAttempt.objects.filter(ip_address=ip_address, attempt_time__gte=since)
    return recent.aggregate(n=Sum("failures_since_start"))["n"] or 0


def _address_locked(request) -> bool:
    limit = settings.AXES_ADDRESS_FAILURE_LIMIT
    address = getattr(request, "axes_ip_address", None)
    return bool(limit and address) and address_failures(address) >= limit


class AddressAwareHandler(AxesDatabaseHandler):
    """django-axes's database handler, locking an address that failed ``AXES_ADDRESS_FAILURE_LIMIT`` times too."""

    def is_locked(self, request, credentials: dict | None = None) -> bool:
        """Locked by (username, address), or by the address's failures over all usernames (checked before a
        sign-in is tried: a locked address's right password is refused too)."""
        return super().is_locked(request, credentials) or _address_locked(request)

    def user_login_failed(self, sender, credentials: dict, request=None, **kwargs) -> None:
        """Record the failure as django-axes does; the failure that reaches the address's limit locks it (the
        middleware answers 429), as the one that reaches a username's limit does."""
        super().user_login_failed(sender, credentials, request=request, **kwargs)
        if request is not None and not getattr(request, "axes_locked_out", False) and _address_locked(request):
            request.axes_locked_out = True
            request.axes_credentials = credentials
