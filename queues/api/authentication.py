"""``Authorization: Token <key>``: a team-scoped API token (see queues.api.tokens)."""

from __future__ import annotations

from typing import NoReturn

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from queues.api.throttling import BadTokenThrottle
from queues.api.tokens import api_token_authenticate


class TeamTokenAuthentication(authentication.BaseAuthentication):
    """Authenticates a request by an API token; ``request.auth`` is the ApiToken, whose team scopes everything."""

    keyword = "Token"

    def authenticate(self, request):
        """The token's user and the token. A valid key is always accepted; an invalid one counts against its address,
        and past ``bad_token`` an address's invalid keys are answered 429 instead of 401 (a spray is slowed down and
        learns nothing), while another client's valid key from that address still works."""
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        guard = BadTokenThrottle()
        if len(header) != 2:
            self._refuse(request, guard, "Give the token as: Authorization: Token <key>")
        try:
            key = header[1].decode()
        except UnicodeError:
            self._refuse(request, guard, "The token contains invalid characters.")
        token = api_token_authenticate(key)
        if token is None:
            self._refuse(request, guard, "Invalid, expired or revoked token.")
        return token.user, token

    @staticmethod
    def _refuse(request, guard: BadTokenThrottle, reason: str) -> NoReturn:
        """401 for an invalid key, counted against the address; 429 once the address is past its rate."""
        if guard.exceeded(request):
            raise exceptions.Throttled(wait=guard.wait(), detail="Too many invalid tokens from this address.")
        guard.record_failure(request)
        raise exceptions.AuthenticationFailed(reason)

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
