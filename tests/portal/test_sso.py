"""Single sign-on: a full OpenID Connect round trip against a provider started by the test (tests/portal/oidc_provider),
the mapping applied at every sign-in, each ID token check refusing, and sign-on off when not configured."""

from __future__ import annotations

import logging
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from django.contrib.auth import get_user_model
from django.test import Client

from portal.models import SsoIdentity, SsoMapping
from queues.models import Membership
from tests.factories import MembershipFactory, TeamFactory, UserFactory
from tests.portal.oidc_provider import LocalOIDCProvider

pytestmark = pytest.mark.django_db
User = get_user_model()

KEYCLOAK_ADA = {
    "sub": "f3b1c2d4-0000-4000-8000-00000000a0a0",
    "preferred_username": "ada",
    "email": "ada@example.org",
    "email_verified": True,
    "name": "Ada Lovelace",
    "groups": ["/vision"],
    "realm_access": {"roles": ["offline_access", "portal-admin"]},
}


@pytest.fixture
def provider(settings):
    with LocalOIDCProvider() as running:
        settings.OIDC_ENABLED = True
        settings.OIDC_OP_ISSUER = running.issuer
        settings.OIDC_RP_CLIENT_ID = running.client_id
        settings.OIDC_RP_CLIENT_SECRET = running.client_secret
        settings.OIDC_PROVIDER_NAME = "Keycloak"
        yield running


@pytest.fixture
def teams():
    return {slug: TeamFactory(slug=slug) for slug in ("vision", "nlp", "speech")}


@pytest.fixture
def mapping(teams):
    SsoMapping.objects.create(claim="group", value="/vision", grants="member", team=teams["vision"])
    SsoMapping.objects.create(claim="group", value="nlp-leads", grants="lead", team=teams["nlp"])
    SsoMapping.objects.create(claim="group", value="nlp", grants="member", team=teams["nlp"])
    SsoMapping.objects.create(claim="role", value="portal-admin", grants="admin")
    SsoMapping.objects.create(claim="group", value="sre", grants="operator")


def sign_in(client: Client, provider: LocalOIDCProvider, *, next_url: str = "", ip: str = "10.2.2.2"):
    """Browser steps: the portal's start page, the provider's authorize endpoint (over HTTP), the portal's callback."""
    start = client.get("/oidc/authenticate/" + (f"?next={next_url}" if next_url else ""), REMOTE_ADDR=ip)
    assert start.status_code == 302, start
    assert start["Location"].startswith(provider.issuer + "/authorize?")
    approved = requests.get(start["Location"], allow_redirects=False, timeout=10)
    assert approved.status_code == 302, approved.text
    callback = urlsplit(approved.headers["Location"])
    assert (callback.netloc, callback.path) == ("testserver", "/oidc/callback/")
    return client.get(f"{callback.path}?{callback.query}", REMOTE_ADDR=ip)


def signed_in_user(client: Client):
    user_id = client.session.get("_auth_user_id")
    return User.objects.get(pk=user_id) if user_id else None


def memberships(user) -> set[tuple[str, str, str]]:
    return {(m.team.slug, m.role, m.source) for m in Membership.objects.filter(user=user).select_related("team")}


def test_round_trip_signs_in_a_new_user_with_the_mapped_team_and_admin(client, provider, mapping):
    provider.claims = dict(KEYCLOAK_ADA)
    provider.userinfo = {"given_name": "Ada", "family_name": "Lovelace", "email": "ada@example.org"}

    response = sign_in(client, provider, next_url="/jobs/")

    assert response.status_code == 302
    assert response["Location"] == "/jobs/"
    user = signed_in_user(client)
    assert user.username == "ada"
    assert (user.email, user.first_name, user.last_name) == ("ada@example.org", "Ada", "Lovelace")
    assert not user.has_usable_password()
    assert user.is_staff
    assert user.is_superuser
    assert memberships(user) == {("vision", "member", "sso")}
    identity = SsoIdentity.objects.get(user=user)
    assert (identity.issuer, identity.subject) == (provider.issuer, KEYCLOAK_ADA["sub"])
    assert identity.admin_from_sso
    assert identity.last_claim_values["groups"] == ["vision"]
    assert "portal-admin" in identity.last_claim_values["roles"]
    # The portal fetched discovery and the key set, and redeemed the code with its secret and PKCE verifier.
    assert [call for call in provider.calls if call[0] == "POST" or call[1] in ("/jwks", "/userinfo")] == [
        ("POST", "/token"),
        ("GET", "/jwks"),
        ("GET", "/userinfo"),
    ]
    assert ("GET", "/.well-known/openid-configuration") in provider.calls
    (token_request,) = provider.token_requests
    assert token_request["redirect_uri"] == "http://testserver/oidc/callback/"
    assert len(token_request["code_verifier"]) == 64


