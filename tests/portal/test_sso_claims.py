"""Single sign-on claims of each supported provider, the mapping they meet, and the settings that switch sign-on on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import IntegrityError, transaction

from portal.models import SsoIdentity, SsoMapping
from portal.sso.claims import claim_values, profile, username_base
from portal.sso.services import sso_sign_in
from queues.models import Membership
from tests.factories import TeamFactory, UserFactory

ROOT = Path(__file__).resolve().parents[2]
ISSUER = "https://login.example.org/realms/research"

ENTRA = {
    "iss": "https://login.microsoftonline.com/7f1c0000-0000-4000-8000-000000000001/v2.0",
    "sub": "AAAAAAAAAAAAAAAAAAAAAIkzqFVrSaSaFHy782bbtaQ",
    "preferred_username": "ada@contoso.onmicrosoft.com",
    "name": "Ada Lovelace",
    "roles": ["Portal.Admin", "Vision.Researcher"],
    "groups": ["0c9e1d7a-5a2b-4c4e-9f52-1d1c6a0f0001"],
}
OKTA = {"iss": "https://example.okta.com", "sub": "00u1abcd", "email": "ada@example.org", "groups": ["Everyone", "nlp"]}
DEX = {"iss": "https://dex.example.org", "sub": "CgNhZGESBWxvY2Fs", "email": "ada@example.org", "groups": "speech"}
GOOGLE = {
    "iss": "https://accounts.google.com",
    "sub": "110169484474386276334",
    "email": "ada@research.example.org",
    "email_verified": True,
    "hd": "research.example.org",
    "given_name": "Ada",
    "family_name": "Lovelace",
}
KEYCLOAK = {
    "iss": ISSUER,
    "sub": "f3b1c2d4",
    "groups": ["/research/vision", "nlp"],
    "realm_access": {"roles": ["default-roles-research", "portal-operator"]},
    "resource_access": {"portal": {"roles": ["lead"]}, "other-client": {"roles": ["ignored"]}},
}


def values_of(claims, **extra):
    """The claim values as a sign-in from the claims' own issuer (the configured one) reads them."""
    return claim_values(claims, client_id="portal", issuer=claims.get("iss", ISSUER), **extra)


def test_keycloak_groups_realm_and_this_clients_roles():
    values = values_of(KEYCLOAK)
    assert values.groups == {"research/vision", "nlp"}
    assert values.roles == {"default-roles-research", "portal-operator", "lead"}
    assert not values.domains


def test_entra_roles_and_group_ids_and_the_groups_overage():
    values = values_of(ENTRA)
    assert values.roles == {"Portal.Admin", "Vision.Researcher"}
    assert values.groups == {"0c9e1d7a-5a2b-4c4e-9f52-1d1c6a0f0001"}
    overage = {k: v for k, v in ENTRA.items() if k != "groups"} | {
        "_claim_names": {"groups": "src1"},
        "_claim_sources": {"src1": {"endpoint": "https://graph.microsoft.com/v1.0/users/x/getMemberObjects"}},
    }
    values = values_of(overage)
    assert values.groups_overage
    assert not values.groups


def test_okta_dex_and_an_extra_groups_claim():
    assert values_of(OKTA).groups == {"Everyone", "nlp"}
    assert values_of(DEX).groups == {"speech"}  # one group sent as a string
    okta_custom = {**OKTA, "groups": None, "portal_groups": ["vision"]}
    assert values_of(okta_custom, extra_group_claims=["portal_groups"]).groups == {"vision"}


def test_google_domain_and_only_verified_email_domains():
    assert values_of(GOOGLE).domains == {"research.example.org"}
    unverified = {"sub": "1", "iss": ISSUER, "email": "mallory@research.example.org", "email_verified": False}
    assert not values_of(unverified).domains
    assert values_of({**unverified, "email_verified": "true"}).domains == {"research.example.org"}


def test_odd_claim_shapes_are_ignored():
    odd = {"sub": "1", "groups": [1, None, {"a": 1}, "", "x" * 300, "ok"], "realm_access": ["not", "a", "dict"]}
    values = values_of(odd)
    assert values.groups == {"ok"}
    assert not values.roles


