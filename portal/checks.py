"""System checks of the portal's security settings: ``manage.py check --deploy`` warns where production would not
fail closed (issue 33), and every ``check`` refuses egress settings it cannot read.

Warnings (``--deploy`` only, as Django's own security checks; CI runs them with ``--fail-level WARNING``):

- ``portal.W001`` no ``METRICS_TOKEN``: /metrics refuses every scrape (``METRICS_REQUIRE_TOKEN``) or is open to anyone
  who reaches it; ``portal.W002`` a token shorter than 24 characters;
- ``portal.W003`` no ``NOTIFY_WEBHOOK_ALLOWED_HOSTS``: users may point webhooks at any public host;
- ``portal.W004``–``W006`` single sign-on with TLS verification off, an ``http://`` endpoint, or PKCE off.

Errors (always): ``portal.E001`` a network in ``NOTIFY_WEBHOOK_ALLOWED_NETWORKS`` or ``HEALTH_SCRAPE_ALLOWED_NETWORKS``
that is not one, ``portal.E002`` a ``HEALTH_DCGM_ENDPOINTS`` URL the egress guard refuses to read.
"""

from __future__ import annotations

from django.conf import settings
from django.core import checks

from kernel.egress import EgressRefused, parse_networks, parse_target

MIN_METRICS_TOKEN = 24
_OIDC_ENDPOINTS = (
    "OIDC_OP_AUTHORIZATION_ENDPOINT",
    "OIDC_OP_TOKEN_ENDPOINT",
    "OIDC_OP_JWKS_ENDPOINT",
    "OIDC_OP_USER_ENDPOINT",
)


@checks.register(checks.Tags.security, deploy=True)
def check_metrics_token(app_configs, **kwargs) -> list[checks.CheckMessage]:
    """/metrics shows every team's spend and budget: it wants a token."""
    token = settings.METRICS_TOKEN
    if not token:
        effect = (
            "/metrics answers 403 to every scrape (METRICS_REQUIRE_TOKEN)"
            if settings.METRICS_REQUIRE_TOKEN
            else "/metrics is open to anyone who reaches it, with every team's spend and budget"
        )
        return [
            checks.Warning(
                f"METRICS_TOKEN is not set: {effect}.",
                hint="Set METRICS_TOKEN from a Secret (the ServiceMonitor sends it from the same key).",
                id="portal.W001",
            )
        ]
    if len(token) < MIN_METRICS_TOKEN:
        return [
            checks.Warning(
                f"METRICS_TOKEN is {len(token)} characters long: use at least {MIN_METRICS_TOKEN} random ones.",
                hint="For example: python -c 'import secrets; print(secrets.token_urlsafe(32))'",
                id="portal.W002",
            )
        ]
    return []


@checks.register(checks.Tags.security, deploy=True)
def check_webhook_allow_list(app_configs, **kwargs) -> list[checks.CheckMessage]:
    """Users' webhooks should go to the chat services the site uses, not anywhere."""
    if settings.NOTIFY_WEBHOOK_ALLOWED_HOSTS:
        return []
    return [
        checks.Warning(
            "NOTIFY_WEBHOOK_ALLOWED_HOSTS is empty: any user may make the worker POST to any public host.",
            hint="List your chat services' webhook hosts, e.g. hooks.slack.com,webhook.office.com.",
            id="portal.W003",
        )
    ]


@checks.register(checks.Tags.security, deploy=True)
def check_oidc(app_configs, **kwargs) -> list[checks.CheckMessage]:
    """Single sign-on settings that weaken what the ID token proves."""
    if not settings.OIDC_ENABLED:
        return []
    out: list[checks.CheckMessage] = []
    if not settings.OIDC_VERIFY_SSL:
        out.append(
            checks.Warning(
                "OIDC_VERIFY_SSL is off: the provider's certificate is not checked, so anyone on the path can stand "
                "in for it (tokens, keys and user info).",
                hint="Unset OIDC_VERIFY_SSL; trust a private CA with REQUESTS_CA_BUNDLE instead.",
                id="portal.W004",
            )
        )
    plain = [name for name in ("OIDC_OP_ISSUER", *_OIDC_ENDPOINTS) if getattr(settings, name).startswith("http://")]
    if plain:
        out.append(
            checks.Warning(
                f"{', '.join(plain)}: http:// — codes, tokens and keys would cross the network in clear.",
                hint="Use the provider's https:// endpoints (discovered endpoints must be https:// in production).",
                id="portal.W005",
            )
        )
    if not settings.OIDC_USE_PKCE:
        out.append(
            checks.Warning(
                "OIDC_USE_PKCE is off: an authorization code intercepted on its way back can be redeemed.",
                hint="Unset OIDC_USE_PKCE (every supported provider accepts PKCE S256).",
                id="portal.W006",
            )
        )
    return out


@checks.register(checks.Tags.security)
def check_egress_settings(app_configs, **kwargs) -> list[checks.CheckMessage]:
    """The egress guard's settings can be read."""
    out: list[checks.CheckMessage] = []
    for name in ("NOTIFY_WEBHOOK_ALLOWED_NETWORKS", "HEALTH_SCRAPE_ALLOWED_NETWORKS"):
        try:
            parse_networks(getattr(settings, name))
        except ValueError as exc:
            out.append(checks.Error(f"{name}: {exc}", id="portal.E001"))
    for url in settings.HEALTH_DCGM_ENDPOINTS or []:
        try:
            parse_target(url)
        except EgressRefused as exc:
            out.append(checks.Error(f"HEALTH_DCGM_ENDPOINTS: {url!r}: {exc.message}", id="portal.E002"))
    return out
