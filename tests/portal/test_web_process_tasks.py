"""Tasks in a process that imported only what a web process imports (``portal.wsgi``, as gunicorn does).

The test suite imports every module, so a task the web process sends but never imported is registered here and
nowhere in production (issue 32: saving a quota answered 500, ``NotRegistered: 'queues.policy_preview'``). These
tests run fresh interpreters instead: one set up as a web process, one as a worker, and compare what they hold;
then a web process saves a quota in the admin with a real (in-memory) broker and the replay's message is queued.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Prints the names of the tasks a process holds, after importing what the named kind of process imports.
REGISTRY = """
import json, sys
from portal.wsgi import application  # all a gunicorn worker imports of the project
from portal.celery import app
if sys.argv[1] == "worker":
    app.loader.import_default_modules()  # what `celery worker` does before it takes a message
from django.conf import settings
print(json.dumps({
    "tasks": sorted(n for n in app.tasks if not n.startswith("celery.")),
    "beat": sorted(entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()),
}))
"""

#: A web process saves a team quota in the admin: the what-if preview must be recorded and its replay sent.
ADMIN_SAVE = """
import json
from portal.wsgi import application
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.contrib.auth import get_user_model
from django.test import Client
from portal.celery import app
from pools.models import Cluster, ResourceFlavor
from queues.models import PolicyPreview, QuotaLine, Team, TeamQuota

cluster = Cluster.objects.create(name="sim-east")
flavor = ResourceFlavor.objects.create(name="h100")
team = Team.objects.create(slug="vision", name="Vision", namespace="team-vision")
quota = TeamQuota.objects.create(team=team, cluster=cluster, cluster_queue_name="vision")
line = QuotaLine.objects.create(team_quota=quota, flavor=flavor, resource_name="nvidia.com/gpu", nominal="2")
admin = get_user_model().objects.create_superuser("root", "root@example.org", "x")
client = Client()
client.force_login(admin)
response = client.post(f"/admin/queues/teamquota/{quota.pk}/change/", {
    "team": team.pk, "cluster": cluster.pk, "cluster_queue_name": "vision", "cohort": "",
    "queueing_strategy": quota.queueing_strategy, "within_cluster_queue": quota.within_cluster_queue,
    "reclaim_within_cohort": quota.reclaim_within_cohort, "borrow_within_cohort": quota.borrow_within_cohort,
    "borrow_within_cohort_max_priority": "", "when_can_borrow": quota.when_can_borrow,
    "when_can_preempt": quota.when_can_preempt, "fair_weight": str(quota.fair_weight),
    "stop_policy": quota.stop_policy,
    "lines-TOTAL_FORMS": "1", "lines-INITIAL_FORMS": "1", "lines-MIN_NUM_FORMS": "0", "lines-MAX_NUM_FORMS": "1000",
    "lines-0-id": line.pk, "lines-0-team_quota": quota.pk, "lines-0-flavor": flavor.pk, "lines-0-flavor_order": "0",
    "lines-0-resource_name": "nvidia.com/gpu", "lines-0-nominal": "4", "lines-0-borrowing_limit": "",
    "lines-0-lending_limit": "", "_save": "Save",
})
sent = []
with app.connection_for_read() as connection:
    queue = connection.SimpleQueue("celery")
    while True:
        try:
            message = queue.get(block=False)
        except queue.Empty:
            break
        sent.append([message.headers["task"], message.headers["argsrepr"]])
        message.ack()
preview = PolicyPreview.objects.order_by("-pk").first()
print(json.dumps({
    "status": response.status_code,
    "location": response.get("Location", ""),
    "preview": preview and [preview.pk, preview.status],
    "sent": sent,
    "nominal": QuotaLine.objects.get(pk=line.pk).nominal,
}))
"""


def _run(script: str, *args: str, tmp_path: Path, broker: str = "") -> dict:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "DATABASE_", "CELERY_", "PORTAL_", "REDIS_"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="portal.settings",
        DATABASE_URL=f"sqlite:///{tmp_path / 'web.sqlite3'}",
        CELERY_BROKER_URL=broker,
        PYTHONPATH=str(ROOT),
        PORTAL_ENGINE_PURE="1",
    )
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_web_process_holds_every_task_the_worker_runs(tmp_path):
    web = _run(REGISTRY, "web", tmp_path=tmp_path)
    worker = _run(REGISTRY, "worker", tmp_path=tmp_path)
    assert "queues.policy_preview" in web["tasks"]
    assert set(worker["tasks"]) <= set(web["tasks"]), sorted(set(worker["tasks"]) - set(web["tasks"]))
    assert set(web["beat"]) <= set(worker["tasks"]), sorted(set(web["beat"]) - set(worker["tasks"]))


def test_web_process_saving_a_quota_queues_the_preview_replay(tmp_path):
    # memory:// is a real broker (not eager): the request only sends the message, as it does with Redis.
    out = _run(ADMIN_SAVE, tmp_path=tmp_path, broker="memory://")
    assert out["status"] == 302, out
    preview_id, status = out["preview"]
    assert out["location"] == f"/admin/policy/previews/{preview_id}/"
    assert status == "queued"
    assert out["sent"] == [["queues.policy_preview", f"({preview_id},)"]]
    assert out["nominal"] == "2"  # nothing saved before Apply
