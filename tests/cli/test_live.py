"""The ``gpupool`` command against the live test server, with real tokens from the token service.

Each test runs the command in process (click's CliRunner) or as a subprocess (``python -m gpupool``), over HTTP
to ``live_server``: what a researcher's terminal would do. The live server's requests and the test's ORM calls
share one in-memory SQLite connection, so the requests run under ``DB_LOCK`` (the ``serialised`` fixture).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from django.utils import timezone

from gpupool.main import cli
from queues.api.tokens import api_token_create
from queues.models import Job
from tests.browser.scenarios import RACK, occupy, research_pool
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

CLI_SRC = Path(__file__).resolve().parents[2] / "cli" / "src"
JOB_FILE = """\
name: cli-train
image: registry.example.org/vision/train:1.2
class: h100
gpus: 2
command: python train.py --epochs 3
env:
  WANDB_MODE: offline
max_runtime: 2h
sim_runtime: 30s
"""


@pytest.fixture
def pool():
    """One rack with one 4-GPU node, which the other team's job fills: a new H100 job waits."""
    pool = research_pool(racks={"rack-a": [4]})
    occupy(pool, node=pool.nodes[0], count=4, team=pool.other_team, started=timezone.now(), runtime=600)
    return pool


@pytest.fixture
def gpupool(live_server, serialised, pool):
    """Run ``gpupool ARGS…`` against the live server as alice, with a token of team vision.

    ``live_server`` comes before ``pool``: started after the test's first ORM work, following a test that used the
    database without it, the server's request threads find a connection they may not share (a thread warning).
    """
    key = api_token_create(user=pool.user, team=pool.team, name="cli").key

    def run(*args: str, token: str | None = key):
        env = {"GPUPOOL_URL": live_server.url, "GPUPOOL_TOKEN": token}
        return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)

    return run


def submitted_id(output: str) -> int:
    match = re.search(r"^submitted job (\d+) ", output, re.MULTILINE)
    assert match, output
    return int(match.group(1))


