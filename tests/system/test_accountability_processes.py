"""Where the waiting went, in real processes as deployed: gunicorn serves the pages, a Celery beat sends the wait
attribution's rollup, a Celery worker runs it and the admins' "what would have helped" study; Redis is the broker and
PostgreSQL the database (the test's own, committed: the processes see what the test wrote).

The history is the hand-worked one of ``tests/queues/test_wait_study.py``, put a few hours before now: Vision has 4 of
the node's 8 H100s as quota; two 4-GPU jobs arrive together and run 2 h each; the second waits for Vision's quota
until the first ends: 4 GPUs × 2 h = 8 GPU-hours of waiting, all "own quota used up", and 4 more GPUs of quota would
have saved all 8.

The journey: the lead, carol, signs in through the sign-in page and waits for the page's report to show the 8
GPU-hours (nothing is rolled up until the beat's task has run in the worker); the CSV says the same; an admin asks
for a study through the panel's form and reads its result once the worker has replayed the day.

Ports: ``SYSTEM_TEST_PORTS`` (e.g. ``18900-18999`` on a shared machine), else one the system gives.
"""

from __future__ import annotations

import csv
import io
import os
import re
import signal
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import requests
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.db import connection
from django.utils import timezone

from queues.models import Membership
from tests.browser.scenarios import research_pool
from tests.factories import PASSWORD, MembershipFactory, UserFactory
from tests.queues.test_wait_study import two_quota_jobs
from tests.redis_check import redis_answers

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
H = timedelta(hours=1)
#: Log lines that fail the test: a traceback or a critical error in any process.
PROBLEMS = re.compile(r"Traceback \(most recent call last\)|CRITICAL|Unrecoverable error")

pytestmark = [
    pytest.mark.system,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not redis_answers(REDIS_URL), reason=f"no Redis at {REDIS_URL}"),
    pytest.mark.xdist_group("redis"),
]


def _database_url() -> str:
    """The test database, as the processes must reach it."""
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def _free_port() -> int:
    """A free port: in ``SYSTEM_TEST_PORTS`` (``LOW-HIGH``) when set, else one the system gives."""
    low, _, high = os.environ.get("SYSTEM_TEST_PORTS", "0-0").partition("-")
    for port in range(int(low), int(high or low) + 1):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError(f"no free port in SYSTEM_TEST_PORTS={os.environ['SYSTEM_TEST_PORTS']}")


class Processes:
    """gunicorn, a Celery worker and a Celery beat, each in its own process group, logging to files."""

    def __init__(self, folder: Path, *, port: int) -> None:
        self.folder = folder
        self.port = port
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "DATABASE_URL": _database_url(),
            "CELERY_BROKER_URL": REDIS_URL,
            "WAIT_ATTRIBUTION_SECONDS": "2",
            "PYTHONUNBUFFERED": "1",
        }
        celery = [sys.executable, "-m", "celery", "-A", "portal"]
        commands = {
            # deploy/base/web.yaml, worker.yaml and beat.yaml, fewer processes
            "web": [sys.executable, "-m", "gunicorn", "portal.wsgi:application", f"--bind=127.0.0.1:{port}",
                    "--workers=2", "--threads=2", "--timeout=60", "--access-logfile=-"],
            "worker": [*celery, "worker", "--loglevel=INFO", "--concurrency=2", "--without-gossip",
                       "--without-mingle"],
            "beat": [*celery, "beat", "--loglevel=INFO", f"--schedule={folder / 'celerybeat-schedule'}"],
        }  # fmt: skip
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}
        for name, command in commands.items():
            self.logs[name] = folder / f"{name}.log"
            with self.logs[name].open("ab") as log:
                self.procs[name] = subprocess.Popen(
                    command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )

    def url(self, path: str) -> str:
        """The web server's address of ``path``."""
        return f"http://127.0.0.1:{self.port}{path}"

    def wait_ready(self, timeout: float = 120) -> None:
        """Until gunicorn answers /healthz (and every process still runs)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                if requests.get(self.url("/healthz"), timeout=10).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.3)
        raise AssertionError("gunicorn did not answer /healthz\n" + self.report())

    def check_alive(self) -> None:
        """Fail, with the logs, when a process ended."""
        ended = {name: p.returncode for name, p in self.procs.items() if p.poll() is not None}
        assert not ended, f"processes ended: {ended}\n{self.report()}"

    def problems(self) -> list[str]:
        """The processes' log lines with a traceback or a critical error."""
        return [f"{name}: {line}" for name, path in self.logs.items() for line in path.read_text().splitlines()
                if PROBLEMS.search(line)]  # fmt: skip

    def report(self) -> str:
        """The tail of every log."""
        return "\n".join(
            f"--- {name}.log\n" + "\n".join(path.read_text().splitlines()[-40:]) for name, path in self.logs.items()
        )

    def stop(self) -> None:
        """SIGTERM each process group, then SIGKILL what is left."""
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def _history():
    """Vision's two 4-GPU jobs of the hand-worked case, the first at 10 h before now; carol leads Vision."""
    pool = research_pool(racks={"rack-a": [8]}, nominal="4")
    t0 = timezone.now().replace(microsecond=0) - 10 * H
    two_quota_jobs(pool, t0)
    # The processes check passwords with the portal's hasher, not the tests' fast one.
    password = PBKDF2PasswordHasher().encode(PASSWORD, PBKDF2PasswordHasher().salt())
    lead = UserFactory(username="carol", password=password)
    MembershipFactory(team=pool.team, user=lead, role=Membership.Role.LEAD)
    UserFactory(username="root", password=password, is_staff=True, is_superuser=True)
    return pool, t0


