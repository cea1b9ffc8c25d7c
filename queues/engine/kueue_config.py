"""Kueue's manager Configuration (``config.kueue.x-k8s.io``) as a scenario carries it: the fair-sharing switch,
``waitForPodsReady``, and the integrations it enables.

Two shapes are read: the ``kueue-manager-config`` ConfigMap as ``kubectl get cm -o yaml`` prints it (the
Configuration is the YAML string under ``data["controller_manager_config.yaml"]``), or a bare
``Configuration`` object. Only ``fairSharing`` matters to the engine; ``integrations.frameworks`` (the kinds of
workload Kueue manages) and ``resources.deviceClassMappings`` (how it counts DRA devices) are read for the cluster
check; other fields are ignored.

* ``config.kueue.x-k8s.io/v1beta2`` (Kueue ≥ 0.15): fair sharing is on when ``fairSharing`` is set, and then
  ``preemptionStrategies`` is required.
* ``config.kueue.x-k8s.io/v1beta1``: ``fairSharing.enable`` (default false) switches it; the strategies
  default to ``[LessThanOrEqualToFinalShare, LessThanInitialShare]``.

In both, the strategies must be one of the lists Kueue's validation accepts (``VALID_STRATEGIES``).

``waitForPodsReady`` (``wait_for_pods_ready``): in v1beta2 it is always on (Kueue ≥ 0.19 defaults it: timeout 30m,
no blockAdmission, unlimited requeues every 60s·2^(n-1) up to 3600s); in v1beta1 ``enable`` (default false)
switches it. Durations are Go durations (``5m``, ``1h30m0s``); a bad value names its field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import yaml

from .durations import parse_duration
from .model import DEFAULT_FAIR_SHARING_STRATEGIES, FairSharing, WaitForPodsReady

CONFIG_API_VERSIONS = ("config.kueue.x-k8s.io/v1beta2", "config.kueue.x-k8s.io/v1beta1")
CONFIG_MAP_KEY = "controller_manager_config.yaml"
LTE_FINAL = "LessThanOrEqualToFinalShare"
LT_INITIAL = "LessThanInitialShare"
VALID_STRATEGIES: tuple[tuple[str, ...], ...] = ((LTE_FINAL,), (LT_INITIAL,), (LTE_FINAL, LT_INITIAL))

Fail = Callable[[str, str], Exception]


def _supported() -> str:
    return ", ".join("[" + ", ".join(s) + "]" for s in VALID_STRATEGIES)


def configuration_from_config_map(raw: Mapping[str, Any], fail: Fail) -> FairSharing | None:
    """The fair-sharing setting of Kueue's manager ConfigMap; ``fail(path, problem)`` builds the error raised."""
    config = config_map_configuration(raw, fail)

    def inner(sub: str, problem: str) -> Exception:
        return fail(f'data["{CONFIG_MAP_KEY}"].{sub}', problem)

    return configuration(config, inner)


def config_map_configuration(raw: Mapping[str, Any], fail: Fail) -> Mapping[str, Any]:
    """The ``Configuration`` object Kueue's manager ConfigMap holds (as YAML text); errors name the field path."""
    data = raw.get("data")
    if not isinstance(data, Mapping) or CONFIG_MAP_KEY not in data:
        raise fail(
            "data",
            f'only the Kueue manager ConfigMap is read: data["{CONFIG_MAP_KEY}"] (the Configuration) is missing',
        )
    text = data[CONFIG_MAP_KEY]
    path = f'data["{CONFIG_MAP_KEY}"]'
    if not isinstance(text, str):
        raise fail(path, "expected the Configuration as a YAML string")
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise fail(path, f"cannot parse: {exc}") from None
    if not isinstance(config, Mapping):
        raise fail(path, "expected a Configuration object")
    kind = config.get("kind")
    if kind != "Configuration":
        raise fail(f"{path}.kind", f"expected Configuration, got {kind!r}")
    return config


