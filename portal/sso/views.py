"""The sign-on pages: start (redirect to the provider) and callback (the provider's answer); 404 when sign-on is off."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views import View
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from portal.sso.provider import ProviderUnavailable, provider_endpoints

logger = logging.getLogger(__name__)

FAILED = "Single sign-on did not sign you in. Try again, or ask a platform admin if it keeps failing."
UNAVAILABLE = "Single sign-on is unavailable just now (the identity provider does not answer). Try again later."


class _OnlyWhenEnabled:
    """404 unless single sign-on is configured."""

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        """Serve only when ``OIDC_ENABLED``."""
        if not settings.OIDC_ENABLED:
            raise Http404("single sign-on is not configured")
        return super().dispatch(request, *args, **kwargs)


class SsoStartView(_OnlyWhenEnabled, OIDCAuthenticationRequestView):
    """Send the browser to the provider's authorization endpoint (state, nonce and PKCE kept in the session)."""

    def __init__(self, **kwargs: Any) -> None:
        View.__init__(self, **kwargs)  # the endpoint is resolved per request (discovery), not at construction

    def get(self, request: HttpRequest) -> HttpResponse:
        """The redirect to the provider, or back to the sign-in page if its endpoints cannot be found."""
        try:
            self.OIDC_OP_AUTH_ENDPOINT = provider_endpoints().authorization
        except ProviderUnavailable as exc:
            logger.warning("single sign-on unavailable: %s", exc)
            messages.error(request, UNAVAILABLE)
            return redirect(settings.LOGIN_URL)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        return super().get(request)


class SsoCallbackView(_OnlyWhenEnabled, OIDCAuthenticationCallbackView):
    """The provider's answer: code exchanged and checked by ``PortalOIDCBackend``; failures back to the sign-in."""

    def login_failure(self) -> HttpResponse:
        """Back to the sign-in page with a message (django-axes answers 429 instead once the address is locked)."""
        if not getattr(self.request, "axes_locked_out", False):
            messages.error(self.request, FAILED)
        return redirect(settings.LOGIN_URL)
