"""Every task is registered in every process that may send it by name, not only in the worker: a fresh web-like
process (Django set up, nothing else imported) knows them all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