def test_a_group_change_moves_the_user_between_teams_at_the_next_sign_in(client, provider, mapping, teams):
    provider.claims = dict(KEYCLOAK_ADA)
    sign_in(client, provider)
    ada = signed_in_user(client)
    MembershipFactory(user=ada, team=teams["speech"], role="member")  # an admin's: the provider does not own it
    assert memberships(ada) == {("vision", "member", "sso"), ("speech", "member", "manual")}
    client.logout()

    # In the provider: out of /vision and portal-admin, into nlp-leads and nlp (lead wins), and into sre.
    provider.claims = {**KEYCLOAK_ADA, "groups": ["nlp", "nlp-leads", "sre"], "realm_access": {"roles": []}}
    sign_in(client, provider)

    assert signed_in_user(client) == ada
    ada.refresh_from_db()
    assert memberships(ada) == {("nlp", "lead", "sso"), ("speech", "member", "manual")}
    assert not ada.is_staff
    assert not ada.is_superuser
    assert ada.groups.filter(name="operator").exists()
    assert User.objects.filter(sso_identity__isnull=False).count() == 1
    client.logout()

    provider.claims = {**KEYCLOAK_ADA, "groups": [], "realm_access": {"roles": []}}
    sign_in(client, provider)
    ada.refresh_from_db()
    assert memberships(ada) == {("speech", "member", "manual")}
    assert not ada.groups.filter(name="operator").exists()


def test_sign_on_never_takes_over_a_local_account_and_keeps_a_manual_admin(client, provider, mapping):
    local = UserFactory(username="ada", email="ada@example.org", is_staff=True, is_superuser=True)
    provider.claims = {**KEYCLOAK_ADA, "realm_access": {"roles": []}}
    sign_in(client, provider)
    user = signed_in_user(client)
    assert user != local
    assert user.username == "ada-2"
    assert not user.is_staff
    local.refresh_from_db()
    assert local.is_superuser
    assert local.has_usable_password()
    assert not SsoIdentity.objects.filter(user=local).exists()


REFUSALS = {
    "forged signature": ({"forged": True}, "Signature verification failed"),
    "wrong issuer": ({"iss": "https://evil.example.org"}, "Invalid issuer"),
    "wrong audience": ({"aud": "another-client"}, "Audience doesn't match"),
    "wrong nonce": ({"nonce": "replayed-nonce"}, "Nonce verification failed"),
    "expired": ({"age": 3600}, "Signature has expired"),
    "HMAC with the client secret": ({"alg": "HS256"}, "not RS256"),
    "several audiences, no azp": ({"aud": ["portal", "other"]}, "several audiences"),
    "userinfo of another subject": ({"userinfo": {"sub": "someone-else"}}, "another subject"),
}


@pytest.mark.parametrize("tamper", list(REFUSALS.values()), ids=list(REFUSALS))
def test_each_check_refuses_a_bad_token(client, provider, mapping, caplog, tamper):
    changes, reason = tamper
    provider.claims = dict(KEYCLOAK_ADA)
    provider.tamper = changes
    with caplog.at_level(logging.WARNING):
        response = sign_in(client, provider)
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/"
    assert signed_in_user(client) is None
    assert not User.objects.exists()
    assert reason in caplog.text
    page = client.get("/accounts/login/")
    assert b"Single sign-on did not sign you in" in page.content


def test_the_same_token_signs_in_once_the_tampering_stops(client, provider, mapping):
    """The control for the refusals: the provider, the client and the flow are right, only the token was wrong."""
    provider.claims = dict(KEYCLOAK_ADA)
    provider.tamper = {"forged": True}
    sign_in(client, provider)
    assert signed_in_user(client) is None
    provider.tamper = {}
    sign_in(client, provider)
    assert signed_in_user(client).username == "ada"


def test_a_code_is_redeemed_once_and_a_replayed_callback_is_refused(client, provider, mapping, caplog):
    provider.claims = dict(KEYCLOAK_ADA)
    start = client.get("/oidc/authenticate/")
    approved = requests.get(start["Location"], allow_redirects=False, timeout=10)
    callback = urlsplit(approved.headers["Location"])
    assert client.get(f"{callback.path}?{callback.query}").status_code == 302
    ada = signed_in_user(client)
    assert client.get(f"{callback.path}?{callback.query}").status_code == 400  # its state was used up
    client.logout()
    assert client.get(f"{callback.path}?{callback.query}")["Location"] == "/accounts/login/"  # no state at all
    assert signed_in_user(client) is None
    # A second start in another browser gets its own state; the old code is refused by the provider.
    other = Client()
    start = other.get("/oidc/authenticate/")
    state = parse_qs(urlsplit(start["Location"]).query)["state"][0]
    code = parse_qs(callback.query)["code"][0]
    with caplog.at_level(logging.WARNING):
        assert other.get(f"/oidc/callback/?code={code}&state={state}")["Location"] == "/accounts/login/"
    assert "invalid_grant" in caplog.text
    assert signed_in_user(other) is None
    assert User.objects.get() == ada


