"""Reservation documents in scenario files: read into holds, and every bad field named."""

from __future__ import annotations

from pathlib import Path

import pytest

from queues.engine.scenario import ScenarioError, load_scenario, loads_scenario, run_scenario
from queues.engine.scenario.reservations import offset_text

SCENARIO = Path(__file__).resolve().parents[2] / "docs" / "scenarios" / "reservation-window.yaml"


def _with(spec: str, *, api: str = "sim.portal/v1") -> str:
    text = SCENARIO.read_text()
    head, _, rest = text.partition("apiVersion: sim.portal/v1\nkind: Reservation")
    _, _, tail = rest.partition("---\n")
    return f"{head}apiVersion: {api}\nkind: Reservation\nmetadata: {{name: r}}\nspec: {spec}\n---\n{tail}"


def test_reservation_documents_become_holds_with_times_from_the_start():
    scenario = load_scenario(SCENARIO)
    (hold,) = scenario.state.reservations
    assert (hold.cluster_queue, hold.flavor, hold.count) == ("speech", "h100", 8)
    assert (hold.start - scenario.start, hold.end - scenario.start) == (3600.0, 10800.0)
    assert hold.until == "t=3h"


@pytest.mark.parametrize(
    ("spec", "api", "error"),
    [
        (
            "{clusterQueue: speech, flavor: h100, resource: nvidia.com/gpu, count: 8, start: 1h, end: 3h}",
            "sim.portal/v2",
            "Reservation/r: apiVersion: expected sim.portal/v1, got 'sim.portal/v2'",
        ),
        (
            "{clusterQueue: nope, flavor: h100, resource: nvidia.com/gpu, count: 8, start: 1h, end: 3h}",
            None,
            "Reservation/r: spec.clusterQueue: no ClusterQueue 'nope' in the scenario",
        ),
        (
            "{clusterQueue: speech, flavor: a100, resource: nvidia.com/gpu, count: 8, start: 1h, end: 3h}",
            None,
            "Reservation/r: spec.flavor: no ResourceFlavor 'a100' in the scenario",
        ),
        (
            "{clusterQueue: speech, flavor: h100, resource: amd.com/gpu, count: 8, start: 1h, end: 3h}",
            None,
            "Reservation/r: spec.resource: ClusterQueue speech has no quota of h100/amd.com/gpu",
        ),
        (
            "{clusterQueue: speech, flavor: h100, resource: nvidia.com/gpu, count: 0, start: 1h, end: 3h}",
            None,
            "Reservation/r: spec.count: must be more than 0",
        ),
        (
            "{clusterQueue: speech, flavor: h100, resource: nvidia.com/gpu, count: '1.5', start: 1h, end: 3h}",
            None,
            "Reservation/r: spec.count: '1.5' is not a whole number of nvidia.com/gpu",
        ),
        (
            "{clusterQueue: speech, flavor: h100, resource: nvidia.com/gpu, count: 8, start: 3h, end: 1h}",
            None,
            "Reservation/r: spec.end: must be after spec.start",
        ),
        (
            "{clusterQueue: speech, flavor: h100, resource: nvidia.com/gpu, count: 8, start: soon, end: 3h}",
            None,
            "Reservation/r: spec.start: ",
        ),
        (
            "{clusterQueue: speech, flavor: h100, resource: nvidia.com/gpu, count: 8, start: 1h, end: 3h, gpus: 2}",
            None,
            "Reservation/r: spec.gpus: unknown field",
        ),
        (
            "{flavor: h100, resource: nvidia.com/gpu, count: 8, start: 1h, end: 3h}",
            None,
            "Reservation/r: spec.clusterQueue: required field is missing",
        ),
    ],
)
def test_bad_reservation_documents_name_the_field(spec, api, error):
    with pytest.raises(ScenarioError) as caught:
        loads_scenario(_with(spec, api=api or "sim.portal/v1"))
    assert str(caught.value).startswith(error)


def test_a_reservation_for_a_queue_without_cohort_is_refused():
    text = _with("{clusterQueue: speech, flavor: h100, resource: nvidia.com/gpu, count: 8, start: 1h, end: 3h}")
    text = text.replace("metadata: {name: speech}\nspec:\n  cohortName: org\n", "metadata: {name: speech}\nspec:\n")
    with pytest.raises(ScenarioError, match=r"spec\.clusterQueue: ClusterQueue speech is in no cohort"):
        loads_scenario(text)


def test_a_reservation_in_force_at_the_start_applies_in_every_mode():
    text = _with("{clusterQueue: speech, flavor: h100, resource: nvidia.com/gpu, count: 8, start: 0s, end: 3h}")
    for mode in ("settle", "once"):
        doc = run_scenario(loads_scenario(text), mode=mode)
        (edge,) = doc["reservations"]["edges"]
        assert edge["inForce"] == ["r"]
        assert edge["quota"]["ClusterQueue/speech"]["h100/nvidia.com/gpu"]["nominal"] == "8"


def test_offset_text():
    assert [offset_text(s) for s in (0, 90, 3600, 5400, 90000, -60)] == ["0s", "1m30s", "1h", "1h30m", "1d1h", "-1m"]
