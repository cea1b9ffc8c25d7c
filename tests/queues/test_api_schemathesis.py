"""schemathesis over the OpenAPI document, against the WSGI app, with a token and with a browser session: no 5xx,
every status, content type and body as documented. Bounded examples, derandomized (the same cases every run)."""

from __future__ import annotations

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.test import Client
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from portal.wsgi import application
from queues.api.tokens import api_token_create
from tests.browser.scenarios import research_pool
from tests.factories import JobFactory

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(autouse=True)
def _no_throttles(settings):
    """Many calls from one address and one token: the throttles have their own tests."""
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": dict.fromkeys(settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]),
    }


@pytest.fixture
def credentials(db):
    """A researcher with a job, as a token header and as a signed-in session (cookie and CSRF header)."""
    pool = research_pool()
    JobFactory(team=pool.team, owner=pool.user, cluster=pool.cluster, resource_class=pool.rc)
    key = api_token_create(user=pool.user, team=pool.team, name="schemathesis").key
    browser = Client()
    browser.force_login(pool.user)
    browser.get("/classes/")
    csrf = browser.cookies["csrftoken"].value
    session = browser.cookies["sessionid"].value
    return {
        "token": {"Authorization": f"Token {key}"},
        "session": {"Cookie": f"sessionid={session}; csrftoken={csrf}", "X-CSRFToken": csrf},
    }


class _KeepTheTestConnection:
    """The WSGI app, without Django closing "old" connections around each request: on PostgreSQL that would end the
    test's transaction (Django's test client does the same; schemathesis calls the app directly)."""

    def __init__(self, app) -> None:
        self.app = app

    def __call__(self, environ, start_response):
        request_started.disconnect(close_old_connections)
        request_finished.disconnect(close_old_connections)
        try:
            result = self.app(environ, start_response)
            body = list(result)
            result.close()  # sends request_finished while its receiver is off
            return body
        finally:
            request_started.connect(close_old_connections)
            request_finished.connect(close_old_connections)


#: The served document, loaded through the app at collection (the schema view reads no database).
schema = schemathesis.openapi.from_wsgi("/api/schema/", _KeepTheTestConnection(application))


@schema.parametrize()
@settings(max_examples=12, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@pytest.mark.django_db
def test_api_answers_as_documented(case, credentials):
    for headers in credentials.values():  # the same case with the token, then with the session
        case.call_and_validate(headers=headers, checks=CHECKS)
