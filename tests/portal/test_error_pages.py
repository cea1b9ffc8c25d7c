"""The portal's own 403, 404 and 500 pages; a missing static file is a 404, not a server error."""

from __future__ import annotations

import pytest
from django.contrib.staticfiles import finders
from django.contrib.staticfiles.views import serve
from django.http import Http404
from django.test import Client, RequestFactory
from django.urls import reverse

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_an_unknown_url_gets_the_portal_404_page_without_the_url_list(client):
    client.force_login(UserFactory())
    response = client.get("/no/such/page/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "Page not found" in html
    assert "/no/such/page/" in html
    assert "URLconf" not in html  # not Django's debug page listing every pattern
    assert "Back to the portal" in html


def test_a_staff_page_refuses_a_researcher_with_the_portal_403_page(client):
    client.force_login(UserFactory(is_staff=False))
    response = client.get(reverse("health:map"))
    assert response.status_code == 403
    html = response.content.decode()
    assert "You cannot open this page" in html
    assert 'class="topbar"' in html  # the navigation stays, so the researcher is not stranded


def test_a_server_error_gets_the_portal_500_page(settings):
    settings.ROOT_URLCONF = "tests.portal.failing_urls"
    response = Client(raise_request_exception=False).get("/boom/")
    assert response.status_code == 500
    assert "Something went wrong on our side" in response.content.decode()


def test_a_missing_static_file_is_a_404():
    assert finders.find("css/no-such-file.css") is None
    assert finders.find("css/no-such-file.css", find_all=True) == []
    with pytest.raises(Http404):
        serve(RequestFactory().get("/static/css/no-such-file.css"), "css/no-such-file.css", insecure=True)
    assert finders.find("vendor/plotly/plotly.min.js").endswith("plotly.min.js")
