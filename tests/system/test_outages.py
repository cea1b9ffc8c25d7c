"""Outages survived, with the real processes (production shape): Redis stopped for 30 s, PostgreSQL restarted.

Redis: the API answers 503 with Retry-After and JSON (its throttles fail closed), the pages stay up, the worker
reconnects by itself, and every submission accepted before the outage is decided after it. PostgreSQL: tasks that
met the restart retry, and no effect is lost or doubled (every accepted submission is one job, decided; no job's
timeline repeats a state change; no device is held twice).
"""

from __future__ import annotations

import json
import time

import requests

from tests.system.live_checks import FAST
from tests.system.processes import wait_until


def submission(name: str) -> dict:
    """A small job of team vision that fits the demo's MIG slices."""
    return {
        "name": name,
        "image": "registry.example.org/train:1",
        "resource_class": "a100-1g-10gb",
        "devices_per_pod": 1,
        "sim_runtime_seconds": 900,
    }


def token_session(portal, token: str) -> requests.Session:
    """An API client with a team token."""
    api = portal.session()
    api.headers["Authorization"] = f"Token {token}"
    return api


def decided(api, portal, job_id: int) -> bool:
    """Whether the simulated cluster has decided the job (admitted or running, or pending with a reason)."""
    body = api.get(portal.url(f"/api/jobs/{job_id}/"), timeout=30).json()
    return body["state"] != "pending" or bool(body.get("wait_reason"))


def test_redis_stopped_30_s_api_503_pages_up_worker_reconnects_nothing_lost(production_portal_factory):
    portal = production_portal_factory(env=FAST)
    # Expected while Redis is down: beat's one-line warnings, the web's 503 log lines, Celery's reconnect messages.
    portal.allow_in_logs(r"Error 111|Connection refused|ConnectionError|OperationalError")
    api = token_session(portal, portal.api_token("alice", "vision"))
    alice = portal.session("alice")
    wait_until(lambda: portal.status(alice)["ok"], timeout=120, what="every component ok")
    before = []
    for i in range(3):
        answer = api.post(portal.url("/api/jobs/"), json=submission(f"before-redis-{i}"), timeout=30)
        assert answer.status_code == 201, answer.text
        before.append(answer.json()["id"])
    worker_pid = portal.worker.pid

    portal.redis.stop()
    stopped = time.monotonic()
    refused = api.post(portal.url("/api/jobs/"), json=submission("during-redis"), timeout=30)
    assert refused.status_code == 503
    assert int(refused.headers["Retry-After"]) > 0
    assert refused.headers["Content-Type"] == "application/json"
    assert "try again" in refused.json()["detail"]
    listed = api.get(portal.url("/api/jobs/"), timeout=30)
    assert (listed.status_code, listed.headers["Content-Type"]) == (503, "application/json")
    for path in ("/jobs/", "/classes/", "/pool/"):
        assert alice.get(portal.url(path), timeout=30).status_code == 200, path
    body = portal.status(alice)
    assert body["components"]["broker"]["ok"] is False
    assert body["components"]["database"]["ok"] is True
    time.sleep(max(0.0, 30 - (time.monotonic() - stopped)))
    portal.redis.start()

    wait_until(lambda: api.get(portal.url("/api/jobs/"), timeout=30).status_code == 200, timeout=60, what="API back")
    for job_id in before:
        wait_until(lambda j=job_id: decided(api, portal, j), timeout=180, what=f"job {job_id} decided after the outage")
    after = api.post(portal.url("/api/jobs/"), json=submission("after-redis"), timeout=30)
    assert after.status_code == 201, after.text
    wait_until(lambda: decided(api, portal, after.json()["id"]), timeout=120, what="a new job decided")
    names = [j["name"] for j in api.get(portal.url("/api/jobs/?limit=200"), timeout=30).json()["results"]]
    assert "during-redis" not in names  # refused, not half-written
    assert portal.worker.pid == worker_pid  # the same worker, reconnected by itself
    assert portal.worker.alive()
    wait_until(lambda: portal.status(alice)["ok"], timeout=120, what="every component ok again")


