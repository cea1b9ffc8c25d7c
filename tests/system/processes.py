"""Processes for the system tests: free ports, waiting, logs and their problems, one started process (``Proc``).

The portals built from them are in :mod:`tests.system.portals`; the interface is described in tests/system/README.md.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
#: What marks a problem in a log: a Python traceback, a critical or fatal line, SQLite's lock error.
PROBLEM = re.compile(
    r"Traceback \(most recent call last\)|CRITICAL|Unrecoverable error|database is locked|\bFATAL\b|\bPANIC\b"
)
#: Seconds to wait for a process to come up on a busy machine.
START_TIMEOUT = float(os.environ.get("SYSTEM_TEST_START_TIMEOUT", "180"))
#: The environment variables a portal process inherits from the test run (the rest is set explicitly).
INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "PORTAL_ENGINE_PURE", "USER")


class HarnessError(RuntimeError):
    """A process did not start, a wait ran out, or a command failed (the message says which, with log tails)."""


# --------------------------------------------------------------------------- ports and waiting


def free_port() -> int:
    """A TCP port nothing listens on: from ``SYSTEM_TEST_PORTS`` ("18100-18199") when set, else the kernel's pick."""
    span = os.environ.get("SYSTEM_TEST_PORTS", "")
    if span:
        first, last = (int(x) for x in span.split("-"))
        candidates: Iterable[int] = _worker_share(range(first, last + 1))
    else:
        candidates = [0]
    for port in candidates:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            chosen = s.getsockname()[1]
        if port == 0 or chosen not in _TAKEN:
            _TAKEN.add(chosen)
            return chosen
    raise HarnessError(f"no free port in SYSTEM_TEST_PORTS={span}")


_TAKEN: set[int] = set()  # handed out in this run (a port is free until its process binds it)


def _worker_share(ports: range) -> range:
    """This xdist worker's slice of ``ports`` (all of them without xdist): workers never hand out the same port."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count <= 1:
        return ports
    index = int(worker[2:])
    return ports[index::count]


def wait_until(check: Callable[[], Any], *, timeout: float, interval: float = 0.5, what: str = "a condition") -> Any:
    """Call ``check`` until it returns something true (returned) or ``timeout`` seconds pass (HarnessError)."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = check()
        except Exception as exc:  # the condition may fail while a process is starting
            value, last_error = None, exc
        if value:
            return value
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise HarnessError(f"gave up after {timeout:.0f} s waiting for {what}{detail}")
        time.sleep(interval)


# --------------------------------------------------------------------------- logs


@dataclass
class LogFile:
    """A log the harness reads: its name in reports and its path."""

    name: str
    path: Path

    def text(self, start: int = 0) -> str:
        """The log from byte ``start`` ("" while it does not exist)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(start)
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def size(self) -> int:
        """Bytes written so far."""
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def tail(self, lines: int = 60) -> str:
        """The last ``lines`` lines."""
        return "\n".join(self.text().splitlines()[-lines:])


def problems_in(text: str) -> list[str]:
    """Each problem in a log's text, as an excerpt: a traceback with the two lines before it and the exception
    line after its frames (a chained traceback whole, to its last exception), or a single line (critical, fatal,
    "database is locked")."""
    lines = text.splitlines()
    found, i = [], 0
    while i < len(lines):
        line = lines[i]
        if not PROBLEM.search(line):
            i += 1
            continue
        start = max(i - 2, 0)
        end = i + 1
        if "Traceback (most recent call last)" in line:
            end = _traceback_end(lines, end)
            while (chained := _chained_traceback(lines, end)) is not None:
                end = _traceback_end(lines, chained + 1)
        found.append("\n".join(lines[start:end]))
        i = end
    return found


def _traceback_end(lines: list[str], end: int) -> int:
    """The index after a traceback's exception line, from the line after its "Traceback" line."""
    while end < len(lines) and (lines[end].startswith((" ", "\t")) or not lines[end].strip()):
        end += 1
    return min(end + 1, len(lines))


