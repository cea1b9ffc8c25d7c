"""``manage.py check --deploy`` on a rendered configuration: what the kustomize base and the Helm chart must pass."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def deploy_check(
    config: dict[str, str], secret_env: dict[str, str], *, static_root: Path
) -> subprocess.CompletedProcess:
    """Run the deploy check in a subprocess with ``config`` (a ConfigMap's data) and ``secret_env`` as its environment
    (the test's own values of those secrets removed), failing on warnings too."""
    env = {k: v for k, v in os.environ.items() if k not in secret_env}
    env.update(config)
    env.update(secret_env)
    env["STATIC_ROOT"] = str(static_root)
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
