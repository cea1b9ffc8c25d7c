"""``seed_demo`` says what it is doing while it replays (a bar on a terminal, plain lines otherwise) and the
README lists the logins it prints."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import OutputWrapper

from portal.demo import DEMO_PASSWORD, USERS
from portal.management.commands.seed_demo import ProgressPrinter

README = Path(__file__).resolve().parents[2] / "README.md"


def printer(*, tty: bool) -> tuple[ProgressPrinter, io.StringIO]:
    buffer = io.StringIO()
    return ProgressPrinter(OutputWrapper(buffer), tty=tty), buffer


def test_without_a_terminal_it_prints_a_line_per_ten_percent():
    progress, out = printer(tty=False)
    for i in range(101):
        progress("replaying history", i / 100)
    progress("billing", 0.0)
    progress("billing", 1.0)
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["seed_demo: replaying history: 0%", "seed_demo: replaying history: 10%"]
    assert lines[10] == "seed_demo: replaying history: 100%"
    assert lines[11:] == ["seed_demo: billing: 0%", "seed_demo: billing: 100%"]
    assert "\r" not in out.getvalue()


def test_on_a_terminal_it_redraws_one_bar_per_step():
    progress, out = printer(tty=True)
    progress("replaying history", 0.0)
    progress("replaying history", 0.5)
    progress("replaying history", 0.5)  # no change, no redraw
    progress("billing", 1.0)
    progress.end_line()
    text = out.getvalue()
    assert text.count("\r") == 3
    assert re.search(r"\r\[#{15}\.{15}\]  50% replaying history \(\d+s\)", text)
    assert text.endswith("100% billing (0s)\n")
    assert text.count("\n") == 2  # one line per step, redrawn in place


def test_readme_lists_every_login_seed_demo_prints():
    readme = README.read_text(encoding="utf-8")
    assert f"`{DEMO_PASSWORD}`" in readme
    for username, *_ in USERS:
        assert re.search(rf"^\| `{username}` \| \S", readme, re.M), username


@pytest.mark.django_db(transaction=True)
def test_seed_demo_reports_its_steps_and_the_logins():
    out = io.StringIO()
    call_command("seed_demo", "--days", "1", stdout=out)
    text = out.getvalue()
    assert "seed_demo: installing the pool, users, policy and classes: 0%" in text
    assert re.search(r"seed_demo: replaying 1 days of history \(\d+ jobs\) through the simulated cluster: 100%", text)
    assert "seed_demo: replaying the last hour's burst: 100%" in text
    assert "seed_demo: billing: rates, metering, daily rollups and budget checks: 100%" in text
    logins = re.search(r"Logins: (.*) \(password", text).group(1).split(", ")
    assert logins == [u for u, *_ in USERS]
