"""Throttling: sign-in lockout (portal and admin), and rates on anonymous, forged-token, token and session API calls."""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings
from django.urls import reverse

from queues.api.tokens import api_token_create
from tests.factories import MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db
PASSWORD = "a-long-right-password"


@pytest.fixture
def ada():
    user = UserFactory(username="ada")
    user.set_password(PASSWORD)
    user.save()
    return user


@pytest.fixture
def admin_user():
    user = UserFactory(username="root", is_staff=True, is_superuser=True)
    user.set_password(PASSWORD)
    user.save()
    return user


def _sign_in(client, url, username, password, ip="10.1.1.1"):
    return client.post(url, {"username": username, "password": password}, REMOTE_ADDR=ip)


@pytest.mark.parametrize("url", ["/accounts/login/", "/admin/login/"], ids=["portal", "admin"])
def test_thirty_wrong_passwords_lock_the_sign_in_even_for_the_right_one(client, ada, admin_user, url):
    username = "root" if url.startswith("/admin") else "ada"
    for _ in range(30):
        _sign_in(client, url, username, "wrong")
    response = _sign_in(client, url, username, PASSWORD)
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session
    assert b"Too many failed sign-ins" in response.content


def test_the_lockout_starts_at_the_failure_limit(client, ada):
    for _ in range(django_settings.AXES_FAILURE_LIMIT - 1):
        assert _sign_in(client, "/accounts/login/", "ada", "wrong").status_code == 200
    assert _sign_in(client, "/accounts/login/", "ada", PASSWORD).status_code == 302  # the last try before the limit
    client.logout()
    for _ in range(django_settings.AXES_FAILURE_LIMIT):
        _sign_in(client, "/accounts/login/", "ada", "wrong")
    assert _sign_in(client, "/accounts/login/", "ada", PASSWORD).status_code == 429


def test_a_lockout_holds_one_username_from_one_address_only(client, ada):
    """Locking by username and address: an attacker elsewhere cannot lock the real user out of their own desk."""
    for _ in range(10):
        _sign_in(client, "/accounts/login/", "ada", "wrong", ip="10.6.6.6")
    assert _sign_in(client, "/accounts/login/", "ada", PASSWORD, ip="10.1.1.1").status_code == 302


def test_a_password_spray_over_many_usernames_from_one_address_is_slowed(client, ada, settings):
    """Thirty usernames, one password each, from one address: no (username, address) pair reaches its limit, but the
    address does (AXES_ADDRESS_FAILURE_LIMIT), and is locked, the right password included; elsewhere ada signs in."""
    settings.AXES_ADDRESS_FAILURE_LIMIT = 20
    answers = [_sign_in(client, "/accounts/login/", f"user{i}", "Winter2026!", ip="10.9.9.9").status_code
               for i in range(30)]  # fmt: skip
    assert answers[:19] == [200] * 19  # the form again: wrong password
    assert answers[19:] == [429] * 11  # the 20th failure locks the address, as the 5th locks a username
    assert _sign_in(client, "/accounts/login/", "ada", PASSWORD, ip="10.9.9.9").status_code == 429
    assert _sign_in(client, "/accounts/login/", "ada", PASSWORD, ip="10.1.1.1").status_code == 302


def test_the_address_limit_counts_the_admin_sign_in_and_stays_above_the_user_limit(client, ada, admin_user):
    for i in range(django_settings.AXES_ADDRESS_FAILURE_LIMIT - 1):
        _sign_in(client, "/admin/login/" if i % 2 else "/accounts/login/", f"someone{i}", "wrong", ip="10.8.8.8")
    assert _sign_in(client, "/accounts/login/", "ada", PASSWORD, ip="10.8.8.8").status_code == 302  # one below
    client.logout()
    _sign_in(client, "/accounts/login/", "nobody", "wrong", ip="10.8.8.8")
    assert _sign_in(client, "/admin/login/", "root", PASSWORD, ip="10.8.8.8").status_code == 429
    assert django_settings.AXES_ADDRESS_FAILURE_LIMIT > django_settings.AXES_FAILURE_LIMIT


def test_the_lockout_ends_after_the_cool_off(client, ada, settings, monkeypatch):
    for _ in range(django_settings.AXES_FAILURE_LIMIT):
        _sign_in(client, "/accounts/login/", "ada", "wrong")
    assert _sign_in(client, "/accounts/login/", "ada", PASSWORD).status_code == 429
    from axes.models import AccessAttempt

    AccessAttempt.objects.update(attempt_time=AccessAttempt.objects.first().attempt_time - settings.AXES_COOLOFF_TIME)
    assert _sign_in(client, "/accounts/login/", "ada", PASSWORD).status_code == 302


