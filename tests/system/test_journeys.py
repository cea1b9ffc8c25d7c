"""Every person's journey through the portal as deployed (issue 32), in Chromium, on both shapes.

Each test starts a portal (``embedded_portal`` or ``production_portal``, tests/system/README.md) on the seeded demo
and walks one role's journeys end to end as that person would, through pages and links; the worker, beat and
simulated cluster do their part in their own processes. Console errors, script errors and 5xx answers fail a test
(``people.Person``), as does a problem in a process's log (the harness). Each journey's last page is screenshotted
at 1366 px and 390 px (``SYSTEM_TEST_SHOTS``).

* admin: a team quota changed through a what-if preview that the worker computes, applied, in the audit trail,
  and followed by the cluster's queue configuration; a cohort's borrowing limit the same way; every team's jobs;
  a GPU from a repair ticket through the drain, the repair and the validation job back to the pool.
* researcher: each workload kind, from the class through the check, the submission, watching it, its log, to
  cancelling it; then the CLI against the same server (logs included).
* team lead: last month's cost, its budget beside the month before, and the CSV.
* operator: the jobs that wait across teams and why; the pool's utilisation explained.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from tests.system.people import Ingress, Person, shots_dir
from tests.system.processes import ROOT, HarnessError, wait_until

CHROMIUM = Path("/usr/bin/chromium")
SHAPES = ["embedded", "production"]
#: What the worker and the simulated cluster get to do a step (a replay, a push, a tick or two): generous, as the
#: machine running the tests may be busy.
WORKER = 180_000


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for the module."""
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium")
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def shots(system_root) -> Path:
    """Where the journeys' screenshots go."""
    return shots_dir(system_root)


def _portal(request, shape: str):
    return request.getfixturevalue(f"{shape}_portal")


def _json(portal, code: str) -> dict:
    """Run ``code`` (which prints one JSON line last) in the portal's ``manage.py shell``; the decoded line."""
    return json.loads(portal.shell(code).strip().splitlines()[-1])


# --------------------------------------------------------------------------------------------------- admin


