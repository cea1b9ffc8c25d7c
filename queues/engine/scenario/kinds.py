"""Parsers of the scenario's cluster kinds: Kueue's objects, Nodes, Namespaces and Kueue's Configuration."""

from __future__ import annotations

import re
from collections.abc import Container, Mapping
from dataclasses import dataclass
from typing import Any, cast

from kernel.quantity import MAX_NODE_DEVICE_UNITS, is_device_resource, parse_quantity
from queues.engine.kueue_config import (
    CONFIG_MAP_KEY,
    config_map_configuration,
    configuration,
    wait_for_pods_ready,
)
from queues.engine.model import (
    NODE_HEALTH_CONDITION_TYPES,
    NODE_REPORTS,
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
    WaitForPodsReady,
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


def parse_flavors(objs: list[Manifest], topo_names: Container[str]) -> dict[str, ResourceFlavor]:
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


def parse_cohorts(objs: list[Manifest], flavors: Container[str]) -> list[Cohort]:
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


def parse_cluster_queue(obj: Manifest, flavors: Container[str]) -> ClusterQueue:
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


NVIDIA_GPU = "nvidia.com/gpu"
NVIDIA_GPU_SHARED = "nvidia.com/gpu.shared"


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
    dropped = _count_dropped_gpus(obj, capacity, allocatable)
    ready = True
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, Mapping)]
    for cond in conditions:
        if cond.get("type") == "Ready":
            ready = str(cond.get("status")) == "True"
    health_reason = str(obj.annotations().get(ANN_HEALTH, "") or "")
    gap_by = ""
    reported = node_reported_gpus(conditions, capacity.get(NVIDIA_GPU, 0))
    if reported:
        # As the kube sync reads NVSentinel's conditions: the GPUs they name are out for health, by the node's own
        # reports (whatever the device plugin still counts as allocatable).
        allocatable[NVIDIA_GPU] = min(allocatable.get(NVIDIA_GPU, 0), capacity[NVIDIA_GPU] - len(reported))
        gap_by = NODE_REPORTS
        notes = [f"{device}: node condition {text}" for device, text in reported.items()]
        health_reason = health_reason or f"{len(reported)} device(s) excluded for health: {'; '.join(notes[:4])}"
    health_reason = health_reason or dropped
    return Node(
        name=obj.name,
        labels=obj.labels(),
        taints=parse_taints(obj, "spec.taints", obj.get("spec.taints")),
        ready=ready,
        unschedulable=bool(obj.get("spec.unschedulable", False)),
        capacity=capacity,
        allocatable=allocatable,
        health_reason=health_reason,
        degraded_devices=degraded_devices(obj),
        health_gap_by=gap_by,
    )


#: GPU Feature Discovery's count of the node's physical NVIDIA cards, and its sharing labels.
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
_SHARING_ON = ("time-slicing", "mps")


def _label_int(obj: Manifest, key: str) -> int | None:
    """An integer label of at most ``MAX_NODE_DEVICE_UNITS``, None when absent; anything else is an error."""
    raw = obj.labels().get(key)
    if raw is None or raw == "":
        return None
    field = f'metadata.labels["{key}"]'
    try:
        number = int(raw)
    except ValueError:
        raise obj.fail(field, f"not an integer: {raw!r}") from None
    if not 0 <= number <= MAX_NODE_DEVICE_UNITS:
        raise obj.fail(field, f"{number} is not between 0 and {MAX_NODE_DEVICE_UNITS}")
    return number


def _count_dropped_gpus(obj: Manifest, capacity: dict[str, int], allocatable: dict[str, int]) -> str:
    """As the kube sync counts the cards: units the device plugin dropped from capacity itself (it marked them
    unhealthy, then restarted) are still there per ``nvidia.com/gpu.count``, out for health. Raises ``capacity``
    to that count and says which units are out ("" when none is)."""
    counted = _expected_gpus(obj, capacity)
    if counted is None:
        return ""
    resource, expected = counted
    reported, capacity[resource] = capacity.get(resource, 0), expected
    allocatable.setdefault(resource, 0)
    missing = expected - reported
    names = ""
    if resource == NVIDIA_GPU and missing <= 4:
        names = ", ".join(f"gpu-{i}" for i in range(reported, expected)) + ": "
    label = obj.labels()[GPU_COUNT_LABEL]
    return (
        f"{missing} device(s) excluded for health: {names}node capacity {reported} < {expected} expected from "
        f"{GPU_COUNT_LABEL}={label} (device plugin dropped devices it marked unhealthy)"
    )


