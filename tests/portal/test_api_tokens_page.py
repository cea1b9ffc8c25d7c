"""The API token screen: a signed-in user creates a token (the key shown once), sees and revokes their tokens."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from queues.models import ApiToken
from tests.factories import MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db

URL = reverse("queues:api_tokens")
KEY = re.compile(r'id="api-token-key"[^>]*>(gpp_[A-Za-z0-9_-]+)<')


@pytest.fixture
def member(client):
    user = UserFactory(username="alice")
    team = TeamFactory(slug="vision", name="Vision")
    MembershipFactory(team=team, user=user)
    client.force_login(user)
    return user


def create(client, **data):
    return client.post(URL, {"name": "CI pipeline", "team": "vision", "expires_in_days": "", **data})


def test_the_page_needs_a_login(client):
    response = client.get(URL)
    assert response.status_code == 302
    assert reverse("login") in response["Location"]


def test_a_new_key_is_shown_once_and_works_on_the_api(client, member):
    response = create(client, expires_in_days="30")
    assert response.status_code == 200
    assert "no-store" in [d.strip() for d in response["Cache-Control"].split(",")]
    html = response.content.decode()
    key = KEY.search(html).group(1)
    assert "it is not shown again" in html
    token = ApiToken.objects.get()
    assert (token.user, token.team.slug, token.name) == (member, "vision", "CI pipeline")
    assert token.expires_at is not None
    # Never again: the list shows the prefix only.
    again = client.get(URL).content.decode()
    assert key not in again
    assert f"{token.prefix}…" in again
    client.logout()
    api = client.get("/api/jobs/", HTTP_AUTHORIZATION=f"Token {key}")
    assert api.status_code == 200
    # The page's own example works as written (issue 32: it pointed at /api/, which answers 404).
    example = re.search(r'<code>curl -H "Authorization: Token (\S+)" http://testserver(\S+)</code>', html)
    assert example.group(1) == key
    assert client.get(example.group(2), HTTP_AUTHORIZATION=f"Token {key}").status_code == 200


def test_revoking_stops_the_key(client, member):
    key = KEY.search(create(client).content.decode()).group(1)
    token = ApiToken.objects.get()
    response = client.post(reverse("queues:api_token_revoke", args=[token.pk]))
    assert response.status_code == 302
    page = client.get(URL).content.decode()
    assert "is revoked" in page
    assert "revoked</td>" in page
    client.logout()
    assert client.get("/api/jobs/", HTTP_AUTHORIZATION=f"Token {key}").status_code == 401


def test_another_users_token_cannot_be_revoked(client, member):
    create(client)
    token = ApiToken.objects.get()
    other = UserFactory(username="mallory")
    client.force_login(other)
    assert client.post(reverse("queues:api_token_revoke", args=[token.pk])).status_code == 404
    assert client.get(URL).content.decode().count("CI pipeline") == 0
    token.refresh_from_db()
    assert not token.revoked


def test_bad_input_names_the_field_and_the_limit(client, member):
    response = create(client, name="", expires_in_days="0")
    assert response.status_code == 400
    html = response.content.decode()
    assert "This field is required." in html
    assert "Give at least 1 day" in html
    response = create(client, name="x" * 101, expires_in_days="400")
    html = response.content.decode()
    assert "Use at most 100 characters (this has 101)." in html
    assert "Give at most 365 days" in html
    assert "Select a valid choice" in create(client, team="nlp").content.decode()
    assert not ApiToken.objects.exists()


def test_a_user_without_a_team_is_told_why_there_is_no_form(client):
    client.force_login(UserFactory(username="loner"))
    html = client.get(URL).content.decode()
    assert "You are not in a team yet" in html
    assert 'id="api-token-form"' not in html