def test_postgres_restarted_no_task_effect_lost_or_doubled(production_portal_factory):
    portal = production_portal_factory(env=FAST)
    # Expected while PostgreSQL is down: requests answered 503 (logged with their cause), tasks retrying.
    portal.allow_in_logs(
        r"OperationalError|InterfaceError|terminating connection|connection .* (refused|closed)|server closed"
        r"|the database system is (starting up|shutting down)|Service Unavailable|could not (connect|record)"
    )
    api = token_session(portal, portal.api_token("alice", "vision"))
    alice = portal.session("alice")
    wait_until(lambda: portal.status(alice)["ok"], timeout=120, what="every component ok")

    accepted: dict[str, int] = {}
    cancelled: list[int] = []

    def submit(name: str) -> None:
        """Submit until accepted, honouring Retry-After (as the command-line client does)."""
        for _ in range(40):
            try:
                answer = api.post(portal.url("/api/jobs/"), json=submission(name), timeout=30)
            except requests.RequestException:
                time.sleep(1)
                continue
            if answer.status_code == 201:
                accepted[name] = answer.json()["id"]
                return
            assert answer.status_code == 503, answer.text
            assert answer.headers["Content-Type"] == "application/json"
            time.sleep(min(int(answer.headers["Retry-After"]), 3))
        raise AssertionError(f"{name} was never accepted")

    for i in range(4):
        submit(f"before-pg-{i}")
    cancel = api.post(portal.url(f"/api/jobs/{accepted['before-pg-0']}/cancel/"), timeout=30)
    assert cancel.status_code == 200, cancel.text
    cancelled.append(accepted["before-pg-0"])

    portal.postgres.stop("fast")
    during = api.post(portal.url("/api/jobs/"), json=submission("while-pg-down"), timeout=30)
    assert during.status_code == 503, during.text
    assert during.headers["Content-Type"] == "application/json"
    assert int(during.headers["Retry-After"]) > 0
    time.sleep(10)
    portal.postgres.start()

    for i in range(4):
        submit(f"after-pg-{i}")
    for name, job_id in accepted.items():
        wait_until(lambda j=job_id: decided(api, portal, j), timeout=240, what=f"{name} decided after the restart")
    wait_until(lambda: portal.status(alice)["ok"], timeout=180, what="every component ok again")

    report = json.loads(portal.shell(CHECK_EFFECTS.replace("NAMES", json.dumps(sorted(accepted)))).splitlines()[-1])
    assert report["jobs_per_name"] == dict.fromkeys(sorted(accepted), 1)  # no submission lost, none doubled
    assert report["repeated_state_events"] == []
    assert report["devices_held_twice"] == []
    assert report["jobs_holding_more_than_asked"] == []
    assert report["cancelled_holding"] == []
    assert report["periodic_failures"] == {}
    assert report["task_failures"] == {}
    assert portal.worker.alive()
    assert portal.beat.alive()


#: Runs in ``manage.py shell`` against the portal's database; prints one JSON line.
CHECK_EFFECTS = """
import json
from collections import Counter
from django.db.models import Count, Q
from liveness.models import PeriodicTaskState
from pools.models import Allocation
from portal.models import TaskFailure
from queues.models import Job, JobEvent

names = NAMES
jobs = {j.name: j for j in Job.objects.filter(name__in=names)}
per_name = dict(Counter(Job.objects.filter(name__in=names).values_list("name", flat=True)))
STATE_KINDS = {"submitted", "admitted", "started", "succeeded", "failed", "cancelled", "timed_out", "evicted"}
repeated = []
for job in jobs.values():
    kinds = [k for k in job.events.order_by("at", "id").values_list("kind", flat=True) if k in STATE_KINDS]
    repeated += [f"{job.name}: {a}" for a, b in zip(kinds, kinds[1:]) if a == b]
    repeated += [f"{job.name}: {k} x{n}" for k, n in Counter(kinds).items() if n > 1 and k != "admitted"]
open_allocs = Allocation.objects.filter(ended_at__isnull=True)
twice = list(open_allocs.values("device_id").annotate(n=Count("id")).filter(n__gt=1).values_list("device_id", flat=True))
over = []
for job in Job.objects.filter(name__in=names):
    held = open_allocs.filter(job=job).count()
    if held > job.devices_per_pod * job.pod_count:
        over.append(job.name)
cancelled = [j.name for j in Job.objects.filter(name__in=names, state="cancelled") if open_allocs.filter(job=j).exists()]
print(json.dumps({
    "jobs_per_name": per_name,
    "repeated_state_events": repeated,
    "devices_held_twice": twice,
    "jobs_holding_more_than_asked": over,
    "cancelled_holding": cancelled,
    "periodic_failures": {r.entry: r.last_error for r in PeriodicTaskState.objects.filter(failures__gt=0)},
    "task_failures": {r.task: r.last_error for r in TaskFailure.objects.all()},
}))
"""
