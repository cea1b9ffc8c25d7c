"""A real OpenID Connect provider for the tests, served over HTTP on 127.0.0.1 from a thread.

Discovery, JWKS, authorize (auto-approves whoever ``claims`` names and redirects back with a code), token
(client secret, one-use code, redirect URI and PKCE S256 checked; an ID token signed with a real RSA key by
joserfc, a JOSE implementation other than the portal's PyJWT) and userinfo (Bearer access token). ``tamper``
makes the next tokens wrong in one way, to show each of the portal's checks refusing them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from joserfc import jwt
from joserfc.jwk import KeySet, OctKey, RSAKey

KID = "test-key-1"


@cache
def rsa_key(name: str) -> RSAKey:
    """A 2048-bit RSA signing key (one per name, made once per test run)."""
    return RSAKey.generate_key(2048, parameters={"kid": KID, "use": "sig", "alg": "RS256"}, private=True)


class LocalOIDCProvider:
    """The provider; ``claims`` (the ID token's) and ``userinfo`` (the userinfo answer's) describe the next person."""

    def __init__(
        self, *, client_id: str = "portal", client_secret: str = "portal-client-secret-long-enough-for-hmac-0123456789"
    ) -> None:
        self.client_id = client_id
        self.client_secret = client_secret
        self.key = rsa_key("provider")
        self.claims: dict[str, Any] = {}
        self.userinfo: dict[str, Any] = {}
        self.tamper: dict[str, Any] = {}
        self.calls: list[tuple[str, str]] = []
        self.token_requests: list[dict[str, str]] = []
        self._codes: dict[str, dict[str, Any]] = {}
        self._access_tokens: dict[str, dict[str, Any]] = {}
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.issuer = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> LocalOIDCProvider:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def discovery(self) -> dict[str, Any]:
        """The discovery document (``issuer`` may be tampered with)."""
        return {
            "issuer": self.tamper.get("discovery_issuer", self.issuer),
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "userinfo_endpoint": f"{self.issuer}/userinfo",
            "jwks_uri": f"{self.issuer}/jwks",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic"],
        }

    def authorize(self, query: dict[str, str]) -> tuple[int, dict[str, str], str]:
        """Auto-approve a valid authorization request: a redirect back to the client with a code and the state."""
        problems = [
            name
            for name, ok in (
                ("response_type", query.get("response_type") == "code"),
                ("client_id", query.get("client_id") == self.client_id),
                ("scope", "openid" in query.get("scope", "").split()),
                ("redirect_uri", query.get("redirect_uri", "").startswith("http")),
                ("state", bool(query.get("state"))),
            )
            if not ok
        ]
        if problems:
            return 400, {}, f"bad authorization request: {problems}"
        code = secrets.token_urlsafe(24)
        self._codes[code] = {
            "redirect_uri": query["redirect_uri"],
            "nonce": query.get("nonce"),
            "challenge": query.get("code_challenge"),
            "challenge_method": query.get("code_challenge_method"),
            "claims": dict(self.claims),
            "userinfo": dict(self.userinfo),
        }
        location = query["redirect_uri"] + "?" + urlencode({"code": code, "state": query["state"]})
        return 302, {"Location": location}, ""

    def token(self, form: dict[str, str], authorization: str) -> tuple[int, dict[str, Any]]:
        """Exchange a code for tokens after checking the client, the code, the redirect URI and the PKCE verifier."""
        self.token_requests.append(dict(form))
        client_id, client_secret = form.get("client_id"), form.get("client_secret")
        if authorization.startswith("Basic "):
            client_id, _, client_secret = base64.b64decode(authorization[6:]).decode().partition(":")
        if (client_id, client_secret) != (self.client_id, self.client_secret):
            return 401, {"error": "invalid_client"}
        grant = self._codes.pop(form.get("code", ""), None)
        if form.get("grant_type") != "authorization_code" or grant is None:
            return 400, {"error": "invalid_grant"}
        if form.get("redirect_uri") != grant["redirect_uri"]:
            return 400, {"error": "invalid_grant", "error_description": "redirect_uri differs"}
        if grant["challenge"]:
            digest = hashlib.sha256(form.get("code_verifier", "").encode()).digest()
            if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != grant["challenge"]:
                return 400, {"error": "invalid_grant", "error_description": "PKCE verifier does not match"}
        access_token = secrets.token_urlsafe(24)
        self._access_tokens[access_token] = {"sub": grant["claims"]["sub"], **grant["userinfo"]}
        return 200, {
            "access_token": access_token,
            "token_type": "Bearer",
            "expires_in": 300,
            "id_token": self.id_token(grant["claims"], nonce=grant["nonce"]),
        }

    def id_token(self, claims: dict[str, Any], *, nonce: str | None) -> str:
        """The signed ID token, made wrong as ``tamper`` says (issuer, audience, nonce, expiry, key, algorithm)."""
        now = int(time.time())
        body = {"iss": self.issuer, "aud": self.client_id, "iat": now, "exp": now + 300, "auth_time": now}
        if nonce is not None:
            body["nonce"] = nonce
        body.update(claims)
        for name in ("iss", "aud", "nonce", "azp"):
            if name in self.tamper:
                body[name] = self.tamper[name]
        if "age" in self.tamper:  # issued that many seconds ago, valid for 300 s
            body["iat"] = now - self.tamper["age"]
            body["exp"] = body["iat"] + 300
        if self.tamper.get("alg") == "HS256":  # the classic confusion: HMAC keyed with the client secret
            return jwt.encode({"alg": "HS256", "kid": KID}, body, OctKey.import_key(self.client_secret))
        key = rsa_key("forger") if self.tamper.get("forged") else self.key
        return jwt.encode({"alg": "RS256", "kid": KID}, body, key)

    def userinfo_answer(self, authorization: str) -> tuple[int, dict[str, Any]]:
        """The userinfo claims of a valid access token."""
        claims = self._access_tokens.get(authorization.removeprefix("Bearer "))
        if not authorization.startswith("Bearer ") or claims is None:
            return 401, {"error": "invalid_token"}
        return 200, {**claims, **self.tamper.get("userinfo", {})}


def _handler(provider: LocalOIDCProvider) -> type[BaseHTTPRequestHandler]:
    """The request handler class bound to one provider."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            provider.calls.append(("GET", url.path))
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            if url.path == "/.well-known/openid-configuration":
                self._send(200, provider.discovery())
            elif url.path == "/jwks":
                self._send(200, KeySet([provider.key]).as_dict(private=False))
            elif url.path == "/authorize":
                status, headers, text = provider.authorize(query)
                self._send(status, text, headers)
            elif url.path == "/userinfo":
                self._send(*provider.userinfo_answer(self.headers.get("Authorization", "")))
            else:
                self._send(404, "not found")

        def do_POST(self) -> None:
            url = urlsplit(self.path)
            provider.calls.append(("POST", url.path))
            length = int(self.headers.get("Content-Length") or 0)
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
            if url.path == "/token":
                self._send(*provider.token(form, self.headers.get("Authorization", "")))
            else:
                self._send(404, "not found")

    return Handler
