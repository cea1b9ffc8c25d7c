"""Parsers of the scenario's cluster kinds: Kueue's objects, Nodes, Namespaces and Kueue's Configuration."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from kernel.quantity import MAX_NODE_DEVICE_UNITS, is_device_resource, parse_quantity
from queues.engine.kueue_config import configuration, configuration_from_config_map
from queues.engine.model import (
    AdmissionCheck,
    AdmissionCheckRule,
    BorrowWithinCohort,
    BorrowWithinCohortPolicy,
    ClusterQueue,
    Cohort,
    FairSharing,
    FlavorFungibility,
    FungibilityPreference,
    LocalQueue,
    Namespace,
    Node,
    PreemptionPolicy,
    QueueingStrategy,
    ReclaimWithinCohortPolicy,
    ResourceFlavor,
    StopPolicy,
    Topology,
    WhenCanBorrow,
    WhenCanPreempt,
    WithinClusterQueuePolicy,
    WorkloadPriorityClass,
)

from .fields import degraded_devices, parse_label_selector, parse_resource_groups, parse_taints, parse_tolerations
from .manifest import ANN_DISPLAY, ANN_HEALTH, ANN_READY_AFTER, Manifest


def parse_topologies(objs: list[Manifest]) -> list[Topology]:
    """Topology objects: their levels' node labels, in order."""
    topologies = []
    for obj in objs:
        levels = obj.get("spec.levels", required=True, types=(list,))
        names = []
        for i, lvl in enumerate(levels):
            if not isinstance(lvl, Mapping) or not lvl.get("nodeLabel"):
                raise obj.fail(f"spec.levels[{i}].nodeLabel", "required field is missing")
            names.append(str(lvl["nodeLabel"]))
        topologies.append(Topology(obj.name, tuple(names)))
    return topologies


def parse_flavors(objs: list[Manifest], topo_names: set[str]) -> dict[str, ResourceFlavor]:
    """ResourceFlavor objects by name; a topologyName must name a known Topology."""
    flavors: dict[str, ResourceFlavor] = {}
    for obj in objs:
        topo = obj.get("spec.topologyName")
        if topo is not None and topo not in topo_names:
            raise obj.fail("spec.topologyName", f"Topology {topo!r} not found")
        flavors[obj.name] = ResourceFlavor(
            name=obj.name,
            node_labels=obj.labels("spec.nodeLabels"),
            node_taints=parse_taints(obj, "spec.nodeTaints", obj.get("spec.nodeTaints")),
            tolerations=parse_tolerations(obj, "spec.tolerations", obj.get("spec.tolerations")),
            topology_name=topo,
            display_name=obj.annotations().get(ANN_DISPLAY),
        )
    return flavors


def parse_admission_checks(objs: list[Manifest]) -> tuple[list[AdmissionCheck], dict[str, float]]:
    """AdmissionCheck objects, and each check's ``sim.portal/ready-after`` delay where given."""
    checks = []
    check_delay: dict[str, float] = {}
    for obj in objs:
        active = True
        for cond in obj.get("status.conditions", []) or []:
            if isinstance(cond, Mapping) and cond.get("type") == "Active":
                active = str(cond.get("status")) == "True"
        checks.append(AdmissionCheck(obj.name, str(obj.get("spec.controllerName", "") or ""), active))
        ann = obj.annotations()
        if ANN_READY_AFTER in ann:
            check_delay[obj.name] = obj.duration(f'metadata.annotations["{ANN_READY_AFTER}"]', ann[ANN_READY_AFTER])
    return checks, check_delay


def fair_weight(obj: Manifest) -> float:
    """A Cohort's or ClusterQueue's ``spec.fairSharing.weight`` (a quantity, default 1)."""
    weight = obj.get("spec.fairSharing.weight", 1)
    return float(parse_quantity(weight, "cpu")) / 1000 if weight is not None else 1.0


def parse_cohorts(objs: list[Manifest], flavors: Mapping[str, ResourceFlavor]) -> list[Cohort]:
    """Cohort objects: parent, resource groups and fair-sharing weight."""
    cohorts = []
    for obj in objs:
        cohorts.append(
            Cohort(
                name=obj.name,
                parent=obj.get("spec.parentName"),
                resource_groups=parse_resource_groups(
                    obj, "spec.resourceGroups", obj.get("spec.resourceGroups"), flavors
                ),
                fair_weight=fair_weight(obj),
            )
        )
    return cohorts


