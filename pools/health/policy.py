"""Health policy: the admin-edited thresholds as plain rules, and the pure evaluation of samples against them.

``evaluate`` turns one GPU's scrape sample plus what its signals remembered into new signal states; it writes
nothing. A signal whose series is missing keeps its last known state and is reported as unknown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from pools.health.catalog import (
    ACTION_RANK,
    SEVERITY_RANK,
    UNKNOWN_ACTION,
    XidChain,
    XidEvent,
    chain_action,
    xid_info,
)
from pools.health.dcgm import GpuSample

OK, UNKNOWN, DEGRADED, UNHEALTHY = "ok", "unknown", "degraded", "unhealthy"
LEVEL_RANK = {UNKNOWN: -1, OK: 0, DEGRADED: 1, UNHEALTHY: 2}
LEVELS = (OK, DEGRADED, UNHEALTHY)

#: NVML clocksEventReasons bits (nvmlClocksEventReason*, formerly nvmlClocksThrottleReason*).
THROTTLE_BITS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}
#: DCGM health-watch results (dcgmHealthWatchResult_t): pass, warn, fail.
HEALTH_WARN, HEALTH_FAIL = 10, 20

F_DBE_VOL = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
F_DBE_AGG = "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"
F_SBE_VOL = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"
F_SBE_AGG = "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"
F_TEMP = "DCGM_FI_DEV_GPU_TEMP"
F_THROTTLE = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"
F_REMAP_FAIL = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
F_PCIE = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
F_ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
F_XID = "DCGM_FI_DEV_XID_ERRORS"

#: Signals a DCGM scrape can speak to, and the series each needs (any one of them).
SCRAPE_SIGNALS: dict[str, tuple[str, ...]] = {
    "xid": (F_XID, "DCGM_EXP_XID_ERRORS_COUNT"),
    "ecc_dbe": (F_DBE_VOL, F_DBE_AGG),
    "ecc_sbe_rate": (F_SBE_VOL, F_SBE_AGG),
    "temperature": (F_TEMP,),
    "throttle": (F_THROTTLE,),
    "row_remap_failure": (F_REMAP_FAIL,),
    "pcie_replay_rate": (F_PCIE,),
    "dcgm_health": ("DCGM_EXP_GPU_HEALTH_STATUS",),
}


def worst(levels: Iterable[str]) -> str:
    """The worst known level (unknown only when nothing is known)."""
    return max(levels, key=LEVEL_RANK.__getitem__, default=UNKNOWN)


@dataclass(frozen=True)
class Rules:
    """A HealthPolicy row as plain values (the evaluation never touches the database)."""

    ecc_dbe_unhealthy: int = 1
    ecc_sbe_per_hour_degraded: int = 100
    temperature_degraded_c: int = 87
    temperature_unhealthy_c: int = 95
    temperature_sustained_seconds: int = 300
    resets_per_day_degraded: int = 3
    throttle_reasons: tuple[str, ...] = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
    throttle_sustained_seconds: int = 600
    row_remap_failure_unhealthy: bool = True
    pcie_replays_per_hour_degraded: int = 480
    rate_min_window_seconds: int = 300
    xid_action_levels: Mapping[str, str] = field(default_factory=dict)
    xid_severity_levels: Mapping[str, str] = field(default_factory=dict)
    xid_overrides: Mapping[str, str] = field(default_factory=dict)
    unknown_xid_level: str = UNHEALTHY
    xid_window_seconds: int = 300
    xid_decay_hours: int = 24
    node_condition_types: tuple[str, ...] = ()

    @classmethod
    def from_policy(cls, policy) -> Rules:
        """Rules of a HealthPolicy row."""
        return cls(
            ecc_dbe_unhealthy=policy.ecc_dbe_unhealthy,
            ecc_sbe_per_hour_degraded=policy.ecc_sbe_per_hour_degraded,
            temperature_degraded_c=policy.temperature_degraded_c,
            temperature_unhealthy_c=policy.temperature_unhealthy_c,
            temperature_sustained_seconds=policy.temperature_sustained_seconds,
            resets_per_day_degraded=policy.resets_per_day_degraded,
            throttle_reasons=tuple(policy.throttle_reasons or ()),
            throttle_sustained_seconds=policy.throttle_sustained_seconds,
            row_remap_failure_unhealthy=policy.row_remap_failure_unhealthy,
            pcie_replays_per_hour_degraded=policy.pcie_replays_per_hour_degraded,
            rate_min_window_seconds=policy.rate_min_window_seconds,
            xid_action_levels=dict(policy.xid_action_levels or {}),
            xid_severity_levels=dict(policy.xid_severity_levels or {}),
            xid_overrides={str(k): v for k, v in (policy.xid_overrides or {}).items()},
            unknown_xid_level=policy.unknown_xid_level,
            xid_window_seconds=policy.xid_window_seconds,
            xid_decay_hours=policy.xid_decay_hours,
            node_condition_types=tuple(policy.node_condition_types or ()),
        )


def policy_errors(values: Mapping) -> dict[str, list[str]]:
    """Problems with a policy's JSON settings, keyed by field (the numeric fields are checked by their types)."""
    errors: dict[str, list[str]] = {}

    def err(name: str, message: str) -> None:
        errors.setdefault(name, []).append(message)

    for name, keys in (("xid_action_levels", ACTION_RANK), ("xid_severity_levels", SEVERITY_RANK)):
        raw = values.get(name)
        if not isinstance(raw, dict):
            err(name, "must be a mapping")
            continue
        for key, level in raw.items():
            if key not in keys:
                err(name, f"{key!r} is not one of {', '.join(keys)}")
            if level not in LEVELS:
                err(name, f"{key}: {level!r} is not one of {', '.join(LEVELS)}")
        missing = [k for k in keys if k not in raw]
        if missing:
            err(name, f"give a level for every key; missing: {', '.join(missing)}")
    overrides = values.get("xid_overrides") or {}
    if not isinstance(overrides, dict):
        err("xid_overrides", "must be a mapping of XID number to level")
    else:
        for key, level in overrides.items():
            if not str(key).isdigit():
                err("xid_overrides", f"{key!r} is not an XID number")
            if level not in LEVELS:
                err("xid_overrides", f"XID {key}: {level!r} is not one of {', '.join(LEVELS)}")
    reasons = values.get("throttle_reasons") or []
    if not isinstance(reasons, list) or any(r not in THROTTLE_BITS for r in reasons):
        err("throttle_reasons", f"a list of: {', '.join(THROTTLE_BITS)}")
    types = values.get("node_condition_types") or []
    if not isinstance(types, list) or any(not isinstance(t, str) or not t for t in types):
        err("node_condition_types", "a list of condition type names")
    command = values.get("validation_command")
    if command is not None and (not isinstance(command, list) or not all(isinstance(c, str) for c in command or [0])):
        err("validation_command", 'a non-empty list of strings, e.g. ["/bin/sh", "-c", "dcgmi diag -r 3"]')
    return errors


