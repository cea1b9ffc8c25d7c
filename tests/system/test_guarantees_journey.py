"""Guarantees as deployed: a GPU fails → the cohort's shortfall is shown and applied per its policy → a team's wait
says so → the GPU returns → the quotas are restored (issue 38).

The portal runs as it is deployed: gunicorn serves ``portal.wsgi``, a Celery worker and Celery beat run as their own
processes on Redis, all three on the test's PostgreSQL database with ``portal.settings``. Beat's schedule drives
everything after a submission (the simulated cluster's tick, the guarantees sweep): the test only signs in, submits
over the API, reads pages and the API, and plays the hardware (two GPUs fail, then pass validation) through the
health service, as the health ingest would record them.

Cohort org, policy *in proportion*: vision 10 and nlp 6 guaranteed on 16 H100 GPUs (two nodes of 8). Two GPUs fail:
14 healthy, 2 short, split 10:6 → vision's quota in force is 9, nlp's 5. nlp runs 4 + 1, vision 8; vision asks for
2 more: 1 is left of its 9 and nlp lends nothing, so it waits, and its wait says the quota was reduced by repairs.
The GPUs return: 10 / 6 again, and vision's job is admitted.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
import requests
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.db import connection
from django.utils import timezone

from notify.models import Event
from pools.health.services import Actor, device_health_set
from pools.models import Device, HealthState
from portal.celery import app
from queues.api.tokens import api_token_create
from queues.models import Cohort, Membership, QuotaShortfall
from tests.factories import (
    ClusterFactory,
    DeviceFactory,
    MembershipFactory,
    NodeFactory,
    QuotaLineFactory,
    ResourceClassFactory,
    ResourceFlavorFactory,
    TeamQuotaFactory,
    UserFactory,
)
from tests.redis_check import redis_answers

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("SYSTEM_TEST_REDIS_URL") or os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
PORT = int(os.environ.get("SYSTEM_TEST_PORT", "18801"))
BASE = f"http://127.0.0.1:{PORT}"
PASSWORD = "journey-password-1"
OPS = Actor(label="dcgm")

pytestmark = [
    pytest.mark.system,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not redis_answers(REDIS_URL), reason=f"no Redis at {REDIS_URL}"),
    pytest.mark.xdist_group("redis"),
]


def _database_url() -> str:
    """The test database, for the processes (they must see what the test committed)."""
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


class Processes:
    """gunicorn, a Celery worker and Celery beat, each in its own process group, logging to files under ``logs``."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "DATABASE_URL": _database_url(),
            "CELERY_BROKER_URL": REDIS_URL,
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "SIMULATOR_TICK_SECONDS": "1",
            "GUARANTEES_SWEEP_SECONDS": "1",
            "HEALTH_SWEEP_SECONDS": "5",
            "PYTHONUNBUFFERED": "1",
        }
        self.procs: dict[str, subprocess.Popen] = {}
        self.files: list = []

    def start(self, name: str, *command: str) -> None:
        """Start one process."""
        log = (self.logs / f"{name}.log").open("ab")
        self.files.append(log)
        self.procs[name] = subprocess.Popen(
            list(command), cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def check(self) -> None:
        """Fail with its log when a process has died."""
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited with {proc.returncode}:\n{self.log(name)[-4000:]}")

    def log(self, name: str) -> str:
        """A process's log so far."""
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM each process group, SIGKILL what is left after 20 s."""
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        for f in self.files:
            f.close()


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.fixture
def portal(org, tmp_path) -> Iterator[Processes]:
    """The web server, worker and beat, started after the world is committed, stopped before it is flushed."""
    if not _port_free(PORT):
        pytest.fail(f"port {PORT} is taken (SYSTEM_TEST_PORT picks another)")
    procs = Processes(tmp_path)
    # what an interrupted earlier run left in the task queue (kombu's Redis keys for it), nothing else
    redis.Redis.from_url(REDIS_URL).delete(app.conf.task_default_queue, "unacked", "unacked_index")
    py = sys.executable
    procs.start("web", py, "-m", "gunicorn", "portal.wsgi:application", f"--bind=127.0.0.1:{PORT}", "--workers=2",
                "--timeout=60")  # fmt: skip
    procs.start("worker", py, "-m", "celery", "-A", "portal.celery", "worker", "--pool=solo", "-l", "info",
                "--without-mingle", "--without-gossip")  # fmt: skip
    procs.start("beat", py, "-m", "celery", "-A", "portal.celery", "beat", "-l", "info",
                "-s", str(tmp_path / "beat-schedule"))  # fmt: skip
    try:
        wait_for(lambda: _healthy(procs), 60, "the web server to answer /healthz", procs)
        yield procs
    finally:
        procs.stop()


def _healthy(procs: Processes) -> bool:
    procs.check()
    try:
        return requests.get(f"{BASE}/healthz", timeout=10).status_code == 200
    except (requests.ConnectionError, requests.Timeout):
        return False


def wait_for(predicate: Callable[[], object], seconds: float, what: str, procs: Processes | None = None):
    """Poll ``predicate`` until it returns something true (that is returned); fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if procs is not None:
            procs.check()
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    logs = "" if procs is None else "\n".join(f"--- {n}\n{procs.log(n)[-3000:]}" for n in procs.procs)
    raise AssertionError(f"timed out waiting for {what}\n{logs}")


@pytest.fixture
def org():
    """Cluster sim; H100 on two nodes of 8; cohort org (in proportion) with vision 10 and nlp 6; an admin."""
    password = PBKDF2PasswordHasher().encode(PASSWORD, "journeysalt")  # the deployed hasher (the processes check it)
    cluster = ClusterFactory(name="sim")
    flavor = ResourceFlavorFactory(name="h100", display_name="H100", node_labels={"gpu": "h100"})
    for i in range(2):
        DeviceFactory.create_batch(8, node=NodeFactory(cluster=cluster, flavor=flavor, name=f"n{i}"))
    rc = ResourceClassFactory(slug="h100", flavors=[flavor], allowed_counts=[1, 2, 4, 8])
    cohort = Cohort.objects.create(name="org", shortfall_policy=Cohort.ShortfallPolicy.PROPORTIONAL)
    vision = MembershipFactory(team__slug="vision", team__namespace="vision", role=Membership.Role.LEAD,
                               user__username="vera", user__password=password)  # fmt: skip
    nlp = MembershipFactory(team__slug="nlp", team__namespace="nlp", user__username="nils")
    for member, nominal in ((vision, "10"), (nlp, "6")):
        quota = TeamQuotaFactory(team=member.team, cluster=cluster, cohort=cohort, cluster_queue_name=member.team.slug)
        QuotaLineFactory(team_quota=quota, flavor=flavor, nominal=nominal)
    admin = UserFactory(username="root", is_staff=True, is_superuser=True, password=password)
    tokens = {m.team.slug: api_token_create(user=m.user, team=m.team, name="journey").key for m in (vision, nlp)}
    return type("Org", (), {"cluster": cluster, "rc": rc, "admin": admin, "tokens": tokens, "cohort": cohort})


def signed_in(username: str) -> requests.Session:
    """A browser-like session signed in through the sign-in form."""
    s = requests.Session()
    page = s.get(f"{BASE}/accounts/login/", timeout=10)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    done = s.post(
        f"{BASE}/accounts/login/",
        data={"username": username, "password": PASSWORD, "csrfmiddlewaretoken": token},
        headers={"Referer": f"{BASE}/accounts/login/"},
        timeout=10,
    )
    assert done.status_code == 200, done.text[:500]
    assert "/accounts/login/" not in done.url, done.text[:500]
    return s


def submit(org, team: str, name: str, gpus: int) -> int:
    """Submit a job over the API as the team's member; its id."""
    r = requests.post(
        f"{BASE}/api/jobs/",
        json={
            "name": name,
            "image": "registry.example.org/train:1",
            "resource_class": "h100",
            "devices_per_pod": gpus,
            "sim_runtime_seconds": 7200,
        },
        headers={"Authorization": f"Token {org.tokens[team]}"},
        timeout=20,
    )
    assert r.status_code == 201, r.text
    return r.json()["id"]


def job(org, team: str, pk: int) -> dict:
    """A job as the API shows it to its team."""
    r = requests.get(f"{BASE}/api/jobs/{pk}/", headers={"Authorization": f"Token {org.tokens[team]}"}, timeout=20)
    assert r.status_code == 200, r.text
    return r.json()


def guarantees_page(admin: requests.Session) -> str:
    """The admin's effective-quota page."""
    r = admin.get(f"{BASE}/admin/policy/guarantees/", timeout=20)
    assert r.status_code == 200, r.text[:500]
    return r.text


def test_a_gpu_fails_the_shortfall_is_applied_and_told_and_the_quotas_return_with_it(org, portal):
    admin = signed_in("root")
    vera = signed_in("vera")
    assert "(2 short)" not in guarantees_page(admin)

    # two GPUs of n0 fail and go to repair (what the health ingest records from DCGM)
    failed = list(Device.objects.filter(node__name="n0").order_by("index")[:2])
    now = timezone.now()
    for d in failed:
        device_health_set(d, to=HealthState.UNHEALTHY, reason="XID 79: fallen off the bus", now=now, actor=OPS)
        device_health_set(d, to=HealthState.QUARANTINED, reason="sent to repair", now=now, actor=OPS)

    # the sweep (beat → worker) records the shortfall and tells the admin; the admin's page shows it, applied
    shortfall = wait_for(lambda: QuotaShortfall.objects.filter(ended_at__isnull=True).first(), 30,
                         "the guarantees sweep to record the shortfall", portal)  # fmt: skip
    assert (shortfall.guaranteed, shortfall.backed, shortfall.policy) == (16, 14, Cohort.ShortfallPolicy.PROPORTIONAL)
    page = guarantees_page(admin)
    assert "(2 short)" in page
    assert "vision: 10 → 9" in page
    assert "nlp: 6 → 5" in page
    assert wait_for(lambda: Event.objects.filter(kind="shortfall", recipient=org.admin).exists(), 20,
                    "the admin's shortfall notification", portal)  # fmt: skip
    # vision's lead sees on the class card what backs the guarantee
    card = vera.get(f"{BASE}/classes/", timeout=20).text
    assert "Guaranteed 10, backed now by 9 GPUs" in card, card

    # nlp runs 4 + 1 and vision 8 (the tick on beat admits them); vision asks for 2 more: it waits, and says why
    running = [submit(org, "nlp", "n4", 4), submit(org, "nlp", "n1", 1), submit(org, "vision", "v8", 8)]
    for pk, team in zip(running, ("nlp", "nlp", "vision"), strict=True):
        wait_for(lambda pk=pk, team=team: job(org, team, pk)["state"] in ("admitted", "running"), 40,
                 f"job {pk} to be admitted", portal)  # fmt: skip
    waiting = submit(org, "vision", "w2", 2)
    wait = wait_for(lambda: (job(org, "vision", waiting).get("wait") or {}).get("message", "").find("repair") >= 0
                    and job(org, "vision", waiting)["wait"], 40, "the wait reason to name the repairs", portal)  # fmt: skip
    assert job(org, "vision", waiting)["state"] == "pending"
    assert (
        "guaranteed quota of 10 GPUs of H100 is reduced to 9 while 2 GPUs of H100 are out for repair"
        in (wait["message"])
    )
    assert "reduced by repairs" in vera.get(f"{BASE}/jobs/{waiting}/", timeout=20).text

    # the GPUs pass validation and return: the sweep closes the shortfall, the quotas are 10 / 6 again, and vision's
    # job is admitted on them
    now = timezone.now()
    for d in failed:
        d.refresh_from_db()
        device_health_set(d, to=HealthState.VALIDATING, reason="burn-in", now=now, actor=OPS)
        device_health_set(d, to=HealthState.HEALTHY, reason="validation passed", now=now, actor=OPS)
    wait_for(lambda: not QuotaShortfall.objects.filter(ended_at__isnull=True).exists(), 30,
             "the sweep to close the shortfall", portal)  # fmt: skip
    wait_for(lambda: job(org, "vision", waiting)["state"] in ("admitted", "running"), 40,
             "vision's waiting job to be admitted on the restored quota", portal)  # fmt: skip
    page = guarantees_page(admin)
    assert "(2 short)" not in page
    assert "vision: 10 → 10" in page
    assert "backed now by" not in vera.get(f"{BASE}/classes/", timeout=20).text
    assert Event.objects.filter(kind="shortfall", recipient=org.admin, title__endswith="guarantees backed again")