def test_usernames_and_profiles():
    assert username_base(ENTRA) == "ada@contoso.onmicrosoft.com"
    assert username_base(GOOGLE) == "ada@research.example.org"
    assert username_base({"sub": "a b/c"}) == "a-b-c"
    assert profile(ENTRA).fields() == {"email": "", "first_name": "Ada", "last_name": "Lovelace"}
    assert profile(GOOGLE).first_name == "Ada"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("claims", "mapping", "expected"),
    [
        (ENTRA, ("role", "Vision.Researcher", "member"), ("vision", "member")),
        (ENTRA, ("group", "0c9e1d7a-5a2b-4c4e-9f52-1d1c6a0f0001", "lead"), ("vision", "lead")),
        (OKTA, ("group", "nlp", "member"), ("vision", "member")),
        (DEX, ("group", "speech", "lead"), ("vision", "lead")),
        (GOOGLE, ("domain", "Research.Example.org", "member"), ("vision", "member")),
        (KEYCLOAK, ("group", "research/vision", "member"), ("vision", "member")),
        (KEYCLOAK, ("role", "lead", "lead"), ("vision", "lead")),
    ],
    ids=["entra-role", "entra-group", "okta", "dex", "google-hd", "keycloak-path", "keycloak-client-role"],
)
def test_each_providers_claims_meet_the_mapping(claims, mapping, expected, settings):
    settings.OIDC_OP_ISSUER = claims["iss"]  # the issuer the backend checked the token against
    vision = TeamFactory(slug="vision")
    claim, value, grants = mapping
    SsoMapping.objects.create(claim=claim, value=value, grants=grants, team=vision)
    user = sso_sign_in(claims=claims, client_id="portal")
    assert {(m.team.slug, m.role) for m in Membership.objects.filter(user=user)} == {expected}
    assert SsoIdentity.objects.get(user=user).subject == claims["sub"]


@pytest.mark.django_db
def test_a_mapping_row_names_a_team_exactly_for_team_grants():
    vision = TeamFactory(slug="vision")
    with pytest.raises(IntegrityError), transaction.atomic():
        SsoMapping.objects.create(claim="group", value="x", grants="member")
    with pytest.raises(IntegrityError), transaction.atomic():
        SsoMapping.objects.create(claim="group", value="x", grants="admin", team=vision)


def _settings_error(**env: str) -> str:
    """What importing the settings says with these environment variables ('' when they load)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OIDC_")}
    result = subprocess.run(
        [sys.executable, "-c", "import portal.settings as s; print('ENABLED', s.OIDC_ENABLED)"],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return result.stdout + result.stderr


def test_settings_switch_sign_on_on_and_refuse_half_configurations():
    assert "ENABLED False" in _settings_error()
    on = {"OIDC_ISSUER": ISSUER, "OIDC_CLIENT_ID": "portal", "OIDC_CLIENT_SECRET": "s3cret"}
    assert "ENABLED True" in _settings_error(**on)
    assert "OIDC_CLIENT_SECRET is needed" in _settings_error(**{**on, "OIDC_CLIENT_SECRET": ""})
    assert "is not RS256" in _settings_error(**on, OIDC_SIGN_ALGORITHM="HS256")
    assert "must include openid" in _settings_error(**on, OIDC_SCOPES="email profile")


@pytest.mark.django_db
def test_admins_edit_the_mapping_in_the_admin(client):
    admin_user = UserFactory(username="root", is_staff=True, is_superuser=True)
    client.force_login(admin_user)
    vision = TeamFactory(slug="vision")
    form = {"claim": "group", "value": "/vision", "grants": "lead", "team": vision.pk, "note": "Keycloak group"}
    assert client.post("/admin/portal/ssomapping/add/", form).status_code == 302
    row = SsoMapping.objects.get()
    assert (row.value, row.grants, row.team) == ("/vision", "lead", vision)
    assert row.history.count() == 1
    refused = client.post("/admin/portal/ssomapping/add/", {**form, "grants": "member", "team": ""})
    assert refused.status_code == 200
    assert b"needs a team" in refused.content
    refused = client.post("/admin/portal/ssomapping/add/", {**form, "grants": "admin"})
    assert b"leave the team empty" in refused.content
    assert SsoMapping.objects.count() == 1
    assert client.get("/admin/portal/ssoidentity/").status_code == 200
