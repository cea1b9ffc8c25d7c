"""The ``simulate`` management command (thin wrapper over the scenario runner; no database)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

SCENARIOS = Path(__file__).resolve().parents[2] / "docs" / "scenarios"


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("simulate", *args, stdout=out)
    return out.getvalue()


def test_simulate_json_matches_expected():
    text = run(str(SCENARIOS / "preemption.yaml"), "--once", "--json")
    expected = json.loads((SCENARIOS / "expected" / "preemption.once.json").read_text())
    assert json.loads(text) == expected


def test_simulate_until_end_and_table():
    doc = json.loads(run(str(SCENARIOS / "replay-two-teams.json"), "--until", "end", "--json"))
    assert {w["state"] for w in doc["workloads"]} == {"finished"}
    table = run(str(SCENARIOS / "health.yaml"))
    assert "health_blocked" in table
    assert "WORKLOAD" in table


def test_simulate_bad_input_exits_with_status_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: kueue.x-k8s.io/v1beta2\nkind: Gadget\nmetadata: {name: g}\n")
    out = io.StringIO()
    with pytest.raises(CommandError) as info:
        call_command("simulate", str(bad), "--json", stdout=out)
    assert info.value.returncode == 2
    assert "Gadget/g: kind: unknown kind 'Gadget'" in str(info.value)
    assert out.getvalue() == ""


def test_simulate_bad_until():
    with pytest.raises(CommandError) as info:
        run(str(SCENARIOS / "health.yaml"), "--until", "later")
    assert info.value.returncode == 2