# --------------------------------------------------------------------------- API


@pytest.fixture
def rates(settings):
    """Small rates, so that a test reaches them in a few calls."""

    def set_rates(**rates):
        settings.REST_FRAMEWORK = {
            **settings.REST_FRAMEWORK,
            "DEFAULT_THROTTLE_RATES": {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], **rates},
        }

    return set_rates


def test_forged_tokens_are_refused_429_after_the_limit(client, rates):
    rates(bad_token="5/min")
    answers = [
        client.get("/api/jobs/", headers={"Authorization": f"Token gpp_forged{i}"}, REMOTE_ADDR="10.2.2.2").status_code
        for i in range(8)
    ]
    assert answers == [401] * 5 + [429] * 3
    response = client.get("/api/jobs/", headers={"Authorization": "Token gpp_forged"}, REMOTE_ADDR="10.2.2.2")
    assert int(response["Retry-After"]) > 0
    # another address is not held up by them
    other = client.get("/api/jobs/", headers={"Authorization": "Token gpp_x"}, REMOTE_ADDR="10.3.3.3")
    assert other.status_code == 401


def test_a_valid_token_still_works_from_an_address_that_sent_forged_ones(client, rates):
    rates(bad_token="2/min")
    team = TeamFactory(slug="vision")
    user = UserFactory()
    MembershipFactory(team=team, user=user)
    key = api_token_create(user=user, team=team, name="ci").key
    for i in range(3):
        client.get("/api/teams/", headers={"Authorization": f"Token gpp_forged{i}"}, REMOTE_ADDR="10.2.2.2")
    forged = client.get("/api/teams/", headers={"Authorization": "Token gpp_forged9"}, REMOTE_ADDR="10.2.2.2")
    assert forged.status_code == 429  # the address's bad keys are held back …
    response = client.get("/api/teams/", headers={"Authorization": f"Token {key}"}, REMOTE_ADDR="10.2.2.2")
    assert response.status_code == 200  # … but a valid key is never refused for them (issue 33)
    for _ in range(3):  # and keeps working while the spray goes on
        client.get("/api/teams/", headers={"Authorization": "Token gpp_forged"}, REMOTE_ADDR="10.2.2.2")
        assert (
            client.get("/api/teams/", headers={"Authorization": f"Token {key}"}, REMOTE_ADDR="10.2.2.2").status_code
            == 200
        )


def test_anonymous_api_calls_are_throttled_by_address(client, rates):
    rates(anon="3/min")
    answers = [client.get("/api/jobs/", REMOTE_ADDR="10.4.4.4").status_code for _ in range(5)]
    assert answers[:3] == [401] * 3
    assert answers[3:] == [429, 429]
    assert client.get(reverse("api:schema"), REMOTE_ADDR="10.4.4.4").status_code == 429
    assert client.get("/api/jobs/", REMOTE_ADDR="10.5.5.5").status_code == 401


def test_token_traffic_is_throttled_per_token(client, rates):
    rates(token="4/min")
    team = TeamFactory(slug="vision")
    user = UserFactory()
    MembershipFactory(team=team, user=user)
    first = api_token_create(user=user, team=team, name="one").key
    second = api_token_create(user=user, team=team, name="two").key
    answers = [client.get("/api/teams/", headers={"Authorization": f"Token {first}"}).status_code for _ in range(6)]
    assert answers == [200] * 4 + [429] * 2
    assert client.get("/api/teams/", headers={"Authorization": f"Token {second}"}).status_code == 200


def test_session_api_traffic_is_throttled_per_user(client, rates):
    rates(user="3/min")
    user = UserFactory()
    client.force_login(user)
    answers = [client.get("/api/teams/").status_code for _ in range(4)]
    assert answers == [200, 200, 200, 429]


def test_default_rates_are_set_and_the_limits_come_from_settings():
    rates = django_settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]
    assert set(rates) == {"anon", "bad_token", "token", "user"}
    assert all(rates.values())
    assert django_settings.AXES_FAILURE_LIMIT == 5
    assert django_settings.AXES_LOCKOUT_PARAMETERS == [["username", "ip_address"]]


def test_client_address_behind_the_proxies(rf, settings):
    from kernel.net import client_ip

    request = rf.get("/", HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.9, 10.0.0.7", REMOTE_ADDR="127.0.0.1")
    settings.TRUSTED_PROXY_COUNT = 0
    assert client_ip(request) == "127.0.0.1"  # no proxy trusted: the client's header is ignored
    settings.TRUSTED_PROXY_COUNT = 2
    assert client_ip(request) == "203.0.113.9"  # the address the edge proxy saw, not what the client wrote
