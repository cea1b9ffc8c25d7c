"""scripts/embedded.py's supervisor: a child that exits is started again after 1 s, then 2, 4 … while it keeps
exiting quickly, and each exit and restart is logged with the child's status."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("embedded", ROOT / "scripts" / "embedded.py")
embedded = importlib.util.module_from_spec(_spec)
sys.modules["embedded"] = embedded  # its dataclasses look their module up
_spec.loader.exec_module(embedded)


def _exits(child) -> None:
    deadline = time.monotonic() + 30
    while child.process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_child_that_keeps_exiting_is_restarted_with_a_growing_delay_and_each_restart_logged(tmp_path, capsys):
    child = embedded.Child(
        "worker", [sys.executable, "-c", "import sys; sys.exit(3)"], log=tmp_path / "w.log", pid_file=tmp_path / "pid"
    )
    supervisor = embedded.Supervisor([child], {}, tmp_path / "supervisor.log")
    child.start({"PATH": "/usr/bin:/bin"})
    delays = []
    for _ in range(3):
        _exits(child)
        now = time.monotonic()
        supervisor._watch(child, now)  # sees the exit, schedules the restart
        delays.append(round(child.restart_at - now))
        supervisor._watch(child, child.restart_at)  # the restart
    assert delays == [1, 2, 4]
    log = (tmp_path / "supervisor.log").read_text()
    assert "worker (pid" in log
    assert "exited with status 3" in log
    assert "restarting in 1 s (restart #1" in log
    assert "restarted worker (pid" in log
    assert int((tmp_path / "pid").read_text()) == child.process.pid
    assert "supervisor: " in capsys.readouterr().err
    _exits(child)


def test_a_child_that_ran_a_while_is_restarted_after_the_first_delay_again(tmp_path):
    child = embedded.Child("web", [sys.executable, "-c", "pass"], log=None, pid_file=tmp_path / "pid")
    supervisor = embedded.Supervisor([child], {}, tmp_path / "supervisor.log")
    child.delay = 16.0  # it had been exiting quickly before
    child.start({"PATH": "/usr/bin:/bin"})
    _exits(child)
    child.started -= embedded.STABLE_SECONDS  # it ran long enough to count as stable
    now = time.monotonic()
    supervisor._watch(child, now)
    assert round(child.restart_at - now) == 1
