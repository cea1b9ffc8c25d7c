"""What the liveness system tests read from a running portal: /status.json, the job list's live note, and the
checks both shapes share."""

from __future__ import annotations

from tests.system.processes import wait_until

#: Fast heartbeats for the tests that do not hold the default thresholds (2 s, stale after 10 s).
FAST = {"HEARTBEAT_SECONDS": "2", "HEARTBEAT_STALE_SECONDS": "10", "PERIODIC_TASK_LATE_SECONDS": "10"}
PAUSED = "Live data paused since"
WORKER_GONE = "the background worker is not running"


def status(portal, session) -> dict:
    """/status.json as that session."""
    return portal.status(session)


def worker_ok(portal, session) -> bool | None:
    """The worker component's ok."""
    return status(portal, session)["components"]["worker"]["ok"]


def job_list(portal, session) -> str:
    """The job list page's HTML (its live note is at the end of the table)."""
    answer = session.get(portal.url("/jobs/?team=vision"), timeout=30)
    assert answer.status_code == 200
    return answer.text


def job_list_saying(portal, session, text: str) -> str | None:
    """The job list's HTML once it says ``text``."""
    html = job_list(portal, session)
    return html if text in html else None


def status_if_ok(portal, session) -> dict | None:
    """/status.json once every component is ok."""
    body = status(portal, session)
    return body if body["ok"] else None


def assert_status_json_for_any_signed_in_user_without_team_data(portal) -> None:
    """401 signed out; 200 with exactly the documented components for a researcher, naming no team or user; the
    status page is not a researcher's."""
    anonymous = portal.session()
    assert anonymous.get(portal.url("/status.json"), timeout=30).status_code == 401
    dave = portal.session("dave")  # a researcher of speech only
    body = wait_until(lambda: status_if_ok(portal, dave), timeout=120, what="every component ok")
    assert set(body) == {"ok", "components"}
    assert set(body["components"]) == {"database", "broker", "worker", "beat", "tasks"}
    text = str(body)
    for private in ("vision", "nlp", "speech", "alice", "Computer Vision"):
        assert private not in text
    assert dave.get(portal.url("/status/"), timeout=30).status_code == 403