@pytest.mark.parametrize("shape", SHAPES)
def test_admin_changes_policy_through_previews_the_worker_computes(shape, request, browser, shots):
    portal = _portal(request, shape)
    admin = Person(browser, portal, "admin", shots=shots)
    page = admin.goto("/jobs/?team=")  # every team's jobs first: what the change will act on
    teams = set(page.locator(".jobs-table tbody tr td:nth-child(3)").all_inner_texts())
    assert len(teams) >= 2, teams

    # A team quota: Save opens a preview, replayed by the worker (the web process only sends the task).
    page = admin.goto("/admin/policy/dashboard/")
    page.get_by_role("link", name="Team quotas").first.click()
    page.get_by_role("link", name="vision", exact=True).click()
    expect(page.locator("#whatif-save-note")).to_contain_text("Save opens a what-if preview first")
    nominal = page.locator("input[name='lines-0-nominal']")
    before = nominal.input_value()
    after = str(int(before) - 4)
    nominal.fill(after)
    page.click("input[name=_save]")
    page.wait_for_url(re.compile(r"/admin/policy/previews/\d+/$"))
    expect(page.locator("#whatif-preview")).to_contain_text("Nothing is saved yet")
    expect(page.locator("[data-status=done]")).to_be_visible(timeout=WORKER)  # the worker's replay
    expect(page.locator("#whatif-table-1")).to_contain_text("(vision)")
    page.click("input[name=_whatif_apply]")
    page.wait_for_url(re.compile(r"/admin/queues/teamquota/$"))
    expect(page.locator(".messagelist")).to_contain_text("Pushing the change to 1 cluster(s)")

    # The audit trail has it, who and what.
    page = admin.goto("/admin/policy/audit/")
    expect(page.locator("#policy-audit-table")).to_contain_text(f"{before} → {after}")

    # The cluster followed: the worker ran the push, and the queue configuration has the new nominal quota.
    page = admin.goto("/admin/queues/teamquota/")
    page.get_by_role("link", name="vision", exact=True).click()

    def followed() -> bool:
        page.reload()
        return "yes: last change" in page.locator(".field-cluster_follows").inner_text()

    wait_until(followed, timeout=WORKER / 1000, what="the policy push of the quota change")
    config = _json(
        portal,
        "import json\n"
        "from pools.models import Cluster\n"
        "from queues.policy.whatif import policy_configuration\n"
        "config = policy_configuration(cluster=Cluster.objects.get(), nodes=False)\n"
        "cq = next(q for q in config.cluster_queues if q.name == 'vision')\n"
        "print(json.dumps({f.name + '/' + r.name: r.nominal for g in cq.resource_groups for f in g.flavors"
        " for r in f.resources}))\n",
    )
    assert config["h100/nvidia.com/gpu"] == int(after), config

    # A cohort's borrowing limit, the same way: a line added on the cohort, previewed, applied, pushed.
    page = admin.goto("/admin/queues/cohort/")
    page.get_by_role("link", name="research", exact=True).first.click()
    expect(page.locator("#whatif-save-note")).to_be_visible()
    page.get_by_text("Add another Quota line").click()
    page.select_option("select[name='lines-0-flavor']", label="H100 80GB")
    page.fill("input[name='lines-0-resource_name']", "nvidia.com/gpu")
    page.fill("input[name='lines-0-nominal']", "0")
    page.fill("input[name='lines-0-borrowing_limit']", "8")
    page.click("input[name=_save]")
    page.wait_for_url(re.compile(r"/admin/policy/previews/\d+/$"))
    expect(page.locator(".whatif-changes")).to_contain_text("research")
    expect(page.locator("[data-status=done]")).to_be_visible(timeout=WORKER)
    page.click("input[name=_whatif_apply]")
    page.wait_for_url(re.compile(r"/admin/queues/cohort/$"))
    cohort = _json(
        portal,
        "import json\n"
        "from pools.models import Cluster\n"
        "from queues.models import PolicyPush\n"
        "from queues.policy.whatif import policy_configuration\n"
        "config = policy_configuration(cluster=Cluster.objects.get(), nodes=False)\n"
        "c = next(c for c in config.cohorts if c.name == 'research')\n"
        "print(json.dumps({'limits': [r.borrowing_limit for g in c.resource_groups for f in g.flavors"
        " for r in f.resources], 'pushes': list(PolicyPush.objects.values_list('state', flat=True)[:2])}))\n",
    )
    assert cohort["limits"] == [8], cohort
    page = admin.goto("/admin/policy/previews/")
    expect(page.locator("#policy-preview-rows tbody tr")).to_have_count(2)
    wait_until(
        lambda: (
            _json(
                portal,
                "import json\nfrom queues.models import PolicyPush\n"
                "print(json.dumps(list(PolicyPush.objects.values_list('state', flat=True)[:1])))\n",
            )
            == ["succeeded"]
        ),
        timeout=WORKER / 1000,
        what="the cohort's policy push",
    )
    admin.finish("admin-policy")