#: What Kueue enables when its Configuration lists no ``integrations.frameworks``.
DEFAULT_FRAMEWORKS = ("batch/job",)


def integration_frameworks(config: Mapping[str, Any], fail: Fail) -> tuple[str, ...]:
    """The ``integrations.frameworks`` a ``Configuration`` enables (Kueue's default when it lists none)."""
    integrations = config.get("integrations")
    if integrations is None:
        return DEFAULT_FRAMEWORKS
    if not isinstance(integrations, Mapping):
        raise fail("integrations", f"expected an object, got {type(integrations).__name__}")
    frameworks = integrations.get("frameworks")
    if frameworks is None:
        return DEFAULT_FRAMEWORKS
    if not isinstance(frameworks, list) or not all(isinstance(f, str) for f in frameworks):
        raise fail("integrations.frameworks", "expected a list of framework names")
    return tuple(frameworks)


def configuration(config: Mapping[str, Any], fail: Fail) -> FairSharing | None:
    """The fair-sharing setting of a ``Configuration`` object (None = off); errors name the field path."""
    api = config.get("apiVersion")
    if api not in CONFIG_API_VERSIONS:
        raise fail("apiVersion", f"expected {CONFIG_API_VERSIONS[0]} (or {CONFIG_API_VERSIONS[1]}), got {api!r}")
    fs = config.get("fairSharing")
    if fs is None:
        return None
    if not isinstance(fs, Mapping):
        raise fail("fairSharing", f"expected an object, got {type(fs).__name__}")
    unknown = sorted(set(fs) - {"enable", "preemptionStrategies"})
    if unknown:
        raise fail(f"fairSharing.{unknown[0]}", "unknown field")
    strategies = fs.get("preemptionStrategies")
    if api == CONFIG_API_VERSIONS[0]:
        if "enable" in fs:
            raise fail(
                "fairSharing.enable",
                "unknown field in v1beta2 (setting fairSharing enables it; enable is config v1beta1's field)",
            )
        if not strategies:
            raise fail("fairSharing.preemptionStrategies", "required field is missing")
    else:
        enable = fs.get("enable", False)
        if not isinstance(enable, bool):
            raise fail("fairSharing.enable", f"expected true or false, got {enable!r}")
        if not enable:
            return None
        if not strategies:
            return FairSharing(DEFAULT_FAIR_SHARING_STRATEGIES)
    if not isinstance(strategies, list):
        raise fail("fairSharing.preemptionStrategies", f"expected a list, got {type(strategies).__name__}")
    for i, value in enumerate(strategies):
        if value not in (LTE_FINAL, LT_INITIAL):
            raise fail(
                f"fairSharing.preemptionStrategies[{i}]",
                f"unsupported value {value!r} (allowed: {LTE_FINAL}, {LT_INITIAL})",
            )
    chosen = tuple(strategies)
    if chosen not in VALID_STRATEGIES:
        raise fail(
            "fairSharing.preemptionStrategies",
            f"unsupported combination [{', '.join(chosen)}] (supported: {_supported()})",
        )
    return FairSharing(chosen)


def device_class_mappings(config: Mapping[str, Any], fail: Fail) -> dict[str, tuple[str, ...]]:
    """``resources.deviceClassMappings`` of a ``Configuration``: the resource name Kueue counts for the devices of
    each DeviceClass it lists (resource name → DeviceClass names)."""
    resources = config.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise fail("resources", f"expected an object, got {type(resources).__name__}")
    mappings = resources.get("deviceClassMappings") or []
    if not isinstance(mappings, list):
        raise fail("resources.deviceClassMappings", "expected a list")
    out: dict[str, tuple[str, ...]] = {}
    for i, mapping in enumerate(mappings):
        names = mapping.get("deviceClassNames") if isinstance(mapping, Mapping) else None
        if not isinstance(mapping, Mapping) or not isinstance(mapping.get("name"), str) or not isinstance(names, list):
            raise fail(f"resources.deviceClassMappings[{i}]", "expected {name, deviceClassNames}")
        out[mapping["name"]] = out.get(mapping["name"], ()) + tuple(str(n) for n in names)
    return out


