"""The harness itself: both shapes start, serve pages and the API to a signed-in user and a token, and stop clean."""

from __future__ import annotations

import pytest

from tests.system.processes import problems_in, wait_until

JOB = {
    "name": "system-smoke",
    "image": "registry.example.org/train:1",
    "resource_class": "a100-1g-10gb",
    "devices_per_pod": 1,
    "sim_runtime_seconds": 600,
}


def _submit_and_see_it_decided(portal) -> None:
    """A token submits a job; the worker's tick decides it (admitted, or pending with a reason)."""
    token = portal.api_token("alice", "vision")
    api = portal.session()
    api.headers["Authorization"] = f"Token {token}"
    answer = api.post(portal.url("/api/jobs/"), json=JOB, timeout=30)
    assert answer.status_code == 201, answer.text
    job = answer.json()

    def decided():
        body = api.get(portal.url(f"/api/jobs/{job['id']}/"), timeout=30).json()
        return body if body["state"] != "pending" or body.get("wait_reason") else None

    wait_until(decided, timeout=120, what=f"job {job['id']} to be decided by the worker")


@pytest.mark.parametrize("shape", ["embedded", "production"])
def test_the_portal_serves_pages_and_the_api_and_its_worker_runs_jobs(shape, request):
    portal = request.getfixturevalue(f"{shape}_portal")
    browser = portal.session("alice")
    for path in ("/classes/", "/jobs/", "/pool/"):
        assert browser.get(portal.url(path), timeout=30).status_code == 200, path
    assert browser.get(portal.url("/static/css/portal.css"), timeout=30).status_code == 200
    _submit_and_see_it_decided(portal)
    assert portal.worker.alive()


def test_problems_in_a_log_are_excerpts_with_their_exception_line():
    log = "\n".join(
        [
            "INFO one",
            "ERROR Task failed",
            "Traceback (most recent call last):",
            '  File "x.py", line 1, in f',
            "    raise ValueError('boom')",
            "ValueError: boom",
            "INFO later",
            "sqlite3.OperationalError: database is locked",
        ]
    )
    found = problems_in(log)
    assert len(found) == 2
    assert found[0].startswith("INFO one\nERROR Task failed\nTraceback")
    assert found[0].endswith("ValueError: boom")
    assert found[1].endswith("database is locked")


def test_a_chained_traceback_is_one_excerpt_ending_with_its_last_exception():
    log = "\n".join(
        [
            "consumer: Connection to broker lost. Trying to re-establish the connection...",
            "Traceback (most recent call last):",
            '  File "kombu/transport/virtual/base.py", line 961, in create_channel',
            "    return self._avail_channels.pop()",
            "IndexError: pop from empty list",
            "",
            "During handling of the above exception, another exception occurred:",
            "",
            "Traceback (most recent call last):",
            '  File "redis/connection.py", line 1, in connect',
            "redis.exceptions.ConnectionError: Error 111 connecting to 127.0.0.1:6379. Connection refused.",
            "INFO later",
        ]
    )
    found = problems_in(log)
    assert len(found) == 1
    assert "IndexError: pop from empty list" in found[0]
    assert found[0].endswith("Connection refused.")
