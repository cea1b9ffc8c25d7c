"""The engine's dataclasses survive a trip through JSON (a stored what-if proposal is read back by a worker)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from queues.engine import model as m
from queues.engine.codec import from_data, to_data
from queues.engine.scenario import load_scenario

SCENARIOS = sorted(
    p for p in (Path(__file__).resolve().parents[2] / "docs" / "scenarios").iterdir() if p.suffix in (".yaml", ".json")
)


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_codec_round_trips_every_scenario_state(path):
    state = load_scenario(path).state
    data = json.loads(json.dumps(to_data(state)))
    assert from_data(m.ClusterState, data) == state


def test_codec_keeps_optional_nested_and_float_fields():
    cq = m.ClusterQueue(
        name="a",
        cohort=None,
        namespace_selector=None,
        preemption=m.PreemptionPolicy(borrow_within_cohort=m.BorrowWithinCohort("LowerPriority", 5)),
        fair_weight=2,
    )
    back = from_data(m.ClusterQueue, json.loads(json.dumps(to_data(cq))))
    assert back == cq
    assert back.namespace_selector is None
    assert isinstance(back.fair_weight, float)