def _signed_in(portal: Processes, username: str) -> requests.Session:
    """A session signed in through the sign-in page (CSRF token and Referer as a browser sends them)."""
    session = requests.Session()
    page = session.get(portal.url("/accounts/login/"), timeout=10)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    answer = session.post(
        portal.url("/accounts/login/"),
        data={"csrfmiddlewaretoken": token, "username": username, "password": PASSWORD},
        headers={"Referer": portal.url("/accounts/login/")},
        timeout=10,
    )
    assert answer.ok, answer.text[:500]
    assert "/accounts/login/" not in answer.url, re.findall(r'role="alert">(.*?)</div>', answer.text, re.S)
    session.headers["X-CSRFToken"] = session.cookies["csrftoken"]
    session.headers["Referer"] = portal.url("/waiting/")
    return session


def _until(check, *, timeout: float, portal: Processes, what: str):
    """Call ``check`` until it returns something true (the processes must stay up meanwhile)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        portal.check_alive()
        found = check()
        if found:
            return found
        time.sleep(1)
    raise AssertionError(f"{what}: not within {timeout:.0f} s\n{portal.report()}")


@pytest.fixture
def portal(tmp_path):
    processes = Processes(tmp_path, port=_free_port())
    try:
        processes.wait_ready()
        yield processes
    finally:
        processes.stop()


def test_the_beat_rolls_waiting_up_and_the_worker_estimates_what_would_have_helped(portal):
    pool, t0 = _history()
    weeks = {"team": pool.team.slug, "start": (t0 - 7 * 24 * H).date().isoformat(),
             "end": timezone.now().date().isoformat()}  # fmt: skip

    lead = _signed_in(portal, "carol")

    def csv_hours() -> float | None:
        answer = lead.get(portal.url("/waiting/export.csv"), params=weeks, timeout=10)
        assert answer.status_code == 200, answer.text[:500]
        rows = list(csv.DictReader(io.StringIO(answer.text)))
        return sum(float(r["gpu_hours"]) for r in rows) or None

    # Nothing is attributed until the beat has sent the rollup and the worker has run it.
    assert _until(csv_hours, timeout=90, portal=portal, what="the rollup's 8 GPU-hours in the CSV") == pytest.approx(8)
    page = lead.get(portal.url("/waiting/"), params=weeks, timeout=10)
    assert page.status_code == 200
    assert "Own quota used up" in page.text
    assert re.search(r"GPU-hours waited</[^>]+>\s*<[^>]+>\s*8\.0<", page.text), page.text[:3000]
    assert "What would have helped" not in page.text  # admins only
    assert lead.post(portal.url("/waiting/study/"), data={"cluster": pool.cluster.pk, "days": 1}).status_code == 404

    admin = _signed_in(portal, "root")
    asked = admin.post(portal.url("/waiting/study/"), data={"cluster": pool.cluster.pk, "days": 1}, timeout=10)
    assert asked.status_code == 200, asked.text[:500]

    def result() -> str | None:
        panel = admin.get(portal.url("/waiting/study/status/"), timeout=10)
        assert panel.status_code in (200, 286), panel.text[:500]
        assert "The study failed" not in panel.text, panel.text
        return panel.text if 'data-cause="quota"' in panel.text else None

    panel = _until(result, timeout=120, portal=portal, what="the study's result in the panel")
    row = re.search(r'<tr data-cause="quota">(.*?)</tr>', panel, re.S).group(1)
    cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)]
    assert cells == ["Own quota used up", "8.0", "4 more GPU(s) of nominal quota for Vision", "8.0"]
    assert portal.problems() == [], portal.report()