def test_a_deactivated_user_loses_the_session_and_cannot_sign_on_again(client, provider, mapping):
    provider.claims = dict(KEYCLOAK_ADA)
    sign_in(client, provider)
    user = signed_in_user(client)
    assert client.get("/").wsgi_request.user == user
    User.objects.filter(pk=user.pk).update(is_active=False)
    assert client.get("/").wsgi_request.user.is_anonymous  # the open session ends with the account
    client.logout()
    sign_in(client, provider)
    assert signed_in_user(client) is None


def test_refused_sign_ons_are_throttled_by_axes(client, provider, mapping, settings):
    provider.claims = dict(KEYCLOAK_ADA)
    provider.tamper = {"nonce": "replayed"}
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert sign_in(client, provider, ip="10.3.3.3")["Location"] == "/accounts/login/"
    assert sign_in(client, provider, ip="10.3.3.3").status_code == 429  # the failure that reaches the limit
    provider.tamper = {}
    redeemed = len(provider.token_requests)
    locked = sign_in(client, provider, ip="10.3.3.3")
    assert locked.status_code == 429
    assert b"Too many failed sign-ins" in locked.content
    assert signed_in_user(client) is None
    assert len(provider.token_requests) == redeemed  # a locked-out address reaches no provider
    # Another address is not locked out, and a local account from the locked address still signs in.
    assert sign_in(Client(), provider, ip="10.4.4.4").status_code == 302
    local = UserFactory(username="bob")
    local.set_password("a-long-right-password")
    local.save()
    answer = Client().post(
        "/accounts/login/", {"username": "bob", "password": "a-long-right-password"}, REMOTE_ADDR="10.3.3.3"
    )
    assert answer.status_code == 302


def test_the_sign_in_page_offers_the_provider_and_local_accounts_still_sign_in(client, provider):
    page = client.get("/accounts/login/?next=/jobs/")
    assert b"Sign in with Keycloak" in page.content
    assert b'href="/oidc/authenticate/?next=/jobs/"' in page.content
    assert b'name="password"' in page.content  # local accounts stay
    local = UserFactory(username="breakglass", is_staff=True, is_superuser=True)
    local.set_password("a-long-right-password")
    local.save()
    answer = client.post("/accounts/login/", {"username": "breakglass", "password": "a-long-right-password"})
    assert answer.status_code == 302
    assert signed_in_user(client) == local
    assert provider.calls == []  # a local sign-in never reaches the provider


def test_discovery_naming_another_issuer_is_refused(client, provider, caplog):
    provider.tamper = {"discovery_issuer": "https://evil.example.org"}
    with caplog.at_level(logging.WARNING):
        response = client.get("/oidc/authenticate/")
    assert response["Location"] == "/accounts/login/"
    assert "not the configured" in caplog.text
    assert b"Single sign-on is unavailable" in client.get("/accounts/login/").content


def test_explicit_endpoints_need_no_discovery(client, provider, settings, mapping):
    settings.OIDC_OP_AUTHORIZATION_ENDPOINT = f"{provider.issuer}/authorize"
    settings.OIDC_OP_TOKEN_ENDPOINT = f"{provider.issuer}/token"
    settings.OIDC_OP_JWKS_ENDPOINT = f"{provider.issuer}/jwks"
    settings.OIDC_TOKEN_USE_BASIC_AUTH = True
    provider.claims = dict(KEYCLOAK_ADA)
    sign_in(client, provider)
    assert signed_in_user(client).username == "ada"
    assert ("GET", "/.well-known/openid-configuration") not in provider.calls
    assert ("GET", "/userinfo") not in provider.calls
    assert "client_secret" not in provider.token_requests[0]  # sent as HTTP Basic


def test_sign_on_is_off_when_not_configured(client, settings):
    assert settings.OIDC_ENABLED is False  # the test settings set no issuer
    page = client.get("/accounts/login/")
    assert b"Sign in with" not in page.content
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/?code=x&state=y").status_code == 404


def test_the_start_page_sends_state_nonce_and_pkce(client, provider):
    start = client.get("/oidc/authenticate/")
    query = {k: v[0] for k, v in parse_qs(urlsplit(start["Location"]).query).items()}
    assert query["client_id"] == "portal"
    assert query["scope"] == "openid email profile"
    assert query["code_challenge_method"] == "S256"
    assert query["state"] in client.session["oidc_states"]
    assert client.session["oidc_states"][query["state"]]["nonce"] == query["nonce"]