@pytest.mark.parametrize("shape", SHAPES)
def test_admin_takes_a_gpu_through_repair_back_to_the_pool(shape, request, browser, shots):
    portal = _portal(request, shape)
    # The burn-in of the demo's policy takes minutes; a short one keeps the test short (the same path).
    busy = _json(
        portal,
        "import json\n"
        "from pools.models import Allocation, HealthPolicy\n"
        "HealthPolicy.objects.update(validation_sim_runtime_seconds=20)\n"
        "a = (Allocation.objects.filter(ended_at__isnull=True, device__node__flavor__name='h100',"
        " job__validation_run__isnull=True).select_related('device__node').order_by('device__node__name',"
        " 'device__index').first())\n"
        "print(json.dumps({'device': a.device.pk, 'key': a.device.key, 'node': a.device.node.name,"
        " 'job': a.job_id}))\n",
    )
    admin = Person(browser, portal, "admin", shots=shots)

    # Open a ticket on a card that holds a job, from the devices' list (its node's cards, that card ticked).
    page = admin.goto(f"/admin/pools/device/?q={busy['node']}")
    page.check(f"input[name=_selected_action][value='{busy['device']}']")
    page.select_option("select[name=action]", label="Open a repair ticket…")
    page.click("button[name=index]")
    page.wait_for_url(re.compile(r"/admin/pools/repairticket/add/"))
    page.fill("[name=reason]", "fan noise; XID 79 in the kernel log (system test)")
    page.click("input[name=_save]")
    expect(page.locator(".messagelist")).to_be_visible()
    ticket = _json(
        portal,
        "import json\nfrom pools.models import RepairTicket\n"
        f"t = RepairTicket.objects.filter(device_id={busy['device']}).latest('pk')\n"
        "print(json.dumps({'id': t.pk, 'state': t.state}))\n",
    )

    # The repair queue lists it; its page leads to the admin's steps.
    page = admin.goto("/health/tickets/")
    expect(page.locator("body")).to_contain_text(busy["node"])
    page = admin.goto(f"/health/tickets/{ticket['id']}/")
    page.get_by_role("link", name="Act on this ticket in the admin").click()
    state = page.locator(".field-state .readonly")
    if "Draining" in state.inner_text():
        page.get_by_role("button", name="Drain now (evict remaining jobs)").click()
        # the card's job is evicted, or it has already left (it ended, or the drain evicted it meanwhile)
        expect(page.locator(".messagelist")).to_contain_text(re.compile(r"evicted to drain it|no job left to evict"))

    def reaches(words: str):
        def check() -> bool:
            page.reload()
            return words in state.inner_text()

        return check

    wait_until(reaches("In repair"), timeout=WORKER / 1000, what="the drain to finish")
    page.get_by_role("button", name="Repair done: start validation").click()
    expect(page.locator(".messagelist")).to_contain_text("validation started: burn-in job #")
    expect(state).to_contain_text("Validating")
    wait_until(reaches("Returned to the pool"), timeout=WORKER / 1000, what="the burn-in job to pass")
    health = _json(
        portal,
        f"import json\nfrom pools.models import Device, ValidationRun\nd = Device.objects.get(pk={busy['device']})\n"
        "run = ValidationRun.objects.filter(devices=d).order_by('-pk').first()\n"
        "print(json.dumps({'health': d.health, 'run': run.result, 'job_state': run.job.state}))\n",
    )
    assert health == {"health": "healthy", "run": "passed", "job_state": "succeeded"}, health
    page = admin.goto(f"/health/tickets/{ticket['id']}/")
    expect(page.locator("body")).to_contain_text("Returned to the pool")
    admin.finish("admin-repair")


# ---------------------------------------------------------------------------------------------- researcher

#: Each workload kind and a class of the demo that offers it to team Computer Vision.
KINDS = {
    "batch": "l4-shared",
    "session": "a100-1g-10gb",
    "inference": "l4-shared",
    "jobset": "h100",
    "pytorchjob": "h100",
    "rayjob": "h100",
    "inference-lws": "h100-nvlink-8x",
}


