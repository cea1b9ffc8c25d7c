"""Private Redis and PostgreSQL servers for the system tests (the outage tests stop and restart them)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.system.processes import HarnessError, Proc, base_env, free_port, spawn, wait_until


class RedisServer:
    """A private redis-server on a free port (no persistence: a stop loses what it held, the worst case)."""

    def __init__(self, workdir: Path, *, port: int | None = None) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self.proc: Proc | None = None
        workdir.mkdir(parents=True, exist_ok=True)

    def url(self, db: int = 0) -> str:
        """redis://127.0.0.1:PORT/DB."""
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> RedisServer:
        """Start it (again, after :meth:`stop`) on the same port and wait for PONG."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise HarnessError("redis-server is not installed (apt-get install redis-server)")
        argv = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        argv += ["--dir", str(self.workdir)]
        self.proc = spawn("redis", argv, env=base_env(), log=self.workdir / "redis.log", cwd=self.workdir)
        wait_until(self.answers, timeout=30, interval=0.1, what=f"redis on port {self.port}")
        return self

    def answers(self) -> bool:
        """Whether it answers PING."""
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
        return False

    def stop(self) -> None:
        """Stop it (SIGTERM: a clean shutdown)."""
        if self.proc is not None:
            self.proc.stop(timeout=10)

    def kill(self) -> None:
        """SIGKILL it."""
        if self.proc is not None:
            self.proc.kill()


def _pg_binary(name: str) -> str:
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), key=lambda p: int(p.parts[-3]))
    if found:
        return str(found[-1])
    path = shutil.which(name)
    if path is None:
        raise HarnessError(f"PostgreSQL's {name} is not installed (apt-get install postgresql)")
    return path


class PostgresServer:
    """A private PostgreSQL cluster (initdb into a temporary directory) on a free port.

    Run as the ``postgres`` user when the tests run as root (PostgreSQL refuses root). ``fsync`` is off: a test
    cluster need not survive a crash of the machine, only a restart of the server.
    """

    def __init__(self, workdir: Path, *, port: int | None = None) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self.data = workdir / "data"
        self.proc: Proc | None = None
        self.user = "postgres" if os.geteuid() == 0 else None
        workdir.mkdir(parents=True, exist_ok=True)
        if self.user:
            shutil.chown(workdir, self.user)

    def url(self, database: str) -> str:
        """postgres://postgres@127.0.0.1:PORT/DATABASE."""
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> PostgresServer:
        """initdb on first use, then start the server and wait until it accepts connections."""
        if not (self.data / "PG_VERSION").exists():
            subprocess.run(
                [_pg_binary("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
                check=True,
                capture_output=True,
                user=self.user,
                env=base_env(),
            )
        argv = [_pg_binary("postgres"), "-D", str(self.data), "-p", str(self.port), "-k", str(self.workdir)]
        argv += ["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "full_page_writes=off"]
        self.proc = spawn(
            "postgres", argv, env=base_env(), log=self.workdir / "postgres.log", cwd=self.workdir, user=self.user
        )
        wait_until(self.answers, timeout=60, interval=0.2, what=f"PostgreSQL on port {self.port}")
        return self

    def _client(self, tool: str) -> list[str]:
        return [_pg_binary(tool), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres"]

    def answers(self) -> bool:
        """Whether it accepts a connection and a query."""
        return self.psql("SELECT 1", check=False).returncode == 0

    def psql(self, sql: str, *, database: str = "postgres", check: bool = True) -> subprocess.CompletedProcess:
        """Run ``sql`` with psql as the superuser."""
        return subprocess.run(
            [*self._client("psql"), "-d", database, "-v", "ON_ERROR_STOP=1", "-Atc", sql],
            check=check,
            capture_output=True,
            text=True,
            env=base_env(),
        )

    def create_database(self, name: str) -> str:
        """Create an empty database; its URL."""
        self.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.psql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def restore(self, name: str, dump: Path) -> str:
        """Create ``name`` from a ``pg_dump -Fc`` file; its URL."""
        url = self.create_database(name)
        subprocess.run(
            [*self._client("pg_restore"), "-d", name, "--no-owner", "--exit-on-error", str(dump)],
            check=True,
            capture_output=True,
            env=base_env(),
        )
        return url

    def dump(self, name: str, to: Path) -> None:
        """``pg_dump -Fc`` of database ``name`` into ``to``."""
        subprocess.run(
            [*self._client("pg_dump"), "-Fc", "-f", str(to), name],
            check=True,
            capture_output=True,
            env=base_env(),
        )

    def stop(self, mode: str = "fast") -> None:
        """Shut down: ``fast`` (SIGINT: roll back sessions, clean), ``immediate`` (SIGQUIT: as a crash)."""
        if self.proc is None:
            return
        sig = {"fast": signal.SIGINT, "immediate": signal.SIGQUIT, "smart": signal.SIGTERM}[mode]
        with contextlib.suppress(ProcessLookupError):
            self.proc.signal(sig)
        if not self.proc._reap(60):
            self.proc.kill()

    def restart(self, *, down_seconds: float = 0, mode: str = "fast") -> None:
        """Stop, stay down ``down_seconds``, start again on the same port."""
        self.stop(mode)
        time.sleep(down_seconds)
        self.start()