def _chained_traceback(lines: list[str], end: int) -> int | None:
    """The index of the "Traceback" line of the exception chained after the one ending at ``end`` (None if none)."""
    j = end
    while j < len(lines) and not lines[j].strip():
        j += 1
    if j >= len(lines) or not lines[j].startswith(("During handling", "The above exception")):
        return None
    j += 1
    while j < len(lines) and not lines[j].strip():
        j += 1
    return j if j < len(lines) and lines[j].startswith("Traceback") else None


# --------------------------------------------------------------------------- processes


class Proc:
    """One process the harness started (or found by its pid file), with its log."""

    def __init__(self, name: str, log: LogFile, popen: subprocess.Popen | None = None, pid_file: Path | None = None):
        self.name = name
        self.log = log
        self.popen = popen
        self.pid_file = pid_file

    @property
    def pid(self) -> int:
        """The process id now (read again from the pid file for a supervised process, which a restart changes)."""
        if self.popen is not None:
            return self.popen.pid
        if self.pid_file is None or not self.pid_file.exists():
            raise HarnessError(f"{self.name}: no pid file yet")
        return int(self.pid_file.read_text().split()[0])

    def alive(self) -> bool:
        """Whether the process exists (a stopped one, SIGSTOP, counts as alive)."""
        if self.popen is not None:
            return self.popen.poll() is None
        try:
            os.kill(self.pid, 0)
        except (ProcessLookupError, HarnessError):
            return False
        return _state(self.pid) not in ("Z", "X", "")

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the process itself."""
        os.kill(self.pid, sig)

    def freeze(self) -> None:
        """SIGSTOP: the process hangs (alive, answering nothing) until :meth:`thaw`."""
        self.signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT after :meth:`freeze`."""
        self.signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL the process and its process group (a worker's pool children go with it)."""
        pid = self.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        self._reap(5)

    def stop(self, timeout: float = 20) -> None:
        """SIGCONT (a frozen process cannot stop), SIGTERM, then SIGKILL the group after ``timeout`` seconds (and
        whatever the process left in it)."""
        try:
            pid = self.pid
        except HarnessError:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGCONT) if self.popen is not None else os.kill(pid, signal.SIGCONT)
        with contextlib.suppress(ProcessLookupError):  # the process itself: a Celery worker stops its pool
            os.kill(pid, signal.SIGTERM)
        if not self._reap(timeout):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            self._reap(5)
        with contextlib.suppress(ProcessLookupError):  # children a process left behind
            os.killpg(pid, signal.SIGKILL)

    def _reap(self, timeout: float) -> bool:
        if self.popen is not None:
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return False
            return True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                return True
            time.sleep(0.1)
        return False

    def wait_for_log(self, pattern: str, *, timeout: float = START_TIMEOUT, start: int = 0) -> str:
        """Wait until the log (from byte ``start``) matches ``pattern``; the match."""
        regex = re.compile(pattern)

        def found() -> str | None:
            m = regex.search(self.log.text(start))
            return m.group(0) if m else None

        return wait_until(found, timeout=timeout, interval=0.3, what=f"{self.name} to log /{pattern}/")

    def __repr__(self) -> str:
        return f"<Proc {self.name}>"


def _state(pid: int) -> str:
    """The process state letter from /proc (R, S, T for stopped, Z…), "" when gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return ""


def spawn(
    name: str, argv: list[str], *, env: dict[str, str], log: Path, cwd: Path = ROOT, user: str | None = None
) -> Proc:
    """Start ``argv`` in a session of its own with stdout and stderr in ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        popen = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            user=user,
        )
    return Proc(name, LogFile(name, log), popen=popen)


def base_env() -> dict[str, str]:
    """What every portal process starts from: PATH and locale from the test run, unbuffered output, the settings."""
    env = {key: os.environ[key] for key in INHERITED if key in os.environ}
    env.update(PYTHONUNBUFFERED="1", DJANGO_SETTINGS_MODULE="portal.settings", PYTHONDONTWRITEBYTECODE="1")
    return env
