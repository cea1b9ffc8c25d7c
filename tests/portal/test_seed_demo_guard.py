"""seed_demo refuses production mode; with the explicit flag it never uses the published password."""

from __future__ import annotations

import io
import re

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import RequestFactory, override_settings

from portal.demo import DEMO_PASSWORD

pytestmark = pytest.mark.django_db


@override_settings(PORTAL_MODE="production")
def test_seed_demo_refused_in_production_and_changes_nothing():
    with pytest.raises(CommandError) as caught:
        call_command("seed_demo", "--days", "1", stdout=io.StringIO())
    assert caught.value.returncode == 2
    assert "--i-know-this-is-production" in str(caught.value)
    assert not get_user_model().objects.exists()


@override_settings(PORTAL_MODE="production")
def test_seed_demo_forced_in_production_uses_a_random_password_printed_once():
    out = io.StringIO()
    call_command("seed_demo", "--days", "1", "--i-know-this-is-production", stdout=out)
    text = out.getvalue()
    assert DEMO_PASSWORD not in text
    password = re.search(r"shown only here\): (\S+)", text)[1]
    assert text.count(password) == 2  # the warning and the logins line, nothing else
    assert authenticate(RequestFactory().post("/accounts/login/"), username="admin", password=DEMO_PASSWORD) is None
    assert authenticate(RequestFactory().post("/accounts/login/"), username="admin", password=password) is not None


def test_seed_demo_in_development_keeps_the_published_password():
    call_command("seed_demo", "--days", "1", stdout=io.StringIO())
    assert authenticate(RequestFactory().post("/accounts/login/"), username="admin", password=DEMO_PASSWORD) is not None
