"""``Authorization: Token <key>``: a team-scoped API token (see queues.api.tokens)."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from queues.api.throttling import BadTokenThrottle
from queues.api.tokens import api_token_authenticate


class TeamTokenAuthentication(authentication.BaseAuthentication):
    """Authenticates a request by an API token; ``request.auth`` is the ApiToken, whose team scopes everything."""

    keyword = "Token"

    def authenticate(self, request):
        """The token's user and the token; an address that sent too many bad tokens is refused (429) first."""
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        guard = BadTokenThrottle()
        if guard.exceeded(request):
            raise exceptions.Throttled(wait=guard.wait(), detail="Too many invalid tokens from this address.")
        if len(header) != 2:
            guard.record_failure(request)
            raise exceptions.AuthenticationFailed("Give the token as: Authorization: Token <key>")
        try:
            key = header[1].decode()
        except UnicodeError as exc:
            guard.record_failure(request)
            raise exceptions.AuthenticationFailed("The token contains invalid characters.") from exc
        token = api_token_authenticate(key)
        if token is None:
            guard.record_failure(request)
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked token.")
        return token.user, token

    def authenticate_header(self, request) -> str:
        return self.keyword


class TeamTokenScheme(OpenApiAuthenticationExtension):
    """The token scheme in the OpenAPI document."""

    target_class = "queues.api.authentication.TeamTokenAuthentication"
    name = "teamToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "A team-scoped API token: `Authorization: Token <key>`. A token sees only its team.",
        }
