"""``load_scenario``: a scenario file (Kubernetes and Kueue objects plus ``sim.portal/*`` facts) as a ``Scenario``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kernel.k8s_names import dns_subdomain_problem
from queues.engine.model import ClusterState, FairSharing, Workload

from .kinds import (
    kueue_configuration,
    parse_admission_checks,
    parse_cluster_queue,
    parse_cohorts,
    parse_flavors,
    parse_local_queues,
    parse_namespaces,
    parse_node,
    parse_priority_classes,
    parse_topologies,
)
from .manifest import CONFIG_KINDS, CORE_KINDS, KUEUE_KINDS, KUEUE_VERSIONS, Manifest, ScenarioError, documents
from .workloads import parse_workload, schedule_workloads


@dataclass(frozen=True, slots=True)
class Scenario:
    """A loaded scenario: the initial state, later submissions, and simulation facts."""

    state: ClusterState
    start: float
    submissions: tuple[tuple[float, Workload], ...] = ()
    checks_delay: Mapping[str, float] = field(default_factory=dict)
    source: str = ""


def load_scenario(path: str | Path) -> Scenario:
    """Load a scenario file (YAML, multi-document, or JSON); raises ScenarioError on bad input."""
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as exc:
        raise ScenarioError("file", str(file), "", f"cannot read: {exc.strerror or exc}") from None
    return loads_scenario(text, source=str(file))


def _by_kind(objs: list[Manifest]) -> tuple[dict[str, list[Manifest]], FairSharing | None]:
    """The objects by kind (each checked: known kind and apiVersion, a name, no duplicate), and the fair sharing."""
    by_kind: dict[str, list[Manifest]] = {}
    fair_sharing: FairSharing | None = None
    config_seen: Manifest | None = None
    for i, obj in enumerate(objs):
        api = str(obj.raw.get("apiVersion", ""))
        if obj.kind in CONFIG_KINDS:
            if config_seen is not None:
                raise obj.fail("", "a second Kueue Configuration (the scenario takes one)")
            config_seen = obj
            fair_sharing = kueue_configuration(obj, api)
            continue
        if obj.kind in CORE_KINDS:
            if api != "v1":
                raise obj.fail("apiVersion", f"expected v1, got {api!r}")
        elif obj.kind in KUEUE_KINDS:
            if api not in KUEUE_VERSIONS:
                raise obj.fail("apiVersion", f"expected {KUEUE_VERSIONS[0]}, got {api!r}")
        else:
            raise ScenarioError(
                obj.kind or f"item[{i}]", obj.name, "kind", f"unknown kind {obj.kind!r} (apiVersion {api!r})"
            )
        if not obj.name:
            raise ScenarioError(obj.kind, "", "metadata.name", "required field is missing")
        if problem := dns_subdomain_problem(obj.name):
            raise ScenarioError(obj.kind, obj.name[:80], "metadata.name", problem)
        by_kind.setdefault(obj.kind, []).append(obj)
    for items in by_kind.values():
        seen = set()
        for obj in items:
            ident = (obj.namespace, obj.name)
            if ident in seen:
                raise obj.fail("metadata.name", "duplicate object")
            seen.add(ident)
    return by_kind, fair_sharing


def loads_scenario(text: str, *, source: str = "<text>") -> Scenario:
    """Load a scenario from YAML/JSON text; raises ScenarioError on bad input."""
    objs = [Manifest(doc, i) for i, doc in enumerate(documents(text, source))]
    by_kind, fair_sharing = _by_kind(objs)
    topologies = parse_topologies(by_kind.get("Topology", []))
    flavors = parse_flavors(by_kind.get("ResourceFlavor", []), {t.name for t in topologies})
    checks, check_delay = parse_admission_checks(by_kind.get("AdmissionCheck", []))
    cohorts = parse_cohorts(by_kind.get("Cohort", []), flavors)
    cluster_queues = [parse_cluster_queue(obj, flavors) for obj in by_kind.get("ClusterQueue", [])]
    local_queues = parse_local_queues(by_kind.get("LocalQueue", []))
    namespaces = parse_namespaces(by_kind.get("Namespace", []))
    priority_classes = parse_priority_classes(by_kind.get("WorkloadPriorityClass", []))
    nodes = [parse_node(obj) for obj in by_kind.get("Node", [])]
    priorities = {p.name: p.value for p in priority_classes}
    parsed = [parse_workload(obj, priorities) for obj in by_kind.get("Workload", [])]
    start, initial, later, delays = schedule_workloads(parsed, local_queues, cluster_queues, check_delay)
    state = ClusterState(
        fair_sharing=fair_sharing,
        flavors=tuple(flavors.values()),
        topologies=tuple(topologies),
        cohorts=tuple(cohorts),
        cluster_queues=tuple(cluster_queues),
        local_queues=tuple(local_queues),
        namespaces=tuple(namespaces),
        priority_classes=tuple(priority_classes),
        admission_checks=tuple(checks),
        nodes=tuple(nodes),
        workloads=tuple(initial),
    )
    return Scenario(state=state, start=start, submissions=tuple(later), checks_delay=delays, source=source)
