"""The seeded demo database for the system tests: seeded once, copied for each portal."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.system.processes import PYTHON, ROOT, HarnessError, base_env
from tests.system.services import PostgresServer

#: What the seeded database depends on besides the migrations: the demo's own code.
SEED_SOURCES = ("portal/demo.py", "pools/demo.py", "billing/demo.py", "portal/management/commands/seed_demo.py")


class SeedCache:
    """The seeded demo database, made once and copied for each portal (``seed_demo`` takes minutes).

    Kept under ``SYSTEM_TEST_CACHE`` (default: ``<tmp>/portal-system-cache``), keyed by the demo's code and the
    migrations (a change of either seeds again), and seeded again once older than ``SYSTEM_TEST_SEED_MAX_HOURS``
    (default 12: the demo's history ends when it was seeded). A lock file lets parallel sessions share it.
    """

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or Path(
            os.environ.get("SYSTEM_TEST_CACHE") or Path(tempfile.gettempdir()) / "portal-system-cache"
        )
        self.max_age = float(os.environ.get("SYSTEM_TEST_SEED_MAX_HOURS", "12")) * 3600
        self.root.mkdir(parents=True, exist_ok=True)

    def key(self) -> str:
        """A digest of the demo's code and every migration (name and content)."""
        digest = hashlib.sha256()
        files = [ROOT / p for p in SEED_SOURCES] + sorted(ROOT.glob("*/migrations/0*.py"))
        for path in files:
            digest.update(str(path.relative_to(ROOT)).encode())
            digest.update(path.read_bytes())
        return digest.hexdigest()[:16]

    @contextlib.contextmanager
    def _locked(self, name: str) -> Iterator[None]:
        with open(self.root / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _fresh(self, path: Path) -> bool:
        return path.exists() and time.time() - path.stat().st_mtime < self.max_age

    def sqlite(self) -> Path:
        """The seeded SQLite file (seeding it now when missing or old)."""
        target = self.root / f"demo-{self.key()}.sqlite3"
        with self._locked(target.name):
            if not self._fresh(target):
                work = target.with_suffix(".seeding")
                for leftover in work.parent.glob(work.name + "*"):
                    leftover.unlink()
                env = base_env() | {"DATABASE_URL": f"sqlite:///{work}", "PORTAL_VAR_DIR": str(self.root / "var")}
                _manage(env, "migrate", "--noinput")
                _manage(env, "seed_demo")
                with sqlite3.connect(work) as conn:  # one self-contained file: the WAL folded in
                    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                    conn.execute("PRAGMA journal_mode=DELETE")
                os.replace(work, target)
        return target

    def postgres_dump(self, server: PostgresServer) -> Path:
        """The seeded PostgreSQL dump (seeding a database on ``server`` now when missing or old)."""
        target = self.root / f"demo-{self.key()}.pgdump"
        with self._locked(target.name):
            if not self._fresh(target):
                name = f"seed_{secrets.token_hex(4)}"
                env = base_env() | {
                    "DATABASE_URL": server.create_database(name),
                    "PORTAL_VAR_DIR": str(self.root / "var"),
                }
                _manage(env, "migrate", "--noinput")
                _manage(env, "seed_demo")
                work = target.with_suffix(".dumping")
                server.dump(name, work)
                os.replace(work, target)
                server.psql(f'DROP DATABASE "{name}" WITH (FORCE)')
        return target


def _manage(env: dict[str, str], *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [PYTHON, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    if result.returncode != 0:
        raise HarnessError(
            f"manage.py {' '.join(args)} exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result
