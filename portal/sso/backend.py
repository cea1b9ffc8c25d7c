"""The OpenID Connect authentication backend: mozilla-django-oidc's code flow with every ID token check made.

mozilla-django-oidc exchanges the code (with PKCE), fetches the provider's JWKS and checks the signature, the
algorithm and the nonce. This subclass adds what it leaves out: the issuer, the audience (and ``azp`` when there
are several), required ``exp``/``iat``/``sub``, expiry with ``OIDC_CLOCK_SKEW_SECONDS`` of leeway; it matches users
by (issuer, subject) and applies the claim mapping (``portal.sso.services``). Every refusal is logged and returns
None, so Django sends ``user_login_failed`` and django-axes counts it (the lockout covers sign-on too).
"""

from __future__ import annotations

import logging
from typing import Any

import jwt
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from portal.sso.provider import ProviderUnavailable, provider_endpoints
from portal.sso.services import sso_sign_in

logger = logging.getLogger(__name__)

#: Claims of the ID token that the userinfo answer may not replace.
_TOKEN_ONLY_CLAIMS = frozenset({"iss", "sub", "aud", "azp", "exp", "iat", "nbf", "nonce", "auth_time", "at_hash"})
#: How a refused sign-in is told apart in the log (the person only sees "single sign-on failed").
REFUSALS = (SuspiciousOperation, ProviderUnavailable, requests.RequestException, jwt.PyJWTError)


class PortalOIDCBackend(OIDCAuthenticationBackend):
    """OpenID Connect sign-in; inert unless ``OIDC_ENABLED`` and called by the sign-on callback."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Endpoints are resolved when a sign-on callback arrives (maybe from the discovery document), not each time
        # Django builds its backends (every local sign-in does).
        self.UserModel = get_user_model()
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None
        self.OIDC_OP_TOKEN_ENDPOINT = self.OIDC_OP_USER_ENDPOINT = self.OIDC_OP_JWKS_ENDPOINT = ""
        self.issuer = settings.OIDC_OP_ISSUER

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> AbstractBaseUser | None:
        """The user the provider's answer names, or None (not a sign-on callback, or any check refused it)."""
        if not settings.OIDC_ENABLED or request is None or "nonce" not in kwargs:
            return None
        if kwargs.get("username") is not None or kwargs.get("password") is not None:
            return None
        try:
            endpoints = provider_endpoints()
            self.OIDC_OP_TOKEN_ENDPOINT = endpoints.token
            self.OIDC_OP_JWKS_ENDPOINT = endpoints.jwks
            self.OIDC_OP_USER_ENDPOINT = endpoints.userinfo
            user = super().authenticate(request, **kwargs)
        except REFUSALS as exc:
            logger.warning("single sign-on refused: %s", exc)
            return None
        if user is None:
            logger.warning("single sign-on refused: no user from the provider's answer")
        return user

    def get_user(self, user_id: Any) -> AbstractBaseUser | None:
        """The session's user, None once deactivated (mozilla-django-oidc's own returns inactive users too)."""
        return ModelBackend.get_user(self, user_id)

    def get_token(self, payload: dict) -> dict:
        """The token endpoint's answer, which must hold an ID token."""
        answer = super().get_token(payload)
        if not isinstance(answer, dict) or not isinstance(answer.get("id_token"), str):
            raise SuspiciousOperation("the token endpoint sent no ID token")
        return answer

    def verify_token(self, token: str, **kwargs: Any) -> dict:
        """The token's claims once every check passed; the algorithm is checked before any key is looked up."""
        self._check_algorithm(token)
        return super().verify_token(token, **kwargs)

    def _check_algorithm(self, token: str) -> None:
        """Refuse a token not signed with ``OIDC_SIGN_ALGORITHM`` (``none``, or HMAC keyed with the client secret)."""
        alg = jwt.get_unverified_header(token).get("alg")
        if alg != self.OIDC_RP_SIGN_ALGO:
            raise SuspiciousOperation(f"ID token signed with {alg!r}, not {self.OIDC_RP_SIGN_ALGO}")

    def retrieve_matching_jwk(self, token: str) -> jwt.PyJWK:
        """The provider's key that signed the token (by ``kid`` and ``alg``); a token naming none is refused."""
        try:
            return super().retrieve_matching_jwk(token)
        except (KeyError, TypeError) as exc:
            raise SuspiciousOperation(f"ID token or JWKS without the field {exc}") from exc

    def _verify_jws(self, payload: str, key: Any) -> dict:
        """Signature, algorithm, issuer, audience, expiry and the required claims of an ID token."""
        self._check_algorithm(payload)
        try:
            claims = jwt.decode(
                payload,
                key,
                algorithms=[self.OIDC_RP_SIGN_ALGO],
                audience=self.OIDC_RP_CLIENT_ID,
                issuer=self.issuer,
                leeway=settings.OIDC_CLOCK_SKEW_SECONDS,
                options={"require": ["iss", "sub", "aud", "exp", "iat"]},
            )
        except jwt.PyJWTError as exc:
            raise SuspiciousOperation(f"ID token refused: {exc}") from exc
        audience = claims["aud"]
        if isinstance(audience, list) and len(audience) > 1 and claims.get("azp") != self.OIDC_RP_CLIENT_ID:
            raise SuspiciousOperation("ID token for several audiences without this client as azp")
        return claims

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict) -> AbstractBaseUser | None:
        """The ID token's claims merged with the userinfo answer (same subject), signed in by the service."""
        claims = dict(payload)
        if self.OIDC_OP_USER_ENDPOINT:
            userinfo = self.get_userinfo(access_token, id_token, payload)
            if not isinstance(userinfo, dict) or userinfo.get("sub") != payload["sub"]:
                raise SuspiciousOperation("the userinfo answer is for another subject")
            claims.update({k: v for k, v in userinfo.items() if k not in _TOKEN_ONLY_CLAIMS})
        return sso_sign_in(claims=claims, client_id=self.OIDC_RP_CLIENT_ID)
