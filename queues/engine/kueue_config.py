"""Kueue's manager Configuration (``config.kueue.x-k8s.io``) as a scenario carries it: the fair-sharing switch,
and the integrations it enables.

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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import yaml

from .model import DEFAULT_FAIR_SHARING_STRATEGIES, FairSharing

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