def _cq_enums(obj: Manifest, spec: Mapping[str, Any]) -> dict[str, str]:
    """The ClusterQueue's enumerated settings by field path, defaulted as Kueue does, each checked."""
    pre = spec.get("preemption") or {}
    bwc = pre.get("borrowWithinCohort") or {}
    fung = spec.get("flavorFungibility") or {}
    enums = {
        "spec.queueingStrategy": (
            spec.get("queueingStrategy") or "BestEffortFIFO",
            ("BestEffortFIFO", "StrictFIFO"),
        ),
        "spec.stopPolicy": (spec.get("stopPolicy") or "None", ("None", "Hold", "HoldAndDrain")),
        "spec.preemption.withinClusterQueue": (
            pre.get("withinClusterQueue") or "Never",
            ("Never", "LowerPriority", "LowerOrNewerEqualPriority"),
        ),
        "spec.preemption.reclaimWithinCohort": (
            pre.get("reclaimWithinCohort") or "Never",
            ("Never", "LowerPriority", "Any"),
        ),
        "spec.preemption.borrowWithinCohort.policy": (bwc.get("policy") or "Never", ("Never", "LowerPriority")),
        "spec.flavorFungibility.whenCanBorrow": (
            fung.get("whenCanBorrow") or "MayStopSearch",
            ("MayStopSearch", "TryNextFlavor", "Borrow"),
        ),
        "spec.flavorFungibility.whenCanPreempt": (
            fung.get("whenCanPreempt") or "TryNextFlavor",
            ("MayStopSearch", "TryNextFlavor", "Preempt"),
        ),
        "spec.flavorFungibility.preference": (
            fung.get("preference") or "BorrowingOverPreemption",
            ("BorrowingOverPreemption", "PreemptionOverBorrowing"),
        ),
    }
    for path, (value, allowed) in enums.items():
        if value not in allowed:
            raise obj.fail(path, f"invalid value {value!r} (allowed: {', '.join(allowed)})")
    out = {path: value for path, (value, _) in enums.items()}
    if fung.get("preference") and not (
        out["spec.flavorFungibility.whenCanBorrow"] == out["spec.flavorFungibility.whenCanPreempt"] == "TryNextFlavor"
    ):
        # Kueue's validation: a preference only decides when the search goes through every flavor.
        raise obj.fail(
            "spec.flavorFungibility.preference",
            "may be set only when whenCanBorrow and whenCanPreempt are TryNextFlavor",
        )
    return out


