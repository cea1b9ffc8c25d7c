"""Liveness you can see in the production shape (gunicorn behind nginx, a separate worker and beat, Redis,
PostgreSQL): a killed worker shows in /status.json, the pages and the metrics while the web stays ready, until it
is started again; a frozen worker is seen within two minutes with the default thresholds (heartbeat 15 s, stale
after 60 s) and is back within two minutes of SIGCONT."""

from __future__ import annotations

import time

from tests.system.live_checks import (
    FAST,
    PAUSED,
    WORKER_GONE,
    assert_status_json_for_any_signed_in_user_without_team_data,
    job_list,
    job_list_saying,
    status,
    worker_ok,
)
from tests.system.processes import wait_until


def test_production_worker_killed_shows_on_status_and_pages_until_it_is_started_again(production_portal_factory):
    portal = production_portal_factory(env=FAST)
    alice = portal.session("alice")
    wait_until(lambda: status(portal, alice)["ok"], timeout=120, what="every component ok")
    portal.worker.kill()
    wait_until(lambda: worker_ok(portal, alice) is False, timeout=60, what="the worker to be down")
    html = wait_until(lambda: job_list_saying(portal, alice, PAUSED), timeout=30, what="the note")
    assert WORKER_GONE in html
    metrics = portal.metrics()
    assert 'portal_component_up{component="worker"} 0.0' in metrics
    assert 'portal_component_up{component="database"} 1.0' in metrics
    assert portal.healthy()  # the web stays ready: it does not need the worker

    portal.restart("worker")  # as the Deployment would
    wait_until(lambda: status(portal, alice)["ok"], timeout=180, what="every component ok again")
    assert PAUSED not in job_list(portal, alice)


def test_production_worker_frozen_is_seen_within_two_minutes_with_the_real_thresholds(
    production_portal, record_property
):
    """The defaults (heartbeat 15 s, stale after 60 s): SIGSTOP is seen within 2 minutes, SIGCONT back within 2."""
    portal = production_portal
    alice = portal.session("alice")
    wait_until(lambda: worker_ok(portal, alice), timeout=120, what="the worker ok")
    portal.worker.freeze()
    frozen_at = time.monotonic()
    wait_until(lambda: worker_ok(portal, alice) is False, timeout=120, interval=2, what="SIGSTOP seen within 2 min")
    seen_after = time.monotonic() - frozen_at
    assert PAUSED in job_list(portal, alice)
    portal.worker.thaw()
    thawed_at = time.monotonic()
    wait_until(lambda: worker_ok(portal, alice), timeout=120, interval=2, what="SIGCONT seen within 2 min")
    back_after = time.monotonic() - thawed_at
    record_property("sigstop_seen_after_seconds", round(seen_after, 1))
    record_property("sigcont_back_after_seconds", round(back_after, 1))
    assert 40 <= seen_after < 120, seen_after  # not before the threshold, well within the bound
    assert back_after < 120, back_after


def test_status_json_answers_any_signed_in_user_with_no_team_data(production_portal):
    assert_status_json_for_any_signed_in_user_without_team_data(production_portal)
