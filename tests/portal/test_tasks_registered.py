"""Every task is registered in every process that may send it by name, not only in the worker: a fresh web-like
process (Django set up, nothing else imported) knows them all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from celery import current_app

from kernel.tasks import TRANSIENT_DB_ERRORS

ROOT = Path(__file__).resolve().parents[2]

CODE = """
import django, os
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django.setup()
from celery import current_app
import json
print(json.dumps(sorted(name for name in current_app.tasks if not name.startswith("celery."))))
"""


def test_a_fresh_process_has_every_task_sent_by_name_registered():
    env = {"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "portal.settings", "PORTAL_VAR_DIR": str(ROOT / "var")}
    out = subprocess.run([sys.executable, "-c", CODE], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    names = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert {"queues.policy_preview", "clusters.job_create", "clusters.policy_push", "liveness.prune"} <= names


def test_every_task_of_the_project_retries_a_database_that_is_down():
    """kernel.tasks: every task changes state idempotently, so every one retries transient database errors (a task
    added without ``**DB_RETRY`` fails here by name)."""
    ours = {n: t for n, t in current_app.tasks.items() if not n.startswith("celery.") and not n.startswith("tests.")}
    assert len(ours) > 20
    missing = sorted(
        name for name, task in ours.items() if not set(TRANSIENT_DB_ERRORS) <= set(getattr(task, "autoretry_for", ()))
    )
    assert missing == []
    assert all(task.retry_backoff and task.max_retries >= 3 for task in ours.values())
