"""A dependency that is down gets a clear 503 with Retry-After (JSON for the API), never an HTML 500: the database
restarting, the broker or the cache unreachable. Real clients against a closed port, not mocks."""

from __future__ import annotations

import html
import logging
import socket

import pytest
from django.test import Client
from django.utils import timezone
from kombu import pools as kombu_pools

from portal.celery import app
from queues import services
from queues.api.tokens import api_token_create
from queues.models import Job
from tests.browser.scenarios import research_pool

pytestmark = pytest.mark.django_db


@pytest.fixture
def closed_port() -> int:
    """A local port nothing listens on: a connection to it is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def cache_down(settings, closed_port):
    """The API throttles' cache is a Redis that does not answer."""
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{closed_port}/0",
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }


def _assert_503_json(response) -> None:
    assert response.status_code == 503
    assert response["Content-Type"] == "application/json"
    assert int(response["Retry-After"]) > 0
    assert "try again" in response.json()["detail"].lower()


def test_with_the_cache_down_a_token_call_is_refused_with_503_and_retry_after(client, cache_down, caplog):
    pool = research_pool(racks={"rack-a": [2]})
    key = api_token_create(user=pool.user, team=pool.team, name="ci").key
    with caplog.at_level(logging.WARNING):
        response = client.get("/api/jobs/", HTTP_AUTHORIZATION=f"Token {key}")
    _assert_503_json(response)
    assert response.json()["detail"].startswith("The API cannot count calls right now")
    assert "fail closed" in caplog.text


def test_with_the_cache_down_anonymous_session_and_bad_token_calls_get_503(client, cache_down):
    pool = research_pool(racks={"rack-a": [2]})
    _assert_503_json(client.get("/api/jobs/"))
    _assert_503_json(client.get("/api/jobs/", HTTP_AUTHORIZATION="Token gpp_not-a-real-key"))
    client.force_login(pool.user)
    _assert_503_json(client.get("/api/jobs/"))


def test_with_the_cache_down_the_pages_stay_up(client, cache_down):
    pool = research_pool(racks={"rack-a": [2]})
    client.force_login(pool.user)
    for url in ("/jobs/", "/classes/", "/pool/"):
        assert client.get(url).status_code == 200, url


@pytest.mark.parametrize(
    ("url", "dependency"), [("/page/db/", "database"), ("/page/broker/", "message broker")], ids=["db", "broker"]
)
def test_a_page_that_meets_a_dependency_down_answers_503_with_retry_after(settings, url, dependency):
    settings.ROOT_URLCONF = "tests.portal.outage_urls"
    response = Client(raise_request_exception=False).get(url)
    assert response.status_code == 503
    assert response["Retry-After"] == "30"
    assert f"The portal's {dependency} cannot be reached right now" in html.unescape(response.content.decode())


def test_the_api_answers_a_dependency_down_with_503_json_and_a_bug_with_500_json(settings):
    settings.ROOT_URLCONF = "tests.portal.outage_urls"
    client = Client(raise_request_exception=False)
    _assert_503_json(client.get("/api/db/"))
    _assert_503_json(client.get("/api/drf-db/"))
    bug = client.get("/api/bug/")
    assert (bug.status_code, bug.json()) == (500, {"detail": "Server error."})


@pytest.fixture
def broker_down(settings, closed_port):
    """Tasks are sent to a Redis broker that does not answer (not run eagerly)."""
    saved = {key: app.conf[key] for key in ("broker_url", "task_always_eager", "broker_transport_options")}
    app.conf.update(
        broker_url=f"redis://127.0.0.1:{closed_port}/0",
        task_always_eager=False,
        broker_transport_options={"socket_connect_timeout": 1, "socket_timeout": 1},
    )
    settings.CELERY_TASK_ALWAYS_EAGER = False
    kombu_pools.reset()
    app._pool = None
    app.amqp._producer_pool = None
    yield
    app.conf.update(saved)
    kombu_pools.reset()
    app._pool = None
    app.amqp._producer_pool = None


def test_a_submission_with_the_broker_down_is_saved_and_left_to_the_sweep(
    broker_down, caplog, django_capture_on_commit_callbacks
):
    pool = research_pool(racks={"rack-a": [2]})
    spec = services.JobSpec(name="outage", image="registry.example.org/t:1", resource_class=pool.rc, devices_per_pod=1)
    with caplog.at_level(logging.WARNING), django_capture_on_commit_callbacks(execute=True):
        job = services.job_submit(owner=pool.user, team=pool.team, spec=spec, now=timezone.now())
    assert Job.objects.get(pk=job.pk).state == Job.State.PENDING
    assert f"clusters.job_create({job.pk}) not sent, the broker is unreachable" in caplog.text
    assert "the next tick or reconcile of its cluster hands it over" in caplog.text
