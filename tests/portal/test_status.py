"""``/status.json`` (any signed-in user, no team data) and the status page (admins, staff, operators)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone

from liveness import services
from liveness.models import ProcessHeartbeat
from queues import selectors as sel
from tests.browser.scenarios import research_pool
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

SCHEDULE = {"simulated-clusters-tick": {"task": "clusters.simulated_clusters_tick", "schedule": 5.0}}


@pytest.fixture
def alive(settings, tmp_path):
    """A worker and beat heard from now, one tick run, an embedded broker that answers."""
    broker = tmp_path / "broker.sqlite3"
    broker.write_bytes(b"")
    settings.CELERY_BROKER_URL = f"sqla+sqlite:///{broker}"
    settings.CELERY_BEAT_SCHEDULE = SCHEDULE
    now = timezone.now()
    for kind in ("worker", "beat"):
        services.heartbeat_record(kind=kind, hostname="h", pid=1, started_at=now - timedelta(minutes=1), now=now)
    services.periodic_started(entry="simulated-clusters-tick", task="t", sent_at=now, interval_seconds=5, now=now)
    services.periodic_finished(entry="simulated-clusters-tick", task="t", error=None, now=now)
    return now


def test_status_json_has_the_documented_shape_for_a_researcher(client, alive):
    pool = research_pool(racks={"rack-a": [2]})
    client.force_login(pool.user)
    response = client.get("/status.json")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"ok", "components"}
    assert set(body["components"]) == {"database", "broker", "worker", "beat", "tasks"}
    assert set(body["components"]["worker"]) == {"ok", "last_seen"}
    assert set(body["components"]["beat"]) == {"ok", "last_seen"}
    assert body["ok"] is True
    assert body["components"]["worker"]["last_seen"] == alive.isoformat()
    tick = body["components"]["tasks"]["entries"]["simulated-clusters-tick"]
    assert tick == {"ok": True, "last_run": alive.isoformat(), "lag_seconds": 0.0, "last_failure": None}
    assert "no-store" in response["Cache-Control"]


def test_status_json_says_a_worker_gone_quiet_is_down_and_holds_no_team_data(client, alive, settings):
    settings.HEARTBEAT_STALE_SECONDS = 60
    pool = research_pool(racks={"rack-a": [2]})
    error = ValueError(f"job of team {pool.team.slug}")
    services.periodic_finished(entry="simulated-clusters-tick", task="t", error=error, now=alive + timedelta(seconds=1))
    quiet_since = alive - timedelta(seconds=61)
    ProcessHeartbeat.objects.filter(kind="worker").update(last_seen_at=quiet_since)
    client.force_login(pool.user)
    body = client.get("/status.json").json()
    assert body["ok"] is False
    assert body["components"]["worker"] == {"ok": False, "last_seen": quiet_since.isoformat()}
    assert body["components"]["beat"]["ok"] is True
    assert body["components"]["tasks"]["failing"] == ["simulated-clusters-tick"]
    text = json.dumps(body)
    for private in (pool.team.slug, pool.team.name, pool.other_team.slug, pool.user.username):
        assert private not in text


def test_status_json_asks_an_anonymous_caller_to_sign_in(client):
    response = client.get("/status.json")
    assert response.status_code == 401
    assert response.json() == {"detail": "Sign in to read the status."}


@pytest.mark.parametrize(("who", "expected"), [("researcher", 403), ("operator", 200), ("admin", 200)])
def test_the_status_page_is_for_admins_and_operators(client, alive, who, expected):
    user = UserFactory(username=who, is_staff=who == "admin")
    if who == "operator":
        user.groups.add(Group.objects.get(name=sel.OPERATOR_GROUP))
    client.force_login(user)
    response = client.get("/status/")
    assert response.status_code == expected
    if expected == 200:
        html = response.content.decode()
        assert "Everything is running." in html
        assert 'data-entry="simulated-clusters-tick"' in html
        assert 'href="/status/"' in html  # the navigation's Status link


def test_the_status_page_fragment_polls_and_names_what_is_down(client, settings, tmp_path):
    settings.CELERY_BEAT_SCHEDULE = SCHEDULE
    settings.CELERY_BROKER_URL = f"sqla+sqlite:///{tmp_path / 'missing' / 'b.sqlite3'}"
    client.force_login(UserFactory(is_staff=True))
    response = client.get("/status/", HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert 'id="portal-status-components"' in html[:300]
    assert "Something is down: the message broker." in html
    assert "HX-Request" in response["Vary"]