@dataclass
class SignalState:
    """One signal's state as evaluation sees it (mirrors a HealthSignal row)."""

    level: str = UNKNOWN
    value: float | None = None
    message: str = ""
    since: datetime | None = None
    observed_at: datetime | None = None
    data: dict = field(default_factory=dict)


@dataclass
class Evaluation:
    """What one sample changed."""

    states: dict[str, SignalState]
    xid_events: list[XidEvent] = field(default_factory=list)
    reset_detected: bool = False
    unknown: dict[str, str] = field(default_factory=dict)


def _iso(when: datetime) -> str:
    return when.isoformat()


def _parse(raw: str | None) -> datetime | None:
    return datetime.fromisoformat(raw) if raw else None


def _with_level(prev: SignalState, level: str, *, value: float | None, message: str, now: datetime, data: dict):
    """The next state: ``since`` moves only when the level changes."""
    since = prev.since if prev.level == level and prev.since else now
    return SignalState(level=level, value=value, message=message, since=since, observed_at=now, data=data)


def _sustained(data: dict, key: str, active: bool, now: datetime, seconds: int) -> bool:
    """Track since when a condition holds in ``data[key]``; whether it has held for ``seconds``."""
    if not active:
        data.pop(key, None)
        return False
    start = _parse(data.setdefault(key, _iso(now)))
    return now - start >= timedelta(seconds=seconds)


