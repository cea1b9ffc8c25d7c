"""Policy evaluation of samples (pure): thresholds, sustained checks, rates, unknown series."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pools.health.dcgm import GpuSample
from pools.health.policy import Rules, SignalState, evaluate, policy_errors
from pools.models import _default_xid_action_levels, _default_xid_severity_levels

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
RULES = Rules(
    temperature_degraded_c=87,
    temperature_unhealthy_c=95,
    temperature_sustained_seconds=300,
    ecc_sbe_per_hour_degraded=100,
    pcie_replays_per_hour_degraded=480,
    rate_min_window_seconds=300,
    throttle_reasons=("hw_slowdown", "hw_thermal_slowdown"),
    throttle_sustained_seconds=600,
    xid_action_levels=_default_xid_action_levels(),
    xid_severity_levels=_default_xid_severity_levels(),
)


def sample(**fields) -> GpuSample:
    return GpuSample(uuid="GPU-x", gpu=0, hostname="n", fields=fields)


def run(samples, start=T0, step=60):
    """Evaluate a series of samples ``step`` seconds apart; the final states."""
    states: dict[str, SignalState] = {}
    result = None
    for i, s in enumerate(samples):
        result = evaluate(s, states, RULES, start + timedelta(seconds=i * step))
        states = {**states, **result.states}
    return states, result


def test_evaluate_temperature_degrades_only_when_sustained():
    hot = [sample(DCGM_FI_DEV_GPU_TEMP=90)] * 5  # 4 minutes at 90 °C
    states, _ = run(hot)
    assert states["temperature"].level == "ok"
    states, _ = run(hot + [sample(DCGM_FI_DEV_GPU_TEMP=90)] * 2)  # 6 minutes
    assert states["temperature"].level == "degraded"
    assert "at or above 87 °C" in states["temperature"].message
    states, _ = run([sample(DCGM_FI_DEV_GPU_TEMP=90)] * 3 + [sample(DCGM_FI_DEV_GPU_TEMP=60)] + hot)
    assert states["temperature"].level == "ok"  # the dip restarted the clock


def test_evaluate_temperature_above_unhealthy_threshold():
    states, _ = run([sample(DCGM_FI_DEV_GPU_TEMP=97)] * 7)
    assert states["temperature"].level == "unhealthy"


def test_evaluate_double_bit_ecc_is_unhealthy_at_once():
    states, _ = run([sample(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL=0), sample(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL=1)])
    assert states["ecc_dbe"].level == "unhealthy"
    assert "double-bit" in states["ecc_dbe"].message


def test_evaluate_aggregate_dbe_counts_only_new_errors():
    states, _ = run([sample(DCGM_FI_DEV_ECC_DBE_AGG_TOTAL=4), sample(DCGM_FI_DEV_ECC_DBE_AGG_TOTAL=4)])
    assert states["ecc_dbe"].level == "ok"
    states, _ = run([sample(DCGM_FI_DEV_ECC_DBE_AGG_TOTAL=4), sample(DCGM_FI_DEV_ECC_DBE_AGG_TOTAL=5)])
    assert states["ecc_dbe"].level == "unhealthy"


def test_evaluate_single_bit_rate_needs_a_minimum_window():
    states, _ = run([sample(DCGM_FI_DEV_ECC_SBE_VOL_TOTAL=0), sample(DCGM_FI_DEV_ECC_SBE_VOL_TOTAL=50)])
    assert states["ecc_sbe_rate"].level == "unknown"  # one minute is not a rate
    counts = [sample(DCGM_FI_DEV_ECC_SBE_VOL_TOTAL=v) for v in (0, 5, 10, 15, 20, 25)]
    states, _ = run(counts)  # 25 in 5 minutes = 300/h
    assert states["ecc_sbe_rate"].level == "degraded"
    counts = [sample(DCGM_FI_DEV_ECC_SBE_VOL_TOTAL=v) for v in (0, 1, 1, 2, 2, 3)]
    states, _ = run(counts)
    assert states["ecc_sbe_rate"].level == "ok"


def test_evaluate_pcie_replay_rate_and_counter_reset():
    states, _ = run([sample(DCGM_FI_DEV_PCIE_REPLAY_COUNTER=v) for v in (0, 20, 40, 60, 80, 100)])
    assert states["pcie_replay_rate"].level == "degraded"
    states, _ = run([sample(DCGM_FI_DEV_PCIE_REPLAY_COUNTER=v) for v in (1000, 5, 6, 7, 8, 9, 10)])
    assert states["pcie_replay_rate"].level == "ok"  # the drop started a new window


def test_evaluate_throttle_reasons_sustained_and_filtered():
    hw_thermal = 0x40
    states, _ = run([sample(DCGM_FI_DEV_CLOCK_THROTTLE_REASONS=hw_thermal)] * 12)
    assert states["throttle"].level == "degraded"
    idle = 0x1
    states, _ = run([sample(DCGM_FI_DEV_CLOCK_THROTTLE_REASONS=idle)] * 12)
    assert states["throttle"].level == "ok"


def test_evaluate_row_remap_failure_and_dcgm_health_watch():
    states, _ = run([sample(DCGM_FI_DEV_ROW_REMAP_FAILURE=1)])
    assert states["row_remap_failure"].level == "unhealthy"
    s = sample()
    s.health_watches = {"PCIE": 10, "MEM": 0}
    states, _ = run([s])
    assert states["dcgm_health"].level == "degraded"


def test_evaluate_missing_series_is_unknown_and_keeps_state():
    states, _result = run([sample(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL=2)])
    assert states["ecc_dbe"].level == "unhealthy"
    later = evaluate(sample(DCGM_FI_DEV_GPU_TEMP=40), states, RULES, T0 + timedelta(minutes=5))
    assert "ecc_dbe" not in later.states  # untouched: the caller keeps "unhealthy"
    assert "ecc_dbe" in later.unknown
    assert "xid" in later.unknown


def test_evaluate_xid_gauge_same_value_is_the_same_event():
    s = sample()
    s.last_xid, s.last_xid_message = 79, "GPU has fallen off the bus"
    _, first = run([s])
    assert [e.xid for e in first.xid_events] == [79]
    _, again = run([s, s])
    assert again.xid_events == []
    zero = sample()
    zero.last_xid = 0
    _, after_reset = run([s, zero, s])
    assert [e.xid for e in after_reset.xid_events] == [79]


def test_evaluate_energy_counter_drop_is_a_reset():
    _, result = run(
        [sample(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION=5e9), sample(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION=1e6)]
    )
    assert result.reset_detected


def test_policy_errors_name_the_field():
    errors = policy_errors(
        {
            "xid_action_levels": {**_default_xid_action_levels(), "reset_gpu": "broken"},
            "xid_severity_levels": {"info": "ok"},
            "xid_overrides": {"abc": "ok"},
            "throttle_reasons": ["too_hot"],
            "node_condition_types": [""],
            "validation_command": "dcgmi diag",
        }
    )
    assert "reset_gpu: 'broken'" in errors["xid_action_levels"][0]
    assert "missing" in errors["xid_severity_levels"][0]
    assert set(errors) == {
        "xid_action_levels",
        "xid_severity_levels",
        "xid_overrides",
        "throttle_reasons",
        "node_condition_types",
        "validation_command",
    }
    assert (
        policy_errors(
            {
                "xid_action_levels": _default_xid_action_levels(),
                "xid_severity_levels": _default_xid_severity_levels(),
            }
        )
        == {}
    )
