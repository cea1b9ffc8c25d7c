"""``load_scenario``: a scenario file (Kubernetes and Kueue objects plus ``sim.portal/*`` facts) as a ``Scenario``."""

from __future__ import annotations

from collections.abc import Container, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from queues.engine.model import ClusterState, Workload

from .kinds import (
    KueueConfig,
    kueue_config_document,
    kueue_settings,
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
from .manifest import (
    CONFIG_KINDS,
    TIMELINE_KIND,
    TIMELINE_VERSION,
    Manifest,
    ScenarioError,
    check_object,
    documents,
)
from .reservations import RESERVATION_KIND, parse_reservations
from .timeline import Known, TimelineEvent, compile_timeline
from .workloads import parse_workload, schedule_workloads


@dataclass(frozen=True, slots=True)
class Scenario:
    """A loaded scenario: the initial state (its ``reservations`` too), later submissions, simulation facts and the
    timeline's events."""

    state: ClusterState
    start: float
    submissions: tuple[tuple[float, Workload], ...] = ()
    checks_delay: Mapping[str, float] = field(default_factory=dict)
    source: str = ""
    timeline: tuple[TimelineEvent, ...] = ()


def load_scenario(path: str | Path) -> Scenario:
    """Load a scenario file (YAML, multi-document, or JSON); raises ScenarioError on bad input."""
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as exc:
        raise ScenarioError("file", str(file), "", f"cannot read: {exc.strerror or exc}") from None
    return loads_scenario(text, source=str(file))


def _by_kind(
    objs: list[Manifest],
) -> tuple[dict[str, list[Manifest]], KueueConfig | None, list[Manifest], list[Manifest]]:
    """The objects by kind (each checked: known kind and apiVersion, a name, no duplicate), the Kueue
    Configuration, the Timeline documents and the Reservation documents (checked when parsed)."""
    by_kind: dict[str, list[Manifest]] = {}
    config: KueueConfig | None = None
    timelines: list[Manifest] = []
    reservations: list[Manifest] = []
    for i, obj in enumerate(objs):
        api = str(obj.raw.get("apiVersion", ""))
        if obj.kind == RESERVATION_KIND:
            reservations.append(obj)
            continue
        if obj.kind == TIMELINE_KIND:
            if api != TIMELINE_VERSION:
                raise obj.fail("apiVersion", f"expected {TIMELINE_VERSION}, got {api!r}")
            timelines.append(obj)
            continue
        if obj.kind in CONFIG_KINDS:
            if config is not None:
                raise obj.fail("", "a second Kueue Configuration (the scenario takes one)")
            config = kueue_config_document(obj, api)
            kueue_settings(config)  # checked now: errors name the field
            continue
        check_object(obj, i)
        by_kind.setdefault(obj.kind, []).append(obj)
    for items in by_kind.values():
        seen = set()
        for obj in items:
            ident = (obj.namespace, obj.name)
            if ident in seen:
                raise obj.fail("metadata.name", "duplicate object")
            seen.add(ident)
    return by_kind, config, timelines, reservations


def policy_state(
    by_kind: Mapping[str, list[Manifest]], config: KueueConfig | None, known: Known
) -> tuple[ClusterState, dict[str, float]]:
    """Every object but the Workloads as the engine's state (no workloads), and the admission checks' delays.

    ``known`` holds the names of flavors and topologies that exist at some time of the scenario (now, or created
    by its timeline): a reference to another name is an input error; one to a name that exists only at another
    time is Kueue's inactive ClusterQueue, which the engine reports.
    """
    topologies = parse_topologies(by_kind.get("Topology", []))
    flavors = parse_flavors(by_kind.get("ResourceFlavor", []), _names(known.topologies, (t.name for t in topologies)))
    flavor_names = _names(known.flavors, flavors)
    checks, check_delay = parse_admission_checks(by_kind.get("AdmissionCheck", []))
    cohorts = parse_cohorts(by_kind.get("Cohort", []), flavor_names)
    cluster_queues = [parse_cluster_queue(obj, flavor_names) for obj in by_kind.get("ClusterQueue", [])]
    fair_sharing, pods_ready = kueue_settings(config)
    state = ClusterState(
        fair_sharing=fair_sharing,
        wait_for_pods_ready=pods_ready,
        flavors=tuple(flavors.values()),
        topologies=tuple(topologies),
        cohorts=tuple(cohorts),
        cluster_queues=tuple(cluster_queues),
        local_queues=tuple(parse_local_queues(by_kind.get("LocalQueue", []))),
        namespaces=tuple(parse_namespaces(by_kind.get("Namespace", []))),
        priority_classes=tuple(parse_priority_classes(by_kind.get("WorkloadPriorityClass", []))),
        admission_checks=tuple(checks),
        nodes=tuple(parse_node(obj) for obj in by_kind.get("Node", [])),
    )
    return state, check_delay


def _names(*groups) -> Container[str]:
    out: set[str] = set()
    for group in groups:
        out.update(group)
    return out


def loads_scenario(text: str, *, source: str = "<text>") -> Scenario:
    """Load a scenario from YAML/JSON text; raises ScenarioError on bad input."""
    objs = [Manifest(doc, i) for i, doc in enumerate(documents(text, source))]
    by_kind, config, timelines, reservation_docs = _by_kind(objs)
    known = Known.of(by_kind, timelines)
    policy, check_delay = policy_state(by_kind, config, known)
    priorities = {p.name: p.value for p in policy.priority_classes}
    parsed = [parse_workload(obj, priorities) for obj in by_kind.get("Workload", [])]
    start, initial, later, delays = schedule_workloads(
        parsed, list(policy.local_queues), list(policy.cluster_queues), check_delay
    )
    events = compile_timeline(timelines, by_kind, config, start=start, known=known, build=policy_state)
    holds = parse_reservations(
        reservation_docs, start=start, cluster_queues=policy.cluster_queues, flavors=known.flavors
    )
    return Scenario(
        state=replace(policy, workloads=tuple(initial), reservations=holds),
        start=start,
        submissions=tuple(later),
        checks_delay=delays,
        source=source,
        timeline=events,
    )