def _check_rules(obj: Manifest, spec: Mapping[str, Any]) -> tuple[AdmissionCheckRule, ...]:
    """The ClusterQueue's admission checks: ``admissionChecksStrategy`` rules, then plain ``admissionChecks``."""
    rules = []
    strategy = (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
    for i, rule in enumerate(strategy):
        if not isinstance(rule, Mapping) or not rule.get("name"):
            raise obj.fail(f"spec.admissionChecksStrategy.admissionChecks[{i}].name", "required field is missing")
        rules.append(AdmissionCheckRule(str(rule["name"]), tuple(str(f) for f in rule.get("onFlavors") or ())))
    rules.extend(AdmissionCheckRule(str(name)) for name in spec.get("admissionChecks") or [])
    return tuple(rules)


def parse_cluster_queue(obj: Manifest, flavors: Mapping[str, ResourceFlavor]) -> ClusterQueue:
    """One ClusterQueue object."""
    spec = obj.get("spec", {}, types=(Mapping,)) or {}
    enums = _cq_enums(obj, spec)
    rules = _check_rules(obj, spec)
    threshold = ((spec.get("preemption") or {}).get("borrowWithinCohort") or {}).get("maxPriorityThreshold")
    when_borrow = enums["spec.flavorFungibility.whenCanBorrow"]
    when_preempt = enums["spec.flavorFungibility.whenCanPreempt"]
    return ClusterQueue(
        name=obj.name,
        cohort=spec.get("cohortName") or spec.get("cohort"),
        namespace_selector=parse_label_selector(obj, "spec.namespaceSelector", spec.get("namespaceSelector")),
        queueing_strategy=cast(QueueingStrategy, enums["spec.queueingStrategy"]),
        resource_groups=parse_resource_groups(obj, "spec.resourceGroups", spec.get("resourceGroups"), flavors),
        preemption=PreemptionPolicy(
            within_cluster_queue=cast(WithinClusterQueuePolicy, enums["spec.preemption.withinClusterQueue"]),
            reclaim_within_cohort=cast(ReclaimWithinCohortPolicy, enums["spec.preemption.reclaimWithinCohort"]),
            borrow_within_cohort=BorrowWithinCohort(
                policy=cast(BorrowWithinCohortPolicy, enums["spec.preemption.borrowWithinCohort.policy"]),
                max_priority_threshold=None if threshold is None else int(threshold),
            ),
        ),
        flavor_fungibility=FlavorFungibility(
            when_can_borrow="MayStopSearch" if when_borrow == "Borrow" else cast(WhenCanBorrow, when_borrow),
            when_can_preempt="MayStopSearch" if when_preempt == "Preempt" else cast(WhenCanPreempt, when_preempt),
            preference=cast(FungibilityPreference, enums["spec.flavorFungibility.preference"]),
        ),
        admission_checks=rules,
        stop_policy=cast(StopPolicy, enums["spec.stopPolicy"]),
        fair_weight=fair_weight(obj),
    )


def parse_local_queues(objs: list[Manifest]) -> list[LocalQueue]:
    """LocalQueue objects (namespaced; a stopPolicy is checked)."""
    local_queues = []
    for obj in objs:
        if not obj.namespace:
            raise obj.fail("metadata.namespace", "required field is missing")
        stop = obj.get("spec.stopPolicy", "None") or "None"
        if stop not in ("None", "Hold", "HoldAndDrain"):
            raise obj.fail("spec.stopPolicy", f"invalid value {stop!r}")
        local_queues.append(
            LocalQueue(
                obj.namespace,
                obj.name,
                str(obj.get("spec.clusterQueue", required=True)),
                stop_policy=cast(StopPolicy, stop),
            )
        )
    return local_queues


def parse_priority_classes(objs: list[Manifest]) -> list[WorkloadPriorityClass]:
    """WorkloadPriorityClass objects (an integer value is required)."""
    priority_classes = []
    for obj in objs:
        value = obj.raw.get("value")
        if not isinstance(value, int) or isinstance(value, bool):
            raise obj.fail("value", "required integer field is missing")
        priority_classes.append(WorkloadPriorityClass(obj.name, value, str(obj.raw.get("description") or "")))
    return priority_classes


def parse_namespaces(objs: list[Manifest]) -> list[Namespace]:
    """Namespace objects with their labels."""
    return [Namespace(obj.name, obj.labels()) for obj in objs]


def parse_node(obj: Manifest) -> Node:
    """One Node: capacity, allocatable (capacity when absent), readiness, taints and the portal's health facts."""
    status = obj.get("status", {}) or {}
    capacity = {
        str(r): obj.quantity(f"status.capacity.{r}", v, str(r)) for r, v in (status.get("capacity") or {}).items()
    }
    allocatable = {
        str(r): obj.quantity(f"status.allocatable.{r}", v, str(r))
        for r, v in (status.get("allocatable") or capacity).items()
    }
    for section, amounts in (("capacity", capacity), ("allocatable", allocatable)):
        for resource, amount in amounts.items():
            if is_device_resource(resource) and amount > MAX_NODE_DEVICE_UNITS:
                raise obj.fail(
                    f"status.{section}.{resource}", f"{amount} devices, at most {MAX_NODE_DEVICE_UNITS} on a node"
                )
    ready = True
    for cond in status.get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            ready = str(cond.get("status")) == "True"
    return Node(
        name=obj.name,
        labels=obj.labels(),
        taints=parse_taints(obj, "spec.taints", obj.get("spec.taints")),
        ready=ready,
        unschedulable=bool(obj.get("spec.unschedulable", False)),
        capacity=capacity,
        allocatable=allocatable,
        health_reason=str(obj.annotations().get(ANN_HEALTH, "") or ""),
        degraded_devices=degraded_devices(obj),
    )


def kueue_configuration(obj: Manifest, api: str) -> FairSharing | None:
    """Kueue's manager Configuration (bare, or in its ConfigMap): the fair-sharing setting."""
    if obj.kind == "ConfigMap":
        if api != "v1":
            raise obj.fail("apiVersion", f"expected v1, got {api!r}")
        return configuration_from_config_map(obj.raw, obj.fail)
    return configuration(obj.raw, obj.fail)
