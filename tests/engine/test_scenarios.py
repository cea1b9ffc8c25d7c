"""Example scenarios in docs/scenarios/ with their expected output (run through the runner, not manage.py).

Regenerate the expected files after an intended change with ``UPDATE_SCENARIOS=1 pytest tests/engine``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from queues.engine.scenario import load_scenario, parse_duration, render_table, run_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "docs" / "scenarios"
EXPECTED = SCENARIOS / "expected"
CASES = sorted(p.name for p in EXPECTED.glob("*.json"))


def _run(case: str) -> dict:
    stem, mode, _ = case.rsplit(".", 2)
    source = next(p for p in SCENARIOS.iterdir() if p.stem == stem and p.suffix in (".yaml", ".yml", ".json"))
    scenario = load_scenario(source)
    if mode == "settle":
        return run_scenario(scenario)
    if mode == "once":
        return run_scenario(scenario, mode="once")
    assert mode.startswith("until-"), case
    until = mode.removeprefix("until-")
    return run_scenario(scenario, mode="replay", until=None if until == "end" else parse_duration(until))


def test_scenarios_are_present():
    assert len(CASES) >= 8


@pytest.mark.parametrize("case", CASES)
def test_scenario_matches_expected_output(case):
    document = json.loads(json.dumps(_run(case)))
    path = EXPECTED / case
    if os.environ.get("UPDATE_SCENARIOS"):
        path.write_text(json.dumps(document, indent=2) + "\n")
    assert document == json.loads(path.read_text())
    assert render_table(document)
