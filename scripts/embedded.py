#!/usr/bin/env python3
"""Run the portal's embedded mode: the web server and the Celery worker (with beat), supervised.

``scripts/demo`` runs this after ``scripts/bootstrap``; the system tests (``tests/system/``) run it with
``--no-setup`` against a copy of a seeded database. No PostgreSQL and no Redis: SQLite holds the data and the
embedded broker (kombu's SQLAlchemy transport on ``$PORTAL_VAR_DIR/celery-broker.sqlite3``, docs/operations.md).

Supervision: when the worker or the web server exits without being asked to, it is started again and the restart
is logged (here, on stderr and in ``$PORTAL_VAR_DIR/supervisor.log``), after 1 s, then 2, 4 … 30 s while it keeps
exiting within a minute of its start. The worker's current process id is kept in ``$PORTAL_VAR_DIR/worker.pid``
(the web server's in ``web.pid``). SIGINT or SIGTERM stops both (SIGTERM, then SIGKILL after 20 s) and exits 0.
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Seconds of uptime after which the restart delay starts again from its first step.
STABLE_SECONDS = 60.0
FIRST_DELAY, MAX_DELAY = 1.0, 30.0
STOP_GRACE_SECONDS = 20.0


def var_dir() -> Path:
    """The directory of the embedded mode's files (settings.VAR_DIR reads the same variable)."""
    return Path(os.environ.get("PORTAL_VAR_DIR") or ROOT / "var")


def embedded_broker_url(var: Path) -> str:
    """The embedded broker: kombu's SQLAlchemy transport on a SQLite file of its own (not the portal's database)."""
    return f"sqla+sqlite:///{var / 'celery-broker.sqlite3'}"


def prepare_broker(url: str) -> None:
    """Put the embedded broker's file in WAL mode (kept by the file): readers never wait for the one writer."""
    if not url.startswith("sqla+sqlite:///"):
        return
    path = Path(url.removeprefix("sqla+sqlite:///"))
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path, timeout=30) as conn:
        conn.execute("PRAGMA journal_mode=WAL")


@dataclass
class Child:
    """One supervised process: how to start it, where its output goes, and its restarts."""

    name: str
    argv: list[str]
    log: Path | None  # None: inherit the supervisor's stdout/stderr
    pid_file: Path
    process: subprocess.Popen | None = None
    started: float = 0.0
    restarts: int = 0
    delay: float = FIRST_DELAY
    restart_at: float | None = None
    output: object = field(default=None, repr=False)

    def start(self, env: dict[str, str]) -> None:
        """Start the process in a session of its own (a terminal's Ctrl-C reaches only the supervisor)."""
        if self.log is not None:
            self.output = open(self.log, "ab", buffering=0)
            out = err = self.output
        else:
            out = err = None
        self.process = subprocess.Popen(
            self.argv, cwd=ROOT, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True
        )
        self.started = time.monotonic()
        self.restart_at = None
        self.pid_file.write_text(f"{self.process.pid}\n")

    def stop(self) -> None:
        """SIGTERM the process (a Celery worker then stops its pool itself), SIGKILL its group after the grace
        period, and anything it left behind."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            _signal_group(self.process.pid, signal.SIGKILL)
            self.process.wait()
        _signal_group(self.process.pid, signal.SIGKILL)  # children left behind by a process that exited


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


class Supervisor:
    """Keeps the children running until asked to stop."""

    def __init__(self, children: list[Child], env: dict[str, str], log: Path) -> None:
        self.children = children
        self.env = env
        self.log_path = log
        self.stopping = False

    def say(self, text: str) -> None:
        """One line on stderr and in the supervisor's log, with the time."""
        line = f"[{datetime.now().astimezone():%Y-%m-%d %H:%M:%S%z}] supervisor: {text}"
        print(line, file=sys.stderr, flush=True)
        with open(self.log_path, "a") as f:
            f.write(line + "\n")

    def run(self) -> int:
        """Start every child, restart those that exit, stop them all on SIGINT/SIGTERM."""
        signal.signal(signal.SIGINT, self._stop)
        signal.signal(signal.SIGTERM, self._stop)
        for child in self.children:
            child.start(self.env)
            self.say(f"started {child.name} (pid {child.process.pid})")
        while not self.stopping:
            now = time.monotonic()
            for child in self.children:
                self._watch(child, now)
            time.sleep(0.5)
        for child in reversed(self.children):
            child.stop()
            self.say(f"stopped {child.name}")
        return 0

    def _watch(self, child: Child, now: float) -> None:
        if child.restart_at is not None:
            if now >= child.restart_at and not self.stopping:
                child.start(self.env)
                self.say(f"restarted {child.name} (pid {child.process.pid}, restart #{child.restarts})")
            return
        code = child.process.poll()
        if code is None:
            return
        _signal_group(child.process.pid, signal.SIGKILL)  # what it left running (pool processes, an embedded beat)
        uptime = now - child.started
        delay = FIRST_DELAY if uptime >= STABLE_SECONDS else child.delay
        child.delay = min(delay * 2, MAX_DELAY)  # the next one, should it exit quickly again
        child.restarts += 1
        child.restart_at = now + delay
        how = f"signal {-code}" if code < 0 else f"status {code}"
        self.say(
            f"{child.name} (pid {child.process.pid}) exited with {how} after {uptime:.0f} s; "
            f"restarting in {delay:.0f} s (restart #{child.restarts}, log: {child.log or 'above'})"
        )

    def _stop(self, signum, frame) -> None:
        self.stopping = True


def main() -> int:
    """Parse the options, set up (unless --no-setup), then supervise the worker and the web server."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--no-setup", action="store_true", help="skip migrate and seed_demo")
    parser.add_argument("--web-log", type=Path, help="the web server's output (default: this terminal)")
    args = parser.parse_args()

    var = var_dir()
    var.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("CELERY_BROKER_URL", embedded_broker_url(var))
    env.setdefault("SHOW_DEMO_LOGINS", "1")
    # As in production: the portal's own error pages, no debug pages listing every URL (runserver --insecure
    # still serves the static files, a missing one answering 404).
    env.setdefault("DEBUG", "0")
    python = sys.executable
    prepare_broker(env["CELERY_BROKER_URL"])
    if not args.no_setup:
        subprocess.run([python, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env, check=True)
        subprocess.run([python, "manage.py", "seed_demo"], cwd=ROOT, env=env, check=True)

    worker = Child(
        "worker",
        [
            python, "-m", "celery", "-A", "portal", "worker", "--beat", "--concurrency", "2", "--loglevel", "INFO",
            "--schedule", str(var / "celerybeat-schedule"), "--without-gossip", "--without-mingle",
        ],
        log=var / "worker.log",
        pid_file=var / "worker.pid",
    )  # fmt: skip
    web = Child(
        "web",
        [python, "manage.py", "runserver", "--noreload", "--insecure", f"{args.host}:{args.port}"],
        log=args.web_log,
        pid_file=var / "web.pid",
    )
    tick = env.get("SIMULATOR_TICK_SECONDS", "5")
    print(
        f"""
  GPU Pool Portal is starting at http://{args.host}:{args.port}/
  Demo logins (password "demo-password" for all):
    researcher: alice (vision), bob (nlp)     team lead: carol (vision)
    operator (reads every team's jobs): oscar     admin: admin
  The simulated cluster ticks every {tick}s (worker log: {worker.log}). Ctrl-C stops everything.
""",
        flush=True,
    )
    return Supervisor([worker, web], env, var / "supervisor.log").run()


if __name__ == "__main__":
    sys.exit(main())
