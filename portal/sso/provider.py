"""The identity provider's endpoints: from the settings where given, else from its discovery document.

``OIDC_ISSUER`` alone is enough for a provider that publishes ``/.well-known/openid-configuration`` (Keycloak,
Dex, Okta, Entra ID and Google all do); an endpoint set explicitly wins over the discovered one. With the
authorization, token and JWKS endpoints all set, nothing is fetched (and userinfo is called only if set too).
The document is fetched on the first sign-in and kept in the cache for ``OIDC_DISCOVERY_CACHE_SECONDS``; its
``issuer`` must be the configured one (OpenID Connect Discovery 1.0, section 4.3), or nothing is used.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import requests
from django.conf import settings
from django.core.cache import cache

#: (endpoint attribute, explicit setting, discovery document key); the first three are required.
_ENDPOINTS = (
    ("authorization", "OIDC_OP_AUTHORIZATION_ENDPOINT", "authorization_endpoint"),
    ("token", "OIDC_OP_TOKEN_ENDPOINT", "token_endpoint"),
    ("jwks", "OIDC_OP_JWKS_ENDPOINT", "jwks_uri"),
    ("userinfo", "OIDC_OP_USER_ENDPOINT", "userinfo_endpoint"),
)
_REQUIRED = ("authorization", "token", "jwks")


class ProviderUnavailable(Exception):
    """The provider's discovery document could not be read or does not fit the configuration."""


@dataclass(frozen=True)
class ProviderEndpoints:
    """Where the portal sends the browser (authorization) and where it calls the provider itself."""

    issuer: str
    authorization: str
    token: str
    jwks: str
    userinfo: str


def discovery_url(issuer: str) -> str:
    """The discovery document's address for an issuer."""
    return issuer.rstrip("/") + "/.well-known/openid-configuration"


def _discovery_document(issuer: str) -> dict:
    """The provider's discovery document (cached), checked against the configured issuer."""
    key = "sso:discovery:" + hashlib.sha256(issuer.encode()).hexdigest()
    document = cache.get(key)
    if document is not None:
        return document
    try:
        response = requests.get(discovery_url(issuer), timeout=settings.OIDC_TIMEOUT, verify=settings.OIDC_VERIFY_SSL)
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise ProviderUnavailable(f"discovery document of {issuer} not readable: {exc}") from exc
    if not isinstance(document, dict) or document.get("issuer") != issuer:
        found = document.get("issuer") if isinstance(document, dict) else None
        raise ProviderUnavailable(f"discovery document names issuer {found!r}, not the configured {issuer!r}")
    cache.set(key, document, settings.OIDC_DISCOVERY_CACHE_SECONDS)
    return document


def provider_endpoints() -> ProviderEndpoints:
    """The endpoints in use: explicit settings first, the discovery document for the rest."""
    issuer = settings.OIDC_OP_ISSUER
    found = {name: getattr(settings, setting) or "" for name, setting, _ in _ENDPOINTS}
    if not all(found[name] for name in _REQUIRED):
        document = _discovery_document(issuer)
        for name, _, key in _ENDPOINTS:
            found[name] = found[name] or str(document.get(key) or "")
    missing = [name for name in _REQUIRED if not found[name]]
    if missing:
        raise ProviderUnavailable(f"no {', '.join(missing)} endpoint configured or discovered for {issuer}")
    if settings.PORTAL_MODE == "production":
        plain = [name for name, url in found.items() if url and not url.startswith("https://")]
        if plain:
            raise ProviderUnavailable(f"{', '.join(plain)} endpoint of {issuer} is not https:// (production)")
    return ProviderEndpoints(issuer=issuer, **found)