def _expected_gpus(obj: Manifest, capacity: Mapping[str, int]) -> tuple[str, int] | None:
    """The NVIDIA GPU resource and the units the node has of it per its ``nvidia.com/gpu.count`` label, when that
    is more than its capacity says (the device plugin dropped units it marked unhealthy), else None. As the kube
    sync's inventory: only for whole cards (or time-sliced replicas of them) advertised as one resource, not MIG."""
    labels = obj.labels()
    count = _label_int(obj, GPU_COUNT_LABEL)
    if not count:
        return None
    nvidia = [r for r, n in capacity.items() if n > 0 and r.startswith("nvidia.com/")]
    if not nvidia and NVIDIA_GPU in capacity:
        nvidia = [NVIDIA_GPU]  # cards per gpu.count but the plugin advertises none: every one is out
    if len(nvidia) != 1 or nvidia[0] not in (NVIDIA_GPU, NVIDIA_GPU_SHARED):
        return None
    if "-MIG-" in labels.get("nvidia.com/gpu.product", "") or labels.get("nvidia.com/mig.config", "").startswith(
        "all-"
    ):
        return None  # MIG strategy single: nvidia.com/gpu counts MIG devices, not cards
    (resource,) = nvidia
    replicas = max(_label_int(obj, "nvidia.com/gpu.replicas") or 1, 1)
    shared = (
        resource == NVIDIA_GPU_SHARED or replicas > 1 or labels.get("nvidia.com/gpu.sharing-strategy") in _SHARING_ON
    )
    expected = count * (replicas if shared else 1)
    return (resource, expected) if expected > capacity.get(resource, 0) else None


#: NVSentinel's way of naming a GPU in a condition message: ``ErrorCode:79 GPU:3 …``.
_GPU_INDEX = re.compile(r"\bGPU:(\d+)\b")
_CAUSE_MAX = 160


def _condition_text(condition: Mapping[str, Any]) -> str:
    """``GpuXidError=True: ErrorCode:79 GPU:3 Recommended Action=RESTART_BM`` (the message, else the reason)."""
    said = str(condition.get("message") or condition.get("reason") or "").strip().rstrip(";")
    head = f"{condition.get('type')}=True"
    if len(said) > _CAUSE_MAX:
        said = said[: _CAUSE_MAX - 1] + "…"
    return f"{head}: {said}" if said else head


def node_reported_gpus(conditions: list[Mapping[str, Any]], gpus: int) -> dict[str, str]:
    """The node's NVIDIA GPUs its True health conditions report broken, by device name (``gpu-3``), with the
    condition: a condition naming GPUs (``GPU:<index>``) concerns those, one naming none every GPU of the node."""
    failing = [c for c in conditions if c.get("type") in NODE_HEALTH_CONDITION_TYPES and str(c.get("status")) == "True"]
    out: dict[str, list[str]] = {}
    for cond in failing:
        indexes = [int(i) for i in _GPU_INDEX.findall(str(cond.get("message", ""))) if int(i) < gpus]
        for index in indexes or range(gpus):
            out.setdefault(f"gpu-{index}", []).append(_condition_text(cond))
    return {device: "; ".join(texts) for device, texts in sorted(out.items(), key=lambda kv: int(kv[0][4:]))}


@dataclass(frozen=True)
class KueueConfig:
    """Kueue's manager Configuration as a scenario carries it: the document, and the Configuration object in it
    (the document itself, or the YAML under the ConfigMap's ``data["controller_manager_config.yaml"]``)."""

    obj: Manifest
    config: Mapping[str, Any]

    def fail(self, path: str, problem: str) -> Exception:
        """A ScenarioError at ``path`` of the Configuration (inside the ConfigMap's data when it is one)."""
        inner = f'data["{CONFIG_MAP_KEY}"].{path}' if self.obj.kind == "ConfigMap" else path
        return self.obj.fail(inner, problem)


def kueue_config_document(obj: Manifest, api: str) -> KueueConfig:
    """Kueue's manager Configuration (bare, or in its ConfigMap), checked: a ConfigMap must be v1."""
    if obj.kind == "ConfigMap":
        if api != "v1":
            raise obj.fail("apiVersion", f"expected v1, got {api!r}")
        return KueueConfig(obj, config_map_configuration(obj.raw, obj.fail))
    return KueueConfig(obj, obj.raw)


def kueue_settings(doc: KueueConfig | None) -> tuple[FairSharing | None, WaitForPodsReady | None]:
    """The Configuration's fair sharing (None: off) and waitForPodsReady (None: off; without a Configuration,
    Kueue's defaults: fair sharing off, waitForPodsReady on)."""
    if doc is None:
        return None, wait_for_pods_ready(None, _never)
    return configuration(doc.config, doc.fail), wait_for_pods_ready(doc.config, doc.fail)


def _never(path: str, problem: str) -> Exception:
    raise AssertionError(f"{path}: {problem}")