def _temperature(prev: SignalState, temp: float, rules: Rules, now: datetime) -> SignalState:
    data = dict(prev.data)
    hot = bool(rules.temperature_unhealthy_c) and temp >= rules.temperature_unhealthy_c
    warm = bool(rules.temperature_degraded_c) and temp >= rules.temperature_degraded_c
    sustained = rules.temperature_sustained_seconds
    if _sustained(data, "unhealthy_since", hot, now, sustained):
        level = UNHEALTHY
        text = f"GPU at {temp:.0f} °C, at or above {rules.temperature_unhealthy_c} °C for {sustained} s or more"
    elif _sustained(data, "degraded_since", warm, now, sustained):
        level = DEGRADED
        text = f"GPU at {temp:.0f} °C, at or above {rules.temperature_degraded_c} °C for {sustained} s or more"
    else:
        level, text = OK, f"GPU at {temp:.0f} °C"
        if warm:
            text += f" (above {rules.temperature_degraded_c} °C since {data['degraded_since']}, not yet sustained)"
    return _with_level(prev, level, value=temp, message=text, now=now, data=data)


def _rate(prev: SignalState, value: float, *, threshold: int, what: str, rules: Rules, now: datetime) -> SignalState:
    """Level of a counter's rate per hour, over a window of at least ``rate_min_window_seconds``."""
    data = dict(prev.data)
    if "window_value" not in data or value < data.get("last", value):
        data = {"window_start": _iso(now), "window_value": value}  # first sample, or the counter was reset
    data["last"] = value
    elapsed = (now - _parse(data["window_start"])).total_seconds()
    if elapsed < max(rules.rate_min_window_seconds, 1):
        if prev.level == UNKNOWN:
            return replace(prev, value=None, observed_at=now, data=data, message=f"{what}: rate not known yet")
        return replace(prev, observed_at=now, data=data)
    rate = (value - data["window_value"]) / elapsed * 3600
    data["rate_per_hour"] = round(rate, 3)
    if elapsed >= max(3600, rules.rate_min_window_seconds):
        data["window_start"], data["window_value"] = _iso(now), value
    if threshold and rate >= threshold:
        return _with_level(
            prev, DEGRADED, value=rate, message=f"{what} at {rate:.0f}/h (threshold {threshold}/h)", now=now, data=data
        )
    return _with_level(prev, OK, value=rate, message=f"{what} at {rate:.0f}/h", now=now, data=data)


def _dbe(prev: SignalState, sample: GpuSample, rules: Rules, now: datetime) -> SignalState:
    data = dict(prev.data)
    if sample.has(F_DBE_VOL):
        count = sample.fields[F_DBE_VOL]
        what = "volatile"
    else:
        total = sample.fields[F_DBE_AGG]
        data.setdefault("agg_baseline", total)
        data["agg_last"] = total
        count = total - data["agg_baseline"]
        what = "new aggregate"
    if rules.ecc_dbe_unhealthy and count >= rules.ecc_dbe_unhealthy:
        text = f"{count:.0f} {what} double-bit ECC error(s) (threshold {rules.ecc_dbe_unhealthy})"
        return _with_level(prev, UNHEALTHY, value=count, message=text, now=now, data=data)
    return _with_level(prev, OK, value=count, message=f"{count:.0f} {what} double-bit ECC errors", now=now, data=data)


