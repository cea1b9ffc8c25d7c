"""Reading scenario files: documents, manifests with field-path errors, durations and timestamps."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from kernel import safe_yaml
from kernel.k8s_names import dns_subdomain_problem
from kernel.quantity import is_device_resource, parse_decimal, parse_quantity
from queues.engine.durations import parse_duration

KUEUE_VERSIONS = ("kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1")
CORE_KINDS = {"Namespace", "Node"}
#: Kueue's manager configuration: a bare Configuration (config.kueue.x-k8s.io) or its ConfigMap.
CONFIG_KINDS = {"Configuration", "ConfigMap"}
KUEUE_KINDS = {
    "ResourceFlavor",
    "Cohort",
    "ClusterQueue",
    "LocalQueue",
    "WorkloadPriorityClass",
    "Topology",
    "AdmissionCheck",
    "Workload",
}
ANN_SUBMIT = "sim.portal/submit-at"
ANN_RUNTIME = "sim.portal/runtime"
ANN_NODES = "sim.portal/nodes"
ANN_CHECKS = "sim.portal/checks-ready-after"
ANN_READY_AFTER = "sim.portal/ready-after"
ANN_HEALTH = "sim.portal/health-reason"
ANN_DISPLAY = "sim.portal/display-name"
ANN_PODS_READY = "sim.portal/pods-ready-after"
ANN_GATED = "kueue.x-k8s.io/admission-gated-by"
ANN_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
ANN_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
ANN_UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
#: The scenario's own kind: changes at given times (``queues.engine.scenario.timeline``).
TIMELINE_KIND = "Timeline"
TIMELINE_VERSION = "sim.portal/v1"


class ScenarioError(ValueError):
    """A scenario file is invalid; the message names the object (kind/name) and the field path."""

    def __init__(self, kind: str, name: str, path: str, problem: str) -> None:
        self.kind = kind
        self.name = name
        self.path = path
        self.problem = problem
        where = name if kind == "file" else (f"{kind}/{name}" if name else kind)
        super().__init__(f"{where}: {path}: {problem}" if path else f"{where}: {problem}")


def parse_timestamp(text: Any) -> float:
    """Seconds since the epoch of an RFC 3339 timestamp (a timezone is required)."""
    if isinstance(text, datetime):
        stamp = text
    else:
        stamp = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    if stamp.tzinfo is None:
        raise ValueError(f"timestamp {text!r} has no timezone")
    return stamp.timestamp()


class Manifest:
    """A manifest with helpers that raise ScenarioError naming the object and the field path."""

    def __init__(self, raw: Mapping[str, Any], index: int) -> None:
        self.raw = raw
        self.kind = str(raw.get("kind", ""))
        meta = raw.get("metadata") or {}
        if not isinstance(meta, Mapping):
            raise ScenarioError(self.kind or f"item[{index}]", "", "metadata", "must be a mapping")
        self.meta = meta
        self.name = str(meta.get("name") or "")
        self.namespace = str(meta.get("namespace") or "")

    def fail(self, path: str, problem: str) -> ScenarioError:
        """A ScenarioError for this object at ``path``."""
        name = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return ScenarioError(self.kind, name, path, problem)

    def get(self, path: str, default: Any = None, *, required: bool = False, types: tuple = ()) -> Any:
        """The value at a dotted ``path``; ``required`` and ``types`` are enforced."""
        cur: Any = self.raw
        for part in path.split("."):
            if not isinstance(cur, Mapping) or part not in cur or cur[part] is None:
                if required:
                    raise self.fail(path, "required field is missing")
                return default
            cur = cur[part]
        if types and not isinstance(cur, types):
            raise self.fail(path, f"expected {' or '.join(t.__name__ for t in types)}, got {type(cur).__name__}")
        return cur

    def quantity(self, path: str, value: Any, resource: str) -> int:
        """Parse a quantity, reporting errors at ``path``; a device count must be whole, as Kubernetes requires."""
        try:
            amount = parse_quantity(value, resource)
        except ValueError as exc:
            raise self.fail(path, str(exc)) from None
        if is_device_resource(resource) and parse_decimal(value) != amount:
            raise self.fail(path, f"{value!r} is not a whole number of {resource} (Kubernetes counts devices whole)")
        return amount

    def duration(self, path: str, value: Any) -> float:
        """Parse a duration, reporting errors at ``path``."""
        try:
            return parse_duration(value)
        except ValueError as exc:
            raise self.fail(path, str(exc)) from None

    def annotations(self) -> Mapping[str, str]:
        """metadata.annotations (a mapping)."""
        ann = self.meta.get("annotations") or {}
        if not isinstance(ann, Mapping):
            raise self.fail("metadata.annotations", "must be a mapping")
        return ann

    def labels(self, path: str = "metadata.labels") -> dict[str, str]:
        """A string map at ``path`` (labels by default)."""
        value = self.get(path, {}) or {}
        if not isinstance(value, Mapping):
            raise self.fail(path, "must be a mapping of strings")
        return {str(k): str(v) for k, v in value.items()}


def check_object(obj: Manifest, index: int) -> None:
    """A cluster object's kind, apiVersion and name (ScenarioError naming what is wrong)."""
    api = str(obj.raw.get("apiVersion", ""))
    if obj.kind in CORE_KINDS:
        if api != "v1":
            raise obj.fail("apiVersion", f"expected v1, got {api!r}")
    elif obj.kind in KUEUE_KINDS:
        if api not in KUEUE_VERSIONS:
            raise obj.fail("apiVersion", f"expected {KUEUE_VERSIONS[0]}, got {api!r}")
    else:
        raise ScenarioError(
            obj.kind or f"item[{index}]", obj.name, "kind", f"unknown kind {obj.kind!r} (apiVersion {api!r})"
        )
    if not obj.name:
        raise ScenarioError(obj.kind, "", "metadata.name", "required field is missing")
    if problem := dns_subdomain_problem(obj.name):
        raise ScenarioError(obj.kind, obj.name[:80], "metadata.name", problem)


def documents(text: str, source: str) -> list[Mapping[str, Any]]:
    """The objects of a YAML (multi-document) or JSON text, ``List`` kinds unpacked."""
    stripped = text.lstrip()
    try:
        if stripped.startswith(("{", "[")):
            data = json.loads(text)
            docs = data if isinstance(data, list) else [data]
        else:
            docs = [d for d in safe_yaml.safe_load_all(text) if d is not None]
    except (json.JSONDecodeError, safe_yaml.YAMLError) as exc:
        raise ScenarioError("file", source, "", f"cannot parse: {exc}") from None
    except RecursionError:
        raise ScenarioError("file", source, "", "nested too deeply") from None
    out: list[Mapping[str, Any]] = []
    for i, doc in enumerate(docs):
        if not isinstance(doc, Mapping):
            raise ScenarioError("file", source, f"document[{i}]", "expected an object")
        if doc.get("kind") == "List" or (doc.get("kind", "").endswith("List") and "items" in doc):
            items = doc.get("items") or []
            if not isinstance(items, list):
                raise ScenarioError("List", "", "items", "must be a list")
            for j, item in enumerate(items):
                if not isinstance(item, Mapping):
                    raise ScenarioError("List", "", f"items[{j}]", "expected an object")
                out.append(item)
        else:
            out.append(doc)
    return out