_PODS_READY_FIELDS = {"enable", "timeout", "blockAdmission", "requeuingStrategy", "recoveryTimeout"}
_REQUEUING_FIELDS = {"timestamp", "backoffLimitCount", "backoffBaseSeconds", "backoffMaxSeconds"}


def _seconds(value: Any, path: str, fail: Fail, *, positive: bool = True) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise fail(path, str(exc)) from None
    if positive and seconds <= 0:
        raise fail(path, f"must be positive, got {value!r}")
    return seconds


def _count(raw: Mapping[str, Any], name: str, path: str, fail: Fail, *, least: int) -> int | None:
    value = raw.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise fail(f"{path}.{name}", f"must be an integer of at least {least}, got {value!r}")
    return value


def wait_for_pods_ready(config: Mapping[str, Any] | None, fail: Fail) -> WaitForPodsReady | None:
    """Kueue's ``waitForPodsReady`` of a ``Configuration`` (None: no Configuration at all, Kueue's defaults: on),
    or None when a v1beta1 Configuration leaves it off."""
    if config is None:
        return WaitForPodsReady()
    api = config.get("apiVersion")
    raw = config.get("waitForPodsReady")
    if raw is None:
        return WaitForPodsReady() if api == CONFIG_API_VERSIONS[0] else None
    if not isinstance(raw, Mapping):
        raise fail("waitForPodsReady", f"expected an object, got {type(raw).__name__}")
    unknown = sorted(set(raw) - _PODS_READY_FIELDS)
    if unknown:
        raise fail(f"waitForPodsReady.{unknown[0]}", "unknown field")
    if api == CONFIG_API_VERSIONS[0]:
        if "enable" in raw:
            raise fail("waitForPodsReady.enable", "unknown field in v1beta2 (waitForPodsReady is always on)")
    else:
        enable = raw.get("enable", False)
        if not isinstance(enable, bool):
            raise fail("waitForPodsReady.enable", f"expected true or false, got {enable!r}")
        if not enable:
            return None
    defaults = WaitForPodsReady()
    timeout = defaults.timeout
    if raw.get("timeout") not in (None, "", 0, "0s"):
        timeout = _seconds(raw["timeout"], "waitForPodsReady.timeout", fail)
    block = raw.get("blockAdmission", False)
    if not isinstance(block, bool):
        raise fail("waitForPodsReady.blockAdmission", f"expected true or false, got {block!r}")
    recovery = None
    if raw.get("recoveryTimeout") is not None:
        recovery = _seconds(raw["recoveryTimeout"], "waitForPodsReady.recoveryTimeout", fail, positive=False)
    strategy = raw.get("requeuingStrategy") or {}
    path = "waitForPodsReady.requeuingStrategy"
    if not isinstance(strategy, Mapping):
        raise fail(path, f"expected an object, got {type(strategy).__name__}")
    unknown = sorted(set(strategy) - _REQUEUING_FIELDS)
    if unknown:
        raise fail(f"{path}.{unknown[0]}", "unknown field")
    timestamp = strategy.get("timestamp") or "Eviction"
    if timestamp not in ("Eviction", "Creation"):
        raise fail(f"{path}.timestamp", f"unsupported value {timestamp!r} (allowed: Eviction, Creation)")
    base = _count(strategy, "backoffBaseSeconds", path, fail, least=1)
    most = _count(strategy, "backoffMaxSeconds", path, fail, least=1)
    return WaitForPodsReady(
        timeout=timeout,
        block_admission=block,
        recovery_timeout=recovery,
        requeuing_timestamp="Creation" if timestamp == "Creation" else "Eviction",
        backoff_limit_count=_count(strategy, "backoffLimitCount", path, fail, least=0),
        backoff_base_seconds=float(base) if base is not None else defaults.backoff_base_seconds,
        backoff_max_seconds=float(most) if most is not None else defaults.backoff_max_seconds,
    )
