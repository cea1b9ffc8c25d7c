"""The site shell: sign-in and sign-out, the navigation, the liveness probe, locally served assets."""

from __future__ import annotations

import pytest
from django.contrib.messages import constants
from django.contrib.messages.storage.base import Message
from django.contrib.messages.storage.cookie import CookieStorage
from django.contrib.staticfiles import finders
from django.urls import reverse

from tests.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db


def test_login_page_renders(client):
    response = client.get(reverse("login"))
    assert response.status_code == 200
    html = response.content.decode()
    assert "<h1" in html
    assert 'name="username"' in html
    assert 'name="password"' in html
    assert 'autocomplete="current-password"' in html
    assert "Demo logins" not in html
    # Signed out: no navigation or user box.
    assert "Sign out" not in html


def test_login_page_shows_demo_logins_when_configured(client, settings):
    settings.SHOW_DEMO_LOGINS = True
    html = client.get(reverse("login")).content.decode()
    assert "Demo logins" in html
    assert "alice" in html
    assert "demo-password" in html
    assert "researcher" in html
    assert "platform admin" in html


def test_login_with_wrong_password_shows_an_error(client):
    UserFactory(username="alice")
    response = client.post(reverse("login"), {"username": "alice", "password": "wrong"})
    assert response.status_code == 200
    assert 'role="alert"' in response.content.decode()


def test_login_then_home_lands_on_the_pool_for_admins(client):
    UserFactory(username="alice", is_staff=True)
    response = client.post(reverse("login"), {"username": "alice", "password": PASSWORD})
    assert response.status_code == 302
    assert response["Location"] == reverse("home")
    assert client.get(reverse("home"))["Location"] == reverse("pools:overview")


def test_logout_is_a_post_and_signs_out(client):
    client.force_login(UserFactory())
    assert client.get(reverse("logout")).status_code == 405
    response = client.post(reverse("logout"))
    assert response.status_code == 302
    assert response["Location"] == reverse("login")
    assert client.get(reverse("pools:overview")).status_code == 302


def test_home_requires_login(client):
    response = client.get(reverse("home"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_shell_navigation_and_user(client):
    client.force_login(UserFactory(username="alice", first_name="Alice", last_name="Ng"))
    html = client.get(reverse("pools:overview")).content.decode()
    assert f'<a href="{reverse("pools:overview")}" aria-current="page">Pool</a>' in html
    assert "Alice Ng" in html
    assert f'action="{reverse("logout")}"' in html
    assert "Admin</a>" not in html
    assert """hx-headers='{"X-CSRFToken": \"""" in html
    assert 'href="/static/css/portal.css"' in html


def test_shell_admin_link_only_for_staff(client):
    client.force_login(UserFactory(is_staff=True))
    html = client.get(reverse("pools:overview")).content.decode()
    assert f'<a href="{reverse("admin:index")}">Admin</a>' in html


def test_shell_messages_are_shown(client, rf):
    client.force_login(UserFactory())
    # What the messages framework's cookie storage leaves after a redirect.
    storage = CookieStorage(rf.get("/"))
    client.cookies[storage.cookie_name] = storage._encode([Message(constants.SUCCESS, "Quota saved.")])
    html = client.get(reverse("pools:overview")).content.decode()
    assert 'class="message message-success"' in html
    assert "Quota saved." in html


def test_healthz_returns_ok(client):
    response = client.get(reverse("healthz"))
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_local_assets_exist():
    assert finders.find("css/portal.css")
    assert finders.find("django_htmx/htmx-2.min.js")
