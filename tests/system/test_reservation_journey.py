"""A reservation's journey through the portal as deployed: gunicorn, a Celery worker and Celery beat as their own
processes on PostgreSQL and Redis, a real Chromium for the people.

Speech's lead requests 8 H100 for a window starting at the next whole minute (a minute long) on the request page; it
waits for an admin (automatic approval is off). The admin opens it, runs the preview (the worker replays recent
history with it in place) and approves it. Beat then drives everything: the window's opening is applied
``RESERVATION_LEAD_SECONDS`` ahead and pushed to the simulated cluster, two of Vision's borrowing jobs are asked to
checkpoint and preempted, Speech's queued job starts; at the end the window closes, the push returns the quota and
the preempted borrower that waited starts again. About 2–3 minutes, most of it waiting for the minute to come.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.db import connection
from django.utils import timezone

from queues.engine.scheduler import Engine
from queues.engine_input import cluster_engine_input
from queues.models import Job, JobEvent, PolicyPush, Reservation, ReservationPolicy
from queues.services import JobSpec, job_submit
from tests.browser.scenarios import occupy
from tests.factories import PASSWORD
from tests.redis_check import redis_answers
from tests.reservations.world import reservation_world

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("SYSTEM_TEST_REDIS_URL") or os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/7"
PORT = int(os.environ.get("SYSTEM_TEST_PORT", "18710"))
LEAD_SECONDS = 5

pytestmark = [
    pytest.mark.system,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not redis_answers(REDIS_URL), reason=f"no Redis at {REDIS_URL}"),
    pytest.mark.xdist_group("redis"),
]


def _database_url() -> str:
    """The test database: the processes must see what the test committed, and the test what they wrote."""
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


class Processes:
    """gunicorn, a worker and beat, each in its own process group, logging to files under ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "DATABASE_URL": _database_url(),
            "CELERY_BROKER_URL": REDIS_URL,
            "REDIS_URL": REDIS_URL,
            "RESERVATION_LEAD_SECONDS": str(LEAD_SECONDS),
            "RESERVATION_EDGE_SECONDS": "1",
            "SIMULATOR_TICK_SECONDS": "1",
            "SIMULATED_CHECKPOINT_SECONDS": "3",
            "PYTHONUNBUFFERED": "1",
        }
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs = {}

    def start(self, name: str, command: list[str]) -> None:
        """Start one process."""
        log = (self.folder / f"{name}.log").open("ab")
        self.logs[name] = log
        self.procs[name] = subprocess.Popen(
            command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
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
        for log in self.logs.values():
            log.close()

    def tail(self) -> str:
        """The last lines of each log (for a failure's message)."""
        out = []
        for name in self.procs:
            lines = (self.folder / f"{name}.log").read_text(errors="replace").splitlines()[-25:]
            out.append(f"--- {name}\n" + "\n".join(lines))
        return "\n".join(out)


@pytest.fixture
def deployed(tmp_path) -> Iterator[Processes]:
    """The portal as deployed, on this test's database and a purged Redis database."""
    redis.Redis.from_url(REDIS_URL).flushdb()
    bin_dir = Path(sys.executable).parent
    processes = Processes(tmp_path)
    processes.start(
        "web",
        [str(bin_dir / "gunicorn"), "tests.system.wsgi_with_static:application", f"--bind=127.0.0.1:{PORT}", "--workers=2",
         "--timeout=60"],
    )  # fmt: skip
    processes.start(
        "worker",
        [sys.executable, "-m", "celery", "-A", "portal", "worker", "-c", "2", "-l", "info", "--without-mingle",
         "--without-gossip"],
    )  # fmt: skip
    processes.start(
        "beat", [sys.executable, "-m", "celery", "-A", "portal", "beat", "-l", "info", "-s", str(tmp_path / "beat")]
    )
    try:
        yield processes
    finally:
        processes.stop()


def wait_for(predicate: Callable[[], object], seconds: float, what: str, processes: Processes) -> object:
    """Poll ``predicate`` until it answers something true; fail naming ``what`` with the processes' logs."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}\n{processes.tail()}")


def nominal(cluster, queue: str) -> int:
    """The nominal H100 quota of a queue as the engine applies it now."""
    now = timezone.now()
    engine = Engine(cluster_engine_input(cluster=cluster, now=now).state, now.timestamp())
    return engine.cqs[queue].spec.resource_groups[0].flavors[0].resources[0].nominal


def sign_in(browser, username: str):
    """A page of a fresh browser context, signed in as ``username`` through the sign-in form."""
    context = browser.new_context(base_url=f"http://127.0.0.1:{PORT}", viewport={"width": 1360, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto("/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)
    return page


def deployed_password(*users) -> None:
    """Give ``users`` the factories' password hashed as the deployed settings can check it (the tests' settings hash
    with MD5, which the processes' settings do not accept)."""
    hasher = PBKDF2PasswordHasher()
    for user in users:
        user.password = hasher.encode(PASSWORD, hasher.salt(), iterations=1000)
        user.save(update_fields=["password"])


def test_lead_requests_admin_previews_and_approves_the_window_reclaims_and_returns(deployed, browser):
    world = reservation_world(cohort_quota=None)  # speech's 8 reserved come from vision's 12
    deployed_password(world.frank, world.admin)
    ReservationPolicy.objects.filter(pk=1).update(auto_approve=False, min_window_minutes=1)
    pool = world.pool
    now = timezone.now()
    borrowers = [
        occupy(pool, node=pool.nodes[i], count=4, name=f"train-{i}", started=now - timedelta(minutes=30), runtime=86400)
        for i in range(3)
    ]
    Job.objects.filter(pk__in=[j.pk for j in borrowers]).update(checkpoint_path="/ckpt", checkpoint_signal="SIGUSR1")
    occupy(pool, node=pool.nodes[3], count=4, team=world.speech, name="base", runtime=86400)
    queued = job_submit(
        owner=pool.other_user,
        team=world.speech,
        spec=JobSpec(
            name="eval", image="registry.local/eval:1", resource_class=pool.rc, devices_per_pod=4, pod_count=2,
            sim_runtime_seconds=20,
        ),
        now=now,
        notify_backend=False,
    )  # fmt: skip
    wait_for(
        lambda: Job.objects.get(pk=queued.pk).wait_reason, 60, "the cluster's first tick to explain the wait", deployed
    )
    assert Job.objects.get(pk=queued.pk).state == Job.State.PENDING
    assert nominal(pool.cluster, "speech") == 4

    # the lead requests the window on the request page: a whole minute 90 to 150 s away, one minute long
    start = (timezone.localtime() + timedelta(seconds=150)).replace(second=0, microsecond=0)
    lead = sign_in(browser, "frank")
    lead.goto("/reservations/")
    form = lead.locator("#reservation-request")
    form.locator("#id_team").select_option("speech")
    form.locator("#id_resource_class").select_option("h100")
    form.locator("#id_count").fill("8")
    form.locator("#id_starts_at").fill(f"{start:%Y-%m-%dT%H:%M}")
    form.locator("#id_ends_at").fill(f"{start + timedelta(minutes=1):%Y-%m-%dT%H:%M}")
    form.locator("#id_purpose").fill("evaluation run")
    form.locator("button[type=submit]").click()
    lead.wait_for_url("**/reservations/*/")
    row = Reservation.objects.get()
    assert row.state == Reservation.State.REQUESTED, row.reasons
    assert "Waiting for an admin" in lead.locator("#reservation-state").inner_text()

    # the admin previews it (the worker replays recent history with it in place), then approves it
    admin = sign_in(browser, "admin")
    admin.goto(f"/reservations/{row.pk}/")
    admin.click("#reservation-preview")
    finished = admin.locator("[id^=reservations-preview-]:not([hx-get])")  # polled until the worker finished it
    finished.wait_for(timeout=90_000)
    assert "would have waited longer" in finished.inner_text(), finished.inner_text()
    admin.fill("#id_note", "release week")
    admin.click("#reservation-approve")
    admin.wait_for_url(f"**/reservations/{row.pk}/")
    assert "Approved" in admin.locator("#reservation-state").inner_text()
    row.refresh_from_db()
    assert (row.state, row.decision, row.decided_by) == (Reservation.State.APPROVED, "admin", world.admin)
    assert timezone.now() < row.starts_at - timedelta(seconds=LEAD_SECONDS), "approved too late to watch the edge"

    # beat applies the opening ahead of the start and pushes it: two borrowers checkpoint, speech's job starts
    wait_for(lambda: Reservation.objects.get(pk=row.pk).opened_at, 150, "the window to open", deployed)
    row.refresh_from_db()
    assert row.starts_at - timedelta(seconds=LEAD_SECONDS) <= row.opened_at < row.starts_at
    wait_for(
        lambda: PolicyPush.objects.filter(reason__endswith=" opens", state=PolicyPush.State.SUCCEEDED).exists(),
        60, "the opening's push", deployed,
    )  # fmt: skip
    assert Job.objects.get(pk=queued.pk).started_at is None
    started = wait_for(
        lambda: Job.objects.filter(pk=queued.pk, started_at__isnull=False).first(),
        60,
        "speech's job to start",
        deployed,
    )
    assert started.started_at >= row.opened_at
    assert started.assignment["clusterQueue"] == "speech"
    preempted = Job.objects.filter(pk__in=[j.pk for j in borrowers], events__kind=JobEvent.Kind.PREEMPTED).distinct()
    assert preempted.count() == 2
    for victim in preempted:
        kinds = list(victim.events.exclude(kind=JobEvent.Kind.WAIT_REASON).values_list("kind", flat=True))
        assert kinds[kinds.index(JobEvent.Kind.PREEMPTED) :][:4] == [
            JobEvent.Kind.PREEMPTED,
            JobEvent.Kind.CHECKPOINT_REQUESTED,
            JobEvent.Kind.CHECKPOINT_DONE,
            JobEvent.Kind.REQUEUED,
        ]
        assert victim.events.get(kind=JobEvent.Kind.PREEMPTED).details["reason"] == "InCohortReclamation"
    assert nominal(pool.cluster, "speech") == 12

    # the end: the window closes, the push returns the quota, the borrowers that waited start again
    wait_for(lambda: Reservation.objects.get(pk=row.pk).closed_at, 150, "the window to close", deployed)
    wait_for(
        lambda: PolicyPush.objects.filter(reason__endswith=" closes", state=PolicyPush.State.SUCCEEDED).exists(),
        60, "the closing's push", deployed,
    )  # fmt: skip
    assert (nominal(pool.cluster, "vision"), nominal(pool.cluster, "speech")) == (12, 4)
    back = (Job.State.ADMITTED, Job.State.RUNNING)
    wait_for(
        lambda: all(Job.objects.get(pk=v.pk).state in back for v in preempted),
        60, "the preempted borrowers to be admitted again", deployed,
    )  # fmt: skip
    assert Job.objects.get(pk=queued.pk).state == Job.State.SUCCEEDED
    lead.goto(f"/reservations/{row.pk}/")
    assert "closed" in lead.locator("#reservation-edges").inner_text()