@pytest.mark.parametrize("shape", SHAPES)
def test_researcher_runs_each_workload_kind_and_uses_the_cli(shape, request, browser, shots):
    portal = _portal(request, shape)
    alice = Person(browser, portal, "alice", shots=shots)
    started = 0
    for kind, rc in KINDS.items():
        page = alice.goto("/classes/")
        page.locator(f"#class-{rc} a", has_text="Submit with this class").click()
        page.wait_for_url(re.compile(r"/submit/"))
        page.select_option("#id_kind", kind)
        alice.settle()  # the kind's own fields come in
        expect(page.locator("#id_kind")).to_have_value(kind)
        page.fill("#id_name", f"sys-{kind}")
        if page.locator("#id_image").input_value() == "":
            page.fill("#id_image", "registry.example.org/vision/train:1.2")
        page.fill("#id_command", "python run.py")
        if page.locator("#id_sim_runtime").count():
            page.fill("#id_sim_runtime", "10m")
        expect(page.locator("#queues-job-total [data-total]")).to_contain_text("in all")
        page.click("button[value=check]")
        expect(page.locator("#queues-job-feasibility .verdict")).to_be_visible()
        page.click("button[value=submit]")
        try:
            page.wait_for_url(re.compile(r"/jobs/\d+/$"))
        except Exception as exc:  # refused: say what the form said
            said = page.locator("[role=alert], .verdict").all_inner_texts()
            raise AssertionError(f"the {kind} job was not submitted: {said}") from exc
        job_id = int(re.search(r"/jobs/(\d+)/$", page.url).group(1))
        badge = page.locator("h1 .badge")
        # Watch it: the page follows the simulated cluster's ticks; it runs, or says why it waits.
        why = page.locator(f"#queues-job-wait-{job_id} .verdict")
        try:
            wait_until(lambda b=badge: b.inner_text() == "Running", timeout=60, what=f"the {kind} job to run")
        except HarnessError:
            expect(why).to_be_visible()  # a kind that cannot start now says why, in words
        else:
            page.reload()  # its run, asked of the cluster when the page opens: the log's last lines
            expect(page.locator(f"#queues-job-run-{job_id} pre.log").first).to_be_visible()
            started += 1
        page.locator(".q-head-actions a.danger").click()
        page.wait_for_url(re.compile(rf"/jobs/{job_id}/cancel/$"))
        page.locator("form button[type=submit], form input[type=submit]").last.click()
        page.wait_for_url(re.compile(rf"/jobs/{job_id}/$"))
        expect(badge).to_have_text("Stopped" if kind in ("session", "inference", "inference-lws") else "Cancelled")
    assert started >= 4, f"only {started} of the {len(KINDS)} kinds started on free hardware"
    alice.finish("researcher-kinds")

    # The CLI against the same server, with a token of the team (the ingress adds what the proxy would).
    token = portal.api_token("alice", "vision")
    ingress = Ingress(portal) if portal.headers else None
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_", "CELERY_"))},
        "GPUPOOL_URL": ingress.url if ingress else portal.base_url,
        "GPUPOOL_TOKEN": token,
        "PYTHONPATH": str(ROOT / "cli" / "src"),  # the client as `pip install ./cli` puts it on the path
    }

    def gpupool(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "gpupool", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, f"gpupool {' '.join(args)}: {done.stdout}\n{done.stderr}"
        return done.stdout

    try:
        submitted = gpupool(
            "submit", "--name", "cli-job", "--image", "registry.example.org/t:1", "--class", "l4-shared",
            "--gpus", "1", "--max-runtime", "1h", "--", "python", "train.py",
        )  # fmt: skip
        job_id = int(re.search(r"submitted job (\d+)", submitted).group(1))
        assert "cli-job" in gpupool("list", "--mine")
        assert f"job {job_id} is" in gpupool("why", str(job_id))
        wait_until(
            lambda: "running" in gpupool("status", str(job_id)).splitlines()[0],
            timeout=WORKER / 1000,
            what="the CLI's job to run",
        )
        logs = gpupool("logs", str(job_id))
        assert logs.startswith("==> "), logs
        assert len(logs.splitlines()) > 1, logs  # the log's lines themselves, not a link
        assert "Submitted" in gpupool("timeline", str(job_id))
        assert gpupool("cancel", str(job_id)).strip() == f"job {job_id} cli-job: cancelled"
    finally:
        if ingress:
            ingress.close()


# ------------------------------------------------------------------------------------------------ team lead


@pytest.mark.parametrize("shape", SHAPES)
def test_team_lead_reads_last_months_cost_budget_and_csv(shape, request, browser, shots):
    portal = _portal(request, shape)
    start = _json(
        portal,
        "import json\nfrom django.db.models import Min\nfrom billing.pricing import local_day\n"
        "from billing.services.common import billing_tz\nfrom pools.models import Allocation\n"
        "first = Allocation.objects.aggregate(m=Min('started_at'))['m']\n"
        "print(json.dumps({'history': local_day(first, billing_tz()).isoformat()}))\n",
    )
    history = date.fromisoformat(start["history"])
    carol = Person(browser, portal, "carol", shots=shots)
    page = carol.goto("/cost/")
    page.get_by_role("link", name="Last month").click()
    carol.settle()
    month = page.locator("input[name=start]").input_value()[:7]
    label = date.fromisoformat(month + "-01").strftime("%B %Y")
    budgets = page.locator("#billing-budgets")
    expect(budgets).to_contain_text(label)  # last month's budget, not this month's
    expect(budgets.locator("th", has_text="Vs the period before")).to_be_visible()
    link = page.get_by_role("link", name="Export CSV")
    if portal.headers:
        # Behind the production shape's ingress (played by headers here), which Chromium's download manager does
        # not send: the same request from the signed-in context, with its cookies and the ingress's headers.
        answer = page.request.get(link.get_attribute("href"))
        assert answer.ok, (answer.status, answer.headers)
        assert "text/csv" in answer.headers["content-type"], answer.headers
        text = answer.text()
    else:
        with page.expect_download() as download:
            link.click()
        text = Path(download.value.path()).read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    days = [r for r in rows if r["section"] == "day"]
    assert days, [r["section"] for r in rows]
    for row in days:
        idle_hours = float(row["idle_reserved_hours"] or 0)
        idle_cost = sum(float(v or 0) for k, v in row.items() if k.startswith("idle_cost_"))
        if date.fromisoformat(row["key"]) < history:
            assert (idle_hours, idle_cost) == (0, 0), row  # no idle reservation before any job ran
        assert (idle_hours > 0) == (idle_cost > 0), row  # idle hours priced, never hours without a cost
    carol.finish("lead-cost")


# ------------------------------------------------------------------------------------------------- operator


@pytest.mark.parametrize("shape", SHAPES)
def test_operator_finds_stuck_jobs_across_teams_and_reads_the_pool(shape, request, browser, shots):
    portal = _portal(request, shape)
    oscar = Person(browser, portal, "oscar", shots=shots)
    page = oscar.goto("/jobs/?team=&state=pending")
    rows = page.locator(".jobs-table tbody tr")
    expect(rows.first).to_be_visible()
    teams = set(page.locator(".jobs-table tbody tr td:nth-child(3)").all_inner_texts())
    reasons = page.locator(".jobs-table tbody td.reason").all_inner_texts()
    assert len(teams) >= 2, teams
    assert all(r.strip() for r in reasons), reasons  # every waiting job says why
    # The column of reasons is whole at 1366 px.
    header = page.locator(".jobs-table thead th").last.bounding_box()
    table = page.locator("#queues-job-list-table").bounding_box()
    assert header["x"] + header["width"] <= table["x"] + table["width"] + 1
    rows.first.locator("th a").click()
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    wait_box = page.locator("[id^=queues-job-wait-]")
    expect(wait_box).to_be_visible()
    assert "Your team" not in wait_box.inner_text()  # the reason names the team to an operator
    expect(page.locator(".q-head-actions")).to_contain_text("Read-only")
    page = oscar.goto("/health/capacity/")
    expect(page.locator("h1")).to_be_visible()
    page = oscar.goto("/pool/")
    account = page.locator("#pools-util-account")
    expect(account).to_contain_text("physical cards have at least one unit in use")
    expect(account.locator("#pools-util-table")).to_contain_text("MIG slices")
    oscar.finish("operator-pool")