def _throttle(prev: SignalState, mask: float, rules: Rules, now: datetime) -> SignalState:
    data = dict(prev.data)
    bits = int(mask)
    active = sorted(name for name, bit in THROTTLE_BITS.items() if bits & bit)
    counted = [r for r in active if r in rules.throttle_reasons]
    if _sustained(data, "since_throttled", bool(counted), now, rules.throttle_sustained_seconds):
        text = f"clocks throttled ({', '.join(counted)}) for {rules.throttle_sustained_seconds} s or more"
        return _with_level(prev, DEGRADED, value=mask, message=text, now=now, data=data)
    text = f"clock event reasons: {', '.join(active) or 'none'}"
    return _with_level(prev, OK, value=mask, message=text, now=now, data=data)


def _dcgm_health(prev: SignalState, watches: Mapping[str, float], now: datetime) -> SignalState:
    failing = sorted(w for w, v in watches.items() if v >= HEALTH_FAIL)
    warning = sorted(w for w, v in watches.items() if HEALTH_WARN <= v < HEALTH_FAIL)
    if failing:
        level, text = UNHEALTHY, f"DCGM health watch failing: {', '.join(failing)}"
    elif warning:
        level, text = DEGRADED, f"DCGM health watch warning: {', '.join(warning)}"
    else:
        level, text = OK, "DCGM health watches pass"
    return _with_level(prev, level, value=max(watches.values(), default=0), message=text, now=now, data=dict(prev.data))


def _xid_gauge(prev: SignalState, sample: GpuSample, now: datetime) -> tuple[dict, list[XidEvent]]:
    """New XID events from the last-XID gauge and the windowed counts (a repeated value is the same event)."""
    data = dict(prev.data)
    events = []
    if sample.last_xid is not None:
        if sample.last_xid and sample.last_xid != data.get("last_gauge"):
            events.append(XidEvent(xid=sample.last_xid, at=now, message=sample.last_xid_message))
        data["last_gauge"] = sample.last_xid
    if sample.xid_counts:
        counts = {str(k): v for k, v in data.get("counts", {}).items()}
        for xid, count in sorted(sample.xid_counts.items()):
            before = counts.get(str(xid), 0)
            if count > before and not any(e.xid == xid for e in events):
                events.append(XidEvent(xid=xid, at=now, message=f"{count:.0f} in the exporter's window"))
            counts[str(xid)] = count
        data["counts"] = counts
    return data, events


def evaluate(sample: GpuSample, prev: Mapping[str, SignalState], rules: Rules, now: datetime) -> Evaluation:
    """New states of the signals this sample speaks to; missing series are listed as unknown, their state kept."""
    states: dict[str, SignalState] = {}
    result = Evaluation(states=states)

    def state(name: str) -> SignalState:
        return prev.get(name) or SignalState()

    for signal, series in SCRAPE_SIGNALS.items():
        present = any(sample.has(s) for s in series)
        if signal == "xid":
            present = sample.last_xid is not None or bool(sample.xid_counts)
        elif signal == "dcgm_health":
            present = bool(sample.health_watches)
        if not present:
            result.unknown[signal] = f"no {' / '.join(series)} series"
    if sample.has(F_TEMP):
        states["temperature"] = _temperature(state("temperature"), sample.fields[F_TEMP], rules, now)
    if sample.has(F_DBE_VOL) or sample.has(F_DBE_AGG):
        states["ecc_dbe"] = _dbe(state("ecc_dbe"), sample, rules, now)
    sbe = F_SBE_VOL if sample.has(F_SBE_VOL) else F_SBE_AGG if sample.has(F_SBE_AGG) else None
    if sbe:
        states["ecc_sbe_rate"] = _rate(
            state("ecc_sbe_rate"),
            sample.fields[sbe],
            threshold=rules.ecc_sbe_per_hour_degraded,
            what="single-bit ECC errors",
            rules=rules,
            now=now,
        )
    if sample.has(F_PCIE):
        states["pcie_replay_rate"] = _rate(
            state("pcie_replay_rate"),
            sample.fields[F_PCIE],
            threshold=rules.pcie_replays_per_hour_degraded,
            what="PCIe replays",
            rules=rules,
            now=now,
        )
    if sample.has(F_REMAP_FAIL):
        failed = sample.fields[F_REMAP_FAIL] >= 1
        level = UNHEALTHY if failed and rules.row_remap_failure_unhealthy else OK
        text = "DRAM row remapping failed (no spare rows)" if failed else "row remapping OK"
        states["row_remap_failure"] = _with_level(
            state("row_remap_failure"), level, value=sample.fields[F_REMAP_FAIL], message=text, now=now, data={}
        )
    if sample.has(F_THROTTLE):
        states["throttle"] = _throttle(state("throttle"), sample.fields[F_THROTTLE], rules, now)
    if sample.health_watches:
        states["dcgm_health"] = _dcgm_health(state("dcgm_health"), sample.health_watches, now)
    if sample.last_xid is not None or sample.xid_counts:
        data, result.xid_events = _xid_gauge(state("xid"), sample, now)
        states["xid"] = replace(state("xid"), data=data, observed_at=now)
    if sample.has(F_ENERGY):
        prev_energy = state("resets").data.get("last_energy")
        energy = sample.fields[F_ENERGY]
        result.reset_detected = prev_energy is not None and energy < prev_energy
        states["resets"] = replace(state("resets"), data={**state("resets").data, "last_energy": energy})
    return result