def test_submit_list_why_status_logs_cancel(gpupool, pool, live_server, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(JOB_FILE)
    result = gpupool("submit", "-f", str(spec), "--env", "SEED=7")
    assert result.exit_code == 0, result.output
    job_id = submitted_id(result.stdout)
    assert f"submitted job {job_id} cli-train: pending" in result.stdout
    assert f"{live_server.url}/jobs/{job_id}/" in result.stdout
    job = Job.objects.get(pk=job_id)
    assert (job.team, job.owner, job.resource_class) == (pool.team, pool.user, pool.rc)
    assert (job.devices_per_pod, job.pod_count) == (2, 1)
    assert job.command == ["python", "train.py", "--epochs", "3"]
    assert job.env == {"WANDB_MODE": "offline", "SEED": "7"}
    assert (job.max_runtime_seconds, job.sim_runtime_seconds) == (7200, 30)

    listed = gpupool("list")
    assert listed.exit_code == 0, listed.output
    header, *rows = listed.stdout.splitlines()
    assert header.split()[:4] == ["ID", "NAME", "STATE", "CLASS"]
    mine = next(r for r in rows if r.split()[0] == str(job_id))
    assert mine.split()[1:5] == ["cli-train", "pending", "h100", "2"]
    # the reason the tick at submission stored, in words (issue 32: not the code)
    assert mine.endswith("Every device of this class is in use"), mine
    assert "class_exhausted" not in listed.stdout
    assert [r.split()[0] for r in rows] == [str(j.pk) for j in Job.objects.filter(team=pool.team).order_by("-pk")]
    assert gpupool("list", "--state", "running").stdout.strip() == "no jobs"

    api = json.loads(gpupool("why", str(job_id), "--json").stdout)
    assert (api["code"], api["waiting"], api["position"], api["queue_length"]) == ("class_exhausted", True, 1, 1)
    why = gpupool("why", str(job_id))
    assert why.exit_code == 0, why.output
    lines = why.stdout.splitlines()
    assert lines[0] == f"job {job_id} is pending: {api['label']} (class_exhausted)"
    assert lines[1] == f"  {api['message']}"
    assert re.match(r"  since:    \d{4}-\d\d-\d\d \d\d:\d\d UTC \(", lines[2]), lines
    assert "  in queue: 1 of 1 (1 = next)" in lines
    assert api["eta"]["p50"]  # the other team's job ends in 10 minutes
    assert api["eta"]["p90"]
    expected = next(line for line in lines if line.startswith("  expected: "))
    assert re.fullmatch(r"  expected: around .* UTC \(in \d+m\), by .* UTC \(in \d+m\) at the latest \(p90\)", expected)
    assert f"  how:      {api['eta']['method']}" in lines
    for index, suggestion in enumerate(api["suggestions"], 1):
        assert f"  {index}. {suggestion['title']}: {suggestion['message']}" in lines

    status = gpupool("status", str(job_id))
    assert status.exit_code == 0, status.output
    assert status.stdout.startswith(f"job {job_id} cli-train: pending\n")
    assert "  image registry.example.org/vision/train:1.2" in status.stdout
    assert "  command python train.py --epochs 3" in status.stdout
    assert lines[0] in status.stdout  # the wait reason follows

    logs = gpupool("logs", str(job_id))
    assert logs.exit_code == 0, logs.output
    assert logs.stdout.startswith(f"==> {job.k8s_name}-"), logs.stdout  # the log itself, not a link to it
    assert "(No container has started yet.)" in logs.stdout, logs.stdout
    as_json = json.loads(gpupool("logs", str(job_id), "--json", "--tail", "5").stdout)
    assert (as_json["job"], as_json["tail_lines"]) == (job_id, 5)

    timeline = gpupool("timeline", str(job_id))
    assert timeline.exit_code == 0, timeline.output
    assert "Submitted" in timeline.stdout

    cancelled = gpupool("cancel", str(job_id))
    assert cancelled.exit_code == 0, cancelled.output
    assert cancelled.stdout.strip() == f"job {job_id} cli-train: cancelled"
    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED
    assert str(job_id) in gpupool("list", "--state", "cancelled").stdout
    assert "it is not waiting" in gpupool("why", str(job_id)).stdout

    again = gpupool("cancel", str(job_id))
    assert again.exit_code == 1
    assert again.stderr.startswith("gpupool: conflict: ")


def test_submit_from_flags_and_check(gpupool, pool):
    check = gpupool("submit", "--check", "--name", "probe", "--image", "python:3.11", "--class", "h100", "--gpus", "4")
    assert check.exit_code == 0, check.output
    assert check.stdout.startswith("it would wait: ")
    assert "(class_exhausted)" in check.stdout
    assert not Job.objects.filter(name="probe").exists()  # a check records nothing

    result = gpupool(
        "submit",
        "--name",
        "flags",
        "--image",
        "python:3.11",
        "--class",
        "h100",
        "--gpus",
        "1",
        "--pods",
        "2",
        "--max-runtime",
        "90",
        "--priority",
        "normal",
        "--topology",
        "preferred",
        "--topology-level",
        RACK,
        "--checkpoint-path",
        "/ckpt",
        "--checkpoint-signal",
        "SIGUSR1",
        "--checkpoint-interval",
        "30m",
        "--json",
        "--",
        "python",
        "-c",
        "print(1)",
    )
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    job = Job.objects.get(pk=body["id"])
    assert (job.name, job.devices_per_pod, job.pod_count) == ("flags", 1, 2)
    assert job.command == ["python", "-c", "print(1)"]
    assert job.max_runtime_seconds == 90 * 60  # a bare number is minutes, as on the submit form
    assert (job.priority_class, job.topology_mode, job.topology_level) == (pool.normal, "preferred", RACK)
    assert (job.checkpoint_path, job.checkpoint_signal, job.checkpoint_interval_seconds) == ("/ckpt", "SIGUSR1", 1800)


def test_validation_errors_are_printed_by_field(gpupool, pool):
    result = gpupool("submit", "--name", "Bad_Name", "--class", "h100", "--gpus", "3", "--max-runtime", "10s")
    assert result.exit_code == 1
    assert result.stdout == ""
    first, *problems = result.stderr.splitlines()
    assert first == "gpupool: the portal refused the request:"
    fields = {line.split(":", 1)[0].strip() for line in problems}
    assert {"image"} <= fields  # a missing field (the serializer) …
    assert not Job.objects.filter(team=pool.team).exclude(name="blocker").exists()

    result = gpupool("submit", "--name", "bad-count", "--image", "python:3.11", "--class", "h100", "--gpus", "3")
    assert result.exit_code == 1
    problems = result.stderr.splitlines()[1:]
    assert (
        "  devices_per_pod (--gpus): H100 80GB allows 1, 2, 4, 8 devices per pod, not 3" in problems
    )  # … the services'
    result = gpupool("submit", "--name", "x", "--image", "python:3.11", "--class", "nope")
    assert result.exit_code == 1
    assert any(line.startswith("  resource_class (--class): ") for line in result.stderr.splitlines()), result.stderr
    result = gpupool("submit", "--name", "short", "--image", "python:3.11", "--class", "h100", "--max-runtime", "10s")
    assert result.exit_code == 1
    assert any(line.startswith("  max_runtime_seconds (--max-runtime): ") for line in result.stderr.splitlines())
    assert not Job.objects.filter(team=pool.team).exclude(name="blocker").exists()


def test_a_bad_file_is_refused_before_any_request(gpupool, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text("name: x\nimage: python:3.11\ngpu: 2\n")
    result = gpupool("submit", "-f", str(spec))
    assert result.exit_code == 2  # the file is wrong, not the portal's answer (issue 33)
    assert "unknown key 'gpu'" in result.stderr
    spec.write_text("name: x\nmax_runtime: soon\n")
    result = gpupool("submit", "-f", str(spec))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"gpupool: {spec}: max_runtime: 'soon' is not a duration")


def test_bad_or_dead_token_is_explained(gpupool, pool, live_server):
    result = gpupool("list", token="gpp_not-a-token")
    assert result.exit_code == 1
    assert result.stderr.startswith("gpupool: the token was refused (Invalid, expired or revoked token). ")
    assert f"{live_server.url}/tokens/" in result.stderr

    issued = api_token_create(user=pool.user, team=pool.team, name="old")
    issued.token.revoked = True
    issued.token.save()
    assert gpupool("why", "1", token=issued.key).exit_code == 1

    missing = gpupool("list", token=None)
    assert missing.exit_code == 2
    assert "GPUPOOL_TOKEN" in missing.stderr


def test_another_team_is_forbidden_and_its_jobs_not_found(gpupool, pool):
    result = gpupool("list", "--json")
    assert result.exit_code == 0
    theirs = JobFactory(team=pool.other_team, owner=pool.other_user, cluster=pool.cluster, resource_class=pool.rc)
    for command in ("why", "status", "cancel", "logs"):
        result = gpupool(command, str(theirs.pk))
        assert result.exit_code == 1, command
        assert result.stderr.startswith("gpupool: not found: "), result.stderr
    result = gpupool("submit", "--team", "speech", "--name", "x", "--image", "python:3.11", "--class", "h100")
    assert result.exit_code == 1
    assert result.stderr.startswith("gpupool: not allowed: this token is scoped to team vision.")
    theirs.refresh_from_db()
    assert theirs.state != Job.State.CANCELLED


def test_classes(gpupool):
    result = gpupool("classes")
    assert result.exit_code == 0, result.output
    header, row = result.stdout.splitlines()
    assert header.split()[:3] == ["CLASS", "NAME", "COUNTS"]
    assert row.startswith("h100 ")
    assert " 1/2/4/8 " in row
    assert " 0/4 " in row  # every H100 is held by the other team's job


def test_the_installed_entry_point_runs_without_django(live_server, serialised, pool):
    """``python -m gpupool`` in a fresh interpreter: the command works over HTTP and never imports Django."""
    key = api_token_create(user=pool.user, team=pool.team, name="cli").key
    mine = JobFactory(team=pool.team, owner=pool.user, cluster=pool.cluster, resource_class=pool.rc, name="mine")
    env = {**os.environ, "PYTHONPATH": str(CLI_SRC), "GPUPOOL_URL": live_server.url, "GPUPOOL_TOKEN": key}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    probe = (
        "import runpy, sys\n"
        "sys.argv = ['gpupool', 'list', '--json']\n"
        "try:\n"
        "    runpy.run_module('gpupool', run_name='__main__')\n"
        "finally:\n"
        "    banned = ('django', 'rest_framework', 'kernel', 'portal', 'pools', 'queues', 'clusters', 'billing')\n"
        "    print('IMPORTED', sorted(m for m in sys.modules if m.split('.')[0] in banned), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60, cwd="/", check=False
    )
    assert done.returncode == 0, done.stderr
    assert [(j["id"], j["name"]) for j in json.loads(done.stdout)] == [(mine.pk, "mine")]
    assert done.stderr.strip().endswith("IMPORTED []"), done.stderr


def test_an_address_that_is_not_the_portal_is_said_so(live_server, serialised, pool):
    key = api_token_create(user=pool.user, team=pool.team, name="cli").key
    url = f"{live_server.url}/accounts"  # a page of the site, not its root: /accounts/api/jobs/ is an HTML 404
    result = CliRunner().invoke(cli, ["list"], env={"GPUPOOL_URL": url, "GPUPOOL_TOKEN": key})
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        f"gpupool: {url}/api/jobs/ answered HTTP 404 without JSON: is GPUPOOL_URL the portal's address ({url}/)?"
    )


def test_list_pages_and_filters(gpupool, pool):
    jobs = [
        JobFactory(team=pool.team, owner=pool.user, cluster=pool.cluster, resource_class=pool.rc, name=f"j{i}")
        for i in range(3)
    ]
    theirs = JobFactory(team=pool.team, owner=pool.other_user, cluster=pool.cluster, resource_class=pool.rc)
    newest_first = [str(j.pk) for j in [theirs, *reversed(jobs)]]

    def ids(*args: str) -> list[str]:
        result = gpupool("list", *args)
        assert result.exit_code == 0, result.output
        return [line.split()[0] for line in result.stdout.splitlines()[1:]]

    assert ids("--limit", "2") == newest_first[:2]
    assert ids("--limit", "2", "--all") == newest_first
    assert ids("--mine", "--all", "--limit", "1") == newest_first[1:]
    assert ids("--owner", "bob") == [str(theirs.pk)]