# --- XID levels ----------------------------------------------------------------------------------------------


def xid_event_level(xid: int, rules: Rules) -> str:
    """Level of one XID: an admin override, else the worse of its catalogue action and severity."""
    override = rules.xid_overrides.get(str(xid))
    if override in LEVELS:
        return override
    info = xid_info(xid)
    if info.action == UNKNOWN_ACTION:
        return rules.unknown_xid_level
    return worst((rules.xid_action_levels.get(info.action, OK), rules.xid_severity_levels.get(info.severity, OK)))


def xid_chain_level(chain: XidChain, rules: Rules) -> str:
    """Level of a chain: the worst of its events' levels and of the action the chain as a whole calls for.

    XIDs an admin overrode count only with their override; 45 and 154 count through the chain's action.
    """
    overridden = [e for e in chain.events if str(e.xid) in rules.xid_overrides]
    rest = [e for e in chain.events if str(e.xid) not in rules.xid_overrides]
    levels = [xid_event_level(e.xid, rules) for e in overridden]
    levels += [xid_event_level(e.xid, rules) for e in rest if e.xid not in (45, 154)]
    if rest:
        action, _ = chain_action(rest)
        levels.append(rules.unknown_xid_level if action == UNKNOWN_ACTION else rules.xid_action_levels.get(action, OK))
    return worst(levels) if levels else OK


def xid_signal(chains: Sequence[XidChain], rules: Rules, now: datetime) -> tuple[str, str, dict]:
    """Level, message and evidence of the XID signal from the chains still in force."""
    horizon = now - timedelta(hours=rules.xid_decay_hours)
    live = [c for c in chains if c.ended_at >= horizon]
    if not live:
        return OK, "no XID in force", {}
    scored = [(xid_chain_level(c, rules), c) for c in live]
    level, chain = max(scored, key=lambda lc: (LEVEL_RANK[lc[0]], lc[1].ended_at))
    first = next((e for e in chain.events if e.xid not in (45, 154)), chain.events[0])
    info = xid_info(first.xid)
    text = f"XID {first.xid} ({info.name.split(' (')[0]}): {chain.action}"
    if len(chain.events) > 1:
        text += f" — chain {', '.join(str(x) for x in chain.xids)}"
    evidence = {
        "xids": chain.xids,
        "action": chain.action,
        "explanation": chain.explanation,
        "first_at": chain.started_at.isoformat(),
        "last_at": chain.ended_at.isoformat(),
        "severity": info.severity,
    }
    return level, text, evidence
