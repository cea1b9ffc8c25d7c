"""Scenario files (``kubectl get -o yaml|json`` output plus ``sim.portal/*`` annotations) and their runner.

``load_scenario`` turns a file into a ``Scenario`` (a ClusterState plus simulation facts); ``run_scenario``
runs it in one of three modes and returns the JSON document of ``manage.py simulate --json``:

* ``settle`` (default): cycles at the start time until nothing changes, evictions completing at once;
* ``once``: exactly one cycle (a preemptor stays pending, its victims are reported ``preempted``);
* ``replay``: event-driven over simulated time until ``until`` seconds (None = until the end).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from kernel.quantity import parse_quantity

from .decisions import QUEUE_STOP_REASONS
from .kueue_config import configuration, configuration_from_config_map
from .model import (
    DEGRADED_DEVICES_LABEL,
    Admission,
    AdmissionCheck,
    AdmissionCheckRule,
    BorrowWithinCohort,
    ClusterQueue,
    ClusterState,
    Cohort,
    Eviction,
    FairSharing,
    FlavorFungibility,
    FlavorQuotas,
    LabelSelector,
    LabelSelectorRequirement,
    LocalQueue,
    Namespace,
    Node,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodSet,
    PodSetAdmission,
    PreemptionPolicy,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Taint,
    Toleration,
    Topology,
    TopologyRequest,
    Workload,
    WorkloadPriorityClass,
)
from .reasons import explain_wl
from .scheduler import ADMITTED, EVICTING, FINISHED, PENDING, RESERVED, Engine
from .simulation import Replay, ReplayResult, primary_resource

KUEUE_GROUP = "kueue.x-k8s.io"
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
ANN_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
ANN_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
ANN_UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"

_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


class ScenarioError(ValueError):
    """A scenario file is invalid; the message names the object (kind/name) and the field path."""

    def __init__(self, kind: str, name: str, path: str, problem: str) -> None:
        self.kind = kind
        self.name = name
        self.path = path
        self.problem = problem
        where = name if kind == "file" else (f"{kind}/{name}" if name else kind)
        super().__init__(f"{where}: {path}: {problem}" if path else f"{where}: {problem}")


def parse_duration(text: str | int | float) -> float:
    """Parse "90s", "1500ms", "10m", "1h30m", "2d" or a plain number of seconds."""
    if isinstance(text, bool):
        raise ValueError(f"invalid duration {text!r}")
    if isinstance(text, int | float):
        if text < 0:
            raise ValueError(f"invalid duration {text!r}: must not be negative")
        return float(text)
    value = str(text).strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if seconds < 0:
            raise ValueError(f"invalid duration {text!r}: must not be negative")
        return seconds
    pos = 0
    total = 0.0
    unit = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
    for match in _DURATION_RE.finditer(value):
        if match.start() != pos:
            break
        total += float(match.group(1)) * unit[match.group(2)]
        pos = match.end()
    if pos != len(value) or not value:
        raise ValueError(f"invalid duration {text!r}: expected e.g. '90s', '1500ms', '10m', '1h30m'")
    return total


def _timestamp(text: Any) -> float:
    if isinstance(text, datetime):
        stamp = text
    else:
        stamp = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    if stamp.tzinfo is None:
        raise ValueError(f"timestamp {text!r} has no timezone")
    return stamp.timestamp()


@dataclass(frozen=True, slots=True)
class Scenario:
    """A loaded scenario: the initial state, later submissions, and simulation facts."""

    state: ClusterState
    start: float
    submissions: tuple[tuple[float, Workload], ...] = ()
    checks_delay: Mapping[str, float] = field(default_factory=dict)
    source: str = ""


# ---------------------------------------------------------------------------------------------- parsing


class _Obj:
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
        """Parse a quantity, reporting errors at ``path``."""
        try:
            return parse_quantity(value, resource)
        except ValueError as exc:
            raise self.fail(path, str(exc)) from None

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


def _documents(text: str, source: str) -> list[Mapping[str, Any]]:
    stripped = text.lstrip()
    try:
        if stripped.startswith(("{", "[")):
            data = json.loads(text)
            docs = data if isinstance(data, list) else [data]
        else:
            docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ScenarioError("file", source, "", f"cannot parse: {exc}") from None
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


def _degraded_devices(obj: _Obj) -> int:
    """The node's degraded-device count from the portal's label (absent: none)."""
    raw = obj.labels().get(DEGRADED_DEVICES_LABEL)
    if raw is None:
        return 0
    if not raw.isdigit():
        raise obj.fail(f"metadata.labels.{DEGRADED_DEVICES_LABEL}", f"must be a count of devices, got {raw!r}")
    return int(raw)


def _taints(obj: _Obj, path: str, value: Any) -> tuple[Taint, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise obj.fail(path, "must be a list")
    out = []
    for i, t in enumerate(value):
        if not isinstance(t, Mapping) or not t.get("key"):
            raise obj.fail(f"{path}[{i}].key", "required field is missing")
        effect = t.get("effect") or ""
        if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise obj.fail(f"{path}[{i}].effect", f"invalid taint effect {effect!r}")
        out.append(Taint(key=str(t["key"]), value=str(t.get("value") or ""), effect=effect))
    return tuple(out)


def _tolerations(obj: _Obj, path: str, value: Any) -> tuple[Toleration, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise obj.fail(path, "must be a list")
    out = []
    for i, t in enumerate(value):
        if not isinstance(t, Mapping):
            raise obj.fail(f"{path}[{i}]", "expected an object")
        op = t.get("operator") or "Equal"
        if op not in ("Equal", "Exists"):
            raise obj.fail(f"{path}[{i}].operator", f"invalid operator {op!r}")
        out.append(
            Toleration(
                key=str(t.get("key") or ""),
                operator=op,
                value=str(t.get("value") or ""),
                effect=str(t.get("effect") or ""),
            )
        )
    return tuple(out)


def _label_selector(obj: _Obj, path: str, value: Any) -> LabelSelector | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise obj.fail(path, "must be a label selector")
    labels = value.get("matchLabels") or {}
    exprs = []
    for i, e in enumerate(value.get("matchExpressions") or []):
        op = e.get("operator") if isinstance(e, Mapping) else None
        if op not in ("In", "NotIn", "Exists", "DoesNotExist") or not e.get("key"):
            raise obj.fail(
                f"{path}.matchExpressions[{i}]", "needs a key and operator In, NotIn, Exists or DoesNotExist"
            )
        exprs.append(LabelSelectorRequirement(str(e["key"]), op, tuple(str(v) for v in e.get("values") or ())))
    return LabelSelector({str(k): str(v) for k, v in labels.items()}, tuple(exprs))


def _resource_groups(
    obj: _Obj, path: str, value: Any, flavors: Mapping[str, ResourceFlavor]
) -> tuple[ResourceGroup, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise obj.fail(path, "must be a list")
    groups = []
    seen_flavors: set[str] = set()
    for gi, g in enumerate(value):
        gpath = f"{path}[{gi}]"
        if not isinstance(g, Mapping):
            raise obj.fail(gpath, "expected an object")
        covered = g.get("coveredResources")
        if not isinstance(covered, list) or not covered:
            raise obj.fail(f"{gpath}.coveredResources", "required field is missing")
        covered_t = tuple(str(r) for r in covered)
        flist = g.get("flavors")
        if not isinstance(flist, list) or not flist:
            raise obj.fail(f"{gpath}.flavors", "required field is missing")
        fqs = []
        for fi, f in enumerate(flist):
            fpath = f"{gpath}.flavors[{fi}]"
            if not isinstance(f, Mapping) or not f.get("name"):
                raise obj.fail(f"{fpath}.name", "required field is missing")
            fname = str(f["name"])
            if fname not in flavors:
                raise obj.fail(f"{fpath}.name", f"ResourceFlavor {fname!r} not found")
            if fname in seen_flavors:
                raise obj.fail(f"{fpath}.name", f"flavor {fname!r} appears in more than one place")
            seen_flavors.add(fname)
            quotas = []
            names = []
            for ri, r in enumerate(f.get("resources") or []):
                rpath = f"{fpath}.resources[{ri}]"
                if not isinstance(r, Mapping) or not r.get("name"):
                    raise obj.fail(f"{rpath}.name", "required field is missing")
                rname = str(r["name"])
                if rname not in covered_t:
                    raise obj.fail(f"{rpath}.name", f"resource {rname!r} is not in coveredResources")
                if "nominalQuota" not in r:
                    raise obj.fail(f"{rpath}.nominalQuota", "required field is missing")
                nominal = obj.quantity(f"{rpath}.nominalQuota", r["nominalQuota"], rname)
                bl = r.get("borrowingLimit")
                ll = r.get("lendingLimit")
                quotas.append(
                    ResourceQuota(
                        name=rname,
                        nominal=nominal,
                        borrowing_limit=None if bl is None else obj.quantity(f"{rpath}.borrowingLimit", bl, rname),
                        lending_limit=None if ll is None else obj.quantity(f"{rpath}.lendingLimit", ll, rname),
                    )
                )
                names.append(rname)
            missing = [r for r in covered_t if r not in names]
            if missing:
                raise obj.fail(f"{fpath}.resources", f"missing quota for covered resource(s) {', '.join(missing)}")
            fqs.append(FlavorQuotas(fname, tuple(quotas)))
        groups.append(ResourceGroup(covered_t, tuple(fqs)))
    return tuple(groups)


def _node_affinity(obj: _Obj, path: str, spec: Mapping[str, Any]) -> tuple[NodeSelectorTerm, ...]:
    affinity = spec.get("affinity") or {}
    required = ((affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")) or {}
    terms = []
    for ti, term in enumerate(required.get("nodeSelectorTerms") or []):
        exprs = []
        for ei, e in enumerate((term or {}).get("matchExpressions") or []):
            op = e.get("operator")
            if op not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt") or not e.get("key"):
                raise obj.fail(
                    f"{path}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
                    f"nodeSelectorTerms[{ti}].matchExpressions[{ei}]",
                    "needs a key and a valid operator",
                )
            exprs.append(NodeSelectorRequirement(str(e["key"]), op, tuple(str(v) for v in e.get("values") or ())))
        terms.append(NodeSelectorTerm(tuple(exprs)))
    return tuple(terms)


def _pod_requests(obj: _Obj, path: str, spec: Mapping[str, Any]) -> dict[str, int]:
    def container_requests(cpath: str, containers: Any) -> list[dict[str, int]]:
        out = []
        if containers is None:
            return out
        if not isinstance(containers, list):
            raise obj.fail(cpath, "must be a list")
        for ci, c in enumerate(containers):
            resources = (c or {}).get("resources") or {}
            requests = dict(resources.get("requests") or {})
            for rname, val in (resources.get("limits") or {}).items():
                requests.setdefault(rname, val)
            parsed = {}
            for rname, val in requests.items():
                section = "requests" if rname in (resources.get("requests") or {}) else "limits"
                parsed[str(rname)] = obj.quantity(f"{cpath}[{ci}].resources.{section}.{rname}", val, str(rname))
            out.append(parsed)
        return out

    main = container_requests(f"{path}.containers", spec.get("containers"))
    if not main:
        raise obj.fail(f"{path}.containers", "required field is missing")
    total: dict[str, int] = {}
    for req in main:
        for r, v in req.items():
            total[r] = total.get(r, 0) + v
    for req in container_requests(f"{path}.initContainers", spec.get("initContainers")):
        for r, v in req.items():
            total[r] = max(total.get(r, 0), v)
    return total


def _workload(obj: _Obj, priorities: Mapping[str, int], start_hint: float | None) -> tuple[Workload, dict]:
    spec = obj.get("spec", required=True, types=(Mapping,))
    if not obj.namespace:
        raise obj.fail("metadata.namespace", "required field is missing")
    queue = obj.get("spec.queueName", required=True)
    podsets_raw = obj.get("spec.podSets", required=True, types=(list,))
    if not podsets_raw:
        raise obj.fail("spec.podSets", "must not be empty")
    pod_sets = []
    names = set()
    for i, ps in enumerate(podsets_raw):
        ppath = f"spec.podSets[{i}]"
        if not isinstance(ps, Mapping):
            raise obj.fail(ppath, "expected an object")
        name = str(ps.get("name") or "main")
        if name in names:
            raise obj.fail(f"{ppath}.name", f"duplicate pod set {name!r}")
        names.add(name)
        count_raw = ps.get("count", 1)
        if not isinstance(count_raw, int) or isinstance(count_raw, bool) or count_raw < 0:
            raise obj.fail(f"{ppath}.count", f"must be a non-negative integer, got {count_raw!r}")
        template = ps.get("template")
        if not isinstance(template, Mapping) or not isinstance(template.get("spec"), Mapping):
            raise obj.fail(f"{ppath}.template.spec", "required field is missing")
        pspec = template["spec"]
        tmeta = template.get("metadata") or {}
        ann = tmeta.get("annotations") or {}
        requests = _pod_requests(obj, f"{ppath}.template.spec", pspec)
        topo_raw = ps.get("topologyRequest") or {}
        required = topo_raw.get("required") or ann.get(ANN_REQUIRED)
        preferred = topo_raw.get("preferred") or ann.get(ANN_PREFERRED)
        unconstrained = bool(topo_raw.get("unconstrained")) or str(ann.get(ANN_UNCONSTRAINED, "")).lower() == "true"
        topology = (
            TopologyRequest(required=required, preferred=preferred, unconstrained=unconstrained)
            if (required or preferred or unconstrained)
            else None
        )
        node_selector = pspec.get("nodeSelector") or {}
        if not isinstance(node_selector, Mapping):
            raise obj.fail(f"{ppath}.template.spec.nodeSelector", "must be a mapping")
        pod_sets.append(
            PodSet(
                name=name,
                count=count_raw,
                requests=requests,
                node_selector={str(k): str(v) for k, v in node_selector.items()},
                node_affinity=_node_affinity(obj, f"{ppath}.template.spec", pspec),
                tolerations=_tolerations(obj, f"{ppath}.template.spec.tolerations", pspec.get("tolerations")),
                topology=topology,
            )
        )
    priority = spec.get("priority")
    ref = spec.get("priorityClassRef") or {}
    pc_name = ref.get("name") if isinstance(ref, Mapping) else None
    pc_name = pc_name or spec.get("priorityClassName")
    if priority is None:
        if pc_name:
            if pc_name not in priorities:
                raise obj.fail("spec.priorityClassRef.name", f"WorkloadPriorityClass {pc_name!r} not found")
            priority = priorities[pc_name]
        else:
            priority = 0
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise obj.fail("spec.priority", f"must be an integer, got {priority!r}")
    ann = obj.annotations()
    created_raw = obj.meta.get("creationTimestamp")
    try:
        created = _timestamp(created_raw) if created_raw is not None else None
    except ValueError as exc:
        raise obj.fail("metadata.creationTimestamp", str(exc)) from None
    facts: dict[str, Any] = {"created": created}
    if ANN_SUBMIT in ann:
        facts["submit"] = obj.duration(f'metadata.annotations["{ANN_SUBMIT}"]', ann[ANN_SUBMIT])
    runtime = obj.duration(f'metadata.annotations["{ANN_RUNTIME}"]', ann[ANN_RUNTIME]) if ANN_RUNTIME in ann else None
    if ANN_CHECKS in ann:
        facts["checks"] = obj.duration(f'metadata.annotations["{ANN_CHECKS}"]', ann[ANN_CHECKS])
    labels = obj.labels()
    status = obj.get("status", {}) or {}
    admission = None
    admitted_at = None
    eviction = None
    checks: dict[str, str] = {}
    for i, ac in enumerate(status.get("admissionChecks") or []):
        state = (ac or {}).get("state") or "Pending"
        if state not in ("Pending", "Ready", "Retry", "Rejected"):
            raise obj.fail(f"status.admissionChecks[{i}].state", f"invalid state {state!r}")
        checks[str(ac.get("name"))] = state
    conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, Mapping)}
    adm = status.get("admission")
    if adm:
        if not adm.get("clusterQueue"):
            raise obj.fail("status.admission.clusterQueue", "required field is missing")
        by_name = {p.name: p for p in pod_sets}
        assignments = []
        psa_raw = adm.get("podSetAssignments") or []
        for i, a in enumerate(psa_raw):
            aname = str((a or {}).get("name") or "main")
            if aname not in by_name:
                raise obj.fail(f"status.admission.podSetAssignments[{i}].name", f"no pod set named {aname!r}")
            count = a.get("count", by_name[aname].count)
            flavors = {str(k): str(v) for k, v in (a.get("flavors") or {}).items()}
            assignments.append(PodSetAdmission(aname, int(count), flavors, ()))
        nodes_ann = ann.get(ANN_NODES)
        if nodes_ann:
            names_list = [n.strip() for n in str(nodes_ann).split(",") if n.strip()]
            assignments = _spread_nodes(assignments, names_list)
        admission = Admission(cluster_queue=str(adm["clusterQueue"]), pod_sets=tuple(assignments))
        qr = conditions.get("QuotaReserved")
        if qr and qr.get("lastTransitionTime"):
            try:
                admitted_at = _timestamp(qr["lastTransitionTime"])
            except ValueError as exc:
                raise obj.fail("status.conditions[QuotaReserved].lastTransitionTime", str(exc)) from None
        ev = conditions.get("Evicted")
        if ev and str(ev.get("status")) == "True":
            eviction = Eviction(reason=str(ev.get("reason") or "Preempted"), message=str(ev.get("message") or ""))
    workload = Workload(
        namespace=obj.namespace,
        name=obj.name,
        queue_name=str(queue),
        pod_sets=tuple(pod_sets),
        priority=priority,
        priority_class=pc_name,
        created_at=created if created is not None else 0.0,
        uid=str(obj.meta.get("uid") or ""),
        job_uid=labels.get(JOB_UID_LABEL, ""),
        active=bool(spec.get("active", True)),
        admission=admission,
        admitted_at=admitted_at,
        admission_checks=checks,
        eviction=eviction,
        runtime=runtime,
        submit_at=facts.get("submit"),
    )
    return workload, facts


def _spread_nodes(assignments: list[PodSetAdmission], names: list[str]) -> list[PodSetAdmission]:
    total = sum(a.count for a in assignments)
    out = []
    if len(names) == total:
        pos = 0
        for a in assignments:
            out.append(replace(a, nodes=tuple(names[pos : pos + a.count])))
            pos += a.count
        return out
    idx = 0
    for a in assignments:
        nodes = []
        for _ in range(a.count):
            nodes.append(names[idx % len(names)])
            idx += 1
        out.append(replace(a, nodes=tuple(nodes)))
    return out


def load_scenario(path: str | Path) -> Scenario:
    """Load a scenario file (YAML, multi-document, or JSON); raises ScenarioError on bad input."""
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as exc:
        raise ScenarioError("file", str(file), "", f"cannot read: {exc.strerror or exc}") from None
    return loads_scenario(text, source=str(file))


def loads_scenario(text: str, *, source: str = "<text>") -> Scenario:
    """Load a scenario from YAML/JSON text; raises ScenarioError on bad input."""
    label = source
    objs = [_Obj(doc, i) for i, doc in enumerate(_documents(text, label))]
    by_kind: dict[str, list[_Obj]] = {}
    fair_sharing: FairSharing | None = None
    config_seen: _Obj | None = None
    for i, obj in enumerate(objs):
        api = str(obj.raw.get("apiVersion", ""))
        if obj.kind in CONFIG_KINDS:
            if config_seen is not None:
                raise obj.fail("", "a second Kueue Configuration (the scenario takes one)")
            config_seen = obj
            fair_sharing = _kueue_configuration(obj, api)
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
        by_kind.setdefault(obj.kind, []).append(obj)
    for items in by_kind.values():
        seen = set()
        for obj in items:
            ident = (obj.namespace, obj.name)
            if ident in seen:
                raise obj.fail("metadata.name", "duplicate object")
            seen.add(ident)

    topologies = []
    for obj in by_kind.get("Topology", []):
        levels = obj.get("spec.levels", required=True, types=(list,))
        names = []
        for i, lvl in enumerate(levels):
            if not isinstance(lvl, Mapping) or not lvl.get("nodeLabel"):
                raise obj.fail(f"spec.levels[{i}].nodeLabel", "required field is missing")
            names.append(str(lvl["nodeLabel"]))
        topologies.append(Topology(obj.name, tuple(names)))
    topo_names = {t.name for t in topologies}

    flavors: dict[str, ResourceFlavor] = {}
    for obj in by_kind.get("ResourceFlavor", []):
        topo = obj.get("spec.topologyName")
        if topo is not None and topo not in topo_names:
            raise obj.fail("spec.topologyName", f"Topology {topo!r} not found")
        flavors[obj.name] = ResourceFlavor(
            name=obj.name,
            node_labels=obj.labels("spec.nodeLabels"),
            node_taints=_taints(obj, "spec.nodeTaints", obj.get("spec.nodeTaints")),
            tolerations=_tolerations(obj, "spec.tolerations", obj.get("spec.tolerations")),
            topology_name=topo,
            display_name=obj.annotations().get(ANN_DISPLAY),
        )

    checks = []
    check_delay: dict[str, float] = {}
    for obj in by_kind.get("AdmissionCheck", []):
        active = True
        for cond in obj.get("status.conditions", []) or []:
            if isinstance(cond, Mapping) and cond.get("type") == "Active":
                active = str(cond.get("status")) == "True"
        checks.append(AdmissionCheck(obj.name, str(obj.get("spec.controllerName", "") or ""), active))
        ann = obj.annotations()
        if ANN_READY_AFTER in ann:
            check_delay[obj.name] = obj.duration(f'metadata.annotations["{ANN_READY_AFTER}"]', ann[ANN_READY_AFTER])

    cohorts = []
    for obj in by_kind.get("Cohort", []):
        weight = obj.get("spec.fairSharing.weight", 1)
        cohorts.append(
            Cohort(
                name=obj.name,
                parent=obj.get("spec.parentName"),
                resource_groups=_resource_groups(obj, "spec.resourceGroups", obj.get("spec.resourceGroups"), flavors),
                fair_weight=float(parse_quantity(weight, "cpu")) / 1000 if weight is not None else 1.0,
            )
        )

    cluster_queues = []
    for obj in by_kind.get("ClusterQueue", []):
        spec = obj.get("spec", {}, types=(Mapping,)) or {}
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
        }
        for path, (value, allowed) in enums.items():
            if value not in allowed:
                raise obj.fail(path, f"invalid value {value!r} (allowed: {', '.join(allowed)})")
        rules = []
        strategy = (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
        for i, rule in enumerate(strategy):
            if not isinstance(rule, Mapping) or not rule.get("name"):
                raise obj.fail(f"spec.admissionChecksStrategy.admissionChecks[{i}].name", "required field is missing")
            rules.append(AdmissionCheckRule(str(rule["name"]), tuple(str(f) for f in rule.get("onFlavors") or ())))
        rules.extend(AdmissionCheckRule(str(name)) for name in spec.get("admissionChecks") or [])
        threshold = bwc.get("maxPriorityThreshold")
        when_borrow = enums["spec.flavorFungibility.whenCanBorrow"][0]
        when_preempt = enums["spec.flavorFungibility.whenCanPreempt"][0]
        cluster_queues.append(
            ClusterQueue(
                name=obj.name,
                cohort=spec.get("cohortName") or spec.get("cohort"),
                namespace_selector=_label_selector(obj, "spec.namespaceSelector", spec.get("namespaceSelector")),
                queueing_strategy=enums["spec.queueingStrategy"][0],
                resource_groups=_resource_groups(obj, "spec.resourceGroups", spec.get("resourceGroups"), flavors),
                preemption=PreemptionPolicy(
                    within_cluster_queue=enums["spec.preemption.withinClusterQueue"][0],
                    reclaim_within_cohort=enums["spec.preemption.reclaimWithinCohort"][0],
                    borrow_within_cohort=BorrowWithinCohort(
                        policy=enums["spec.preemption.borrowWithinCohort.policy"][0],
                        max_priority_threshold=None if threshold is None else int(threshold),
                    ),
                ),
                flavor_fungibility=FlavorFungibility(
                    when_can_borrow="MayStopSearch" if when_borrow == "Borrow" else when_borrow,
                    when_can_preempt="MayStopSearch" if when_preempt == "Preempt" else when_preempt,
                ),
                admission_checks=tuple(rules),
                stop_policy=enums["spec.stopPolicy"][0],
            )
        )

    local_queues = []
    for obj in by_kind.get("LocalQueue", []):
        if not obj.namespace:
            raise obj.fail("metadata.namespace", "required field is missing")
        stop = obj.get("spec.stopPolicy", "None") or "None"
        if stop not in ("None", "Hold", "HoldAndDrain"):
            raise obj.fail("spec.stopPolicy", f"invalid value {stop!r}")
        local_queues.append(
            LocalQueue(obj.namespace, obj.name, str(obj.get("spec.clusterQueue", required=True)), stop_policy=stop)
        )

    namespaces = [Namespace(obj.name, obj.labels()) for obj in by_kind.get("Namespace", [])]

    priority_classes = []
    for obj in by_kind.get("WorkloadPriorityClass", []):
        value = obj.raw.get("value")
        if not isinstance(value, int) or isinstance(value, bool):
            raise obj.fail("value", "required integer field is missing")
        priority_classes.append(WorkloadPriorityClass(obj.name, value, str(obj.raw.get("description") or "")))
    priorities = {p.name: p.value for p in priority_classes}

    nodes = []
    for obj in by_kind.get("Node", []):
        status = obj.get("status", {}) or {}
        capacity = {
            str(r): obj.quantity(f"status.capacity.{r}", v, str(r)) for r, v in (status.get("capacity") or {}).items()
        }
        allocatable = {
            str(r): obj.quantity(f"status.allocatable.{r}", v, str(r))
            for r, v in (status.get("allocatable") or capacity).items()
        }
        ready = True
        for cond in status.get("conditions") or []:
            if isinstance(cond, Mapping) and cond.get("type") == "Ready":
                ready = str(cond.get("status")) == "True"
        nodes.append(
            Node(
                name=obj.name,
                labels=obj.labels(),
                taints=_taints(obj, "spec.taints", obj.get("spec.taints")),
                ready=ready,
                unschedulable=bool(obj.get("spec.unschedulable", False)),
                capacity=capacity,
                allocatable=allocatable,
                health_reason=str(obj.annotations().get(ANN_HEALTH, "") or ""),
                degraded_devices=_degraded_devices(obj),
            )
        )

    parsed = [(obj, *_workload(obj, priorities, None)) for obj in by_kind.get("Workload", [])]
    created = [f["created"] for _, _, f in parsed if f["created"] is not None]
    present = [f["created"] for _, _, f in parsed if f["created"] is not None and "submit" not in f]
    if present:
        start = max(present)
    elif created:
        start = min(created)
    else:
        start = 0.0
    initial: list[Workload] = []
    later: list[tuple[float, Workload]] = []
    delays: dict[str, float] = {}
    lq_to_cq = {(q.namespace, q.name): q.cluster_queue for q in local_queues}
    cq_rules = {cq.name: cq.admission_checks for cq in cluster_queues}
    for _obj, wl, facts in parsed:
        cq_name = (
            wl.admission.cluster_queue if wl.admission is not None else lq_to_cq.get((wl.namespace, wl.queue_name))
        )
        rule_delays = [check_delay[r.name] for r in cq_rules.get(cq_name or "", ()) if r.name in check_delay]
        if "checks" in facts:
            delays[wl.key] = facts["checks"]
        elif rule_delays:
            delays[wl.key] = max(rule_delays)
        if "submit" in facts and wl.admission is None:
            when = start + facts["submit"]
            wl = replace(wl, created_at=when, submit_at=facts["submit"])
            if facts["submit"] > 0:
                later.append((when, wl))
                continue
        elif facts["created"] is None:
            wl = replace(wl, created_at=start)
        if wl.admission is not None and wl.admitted_at is None:
            wl = replace(wl, admitted_at=wl.created_at)
        initial.append(wl)
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
    later.sort(key=lambda item: (item[0], item[1].key))
    return Scenario(state=state, start=start, submissions=tuple(later), checks_delay=delays, source=label)


def _kueue_configuration(obj: _Obj, api: str) -> FairSharing | None:
    """Kueue's manager Configuration (bare, or in its ConfigMap): the fair-sharing setting."""
    if obj.kind == "ConfigMap":
        if api != "v1":
            raise obj.fail("apiVersion", f"expected v1, got {api!r}")
        return configuration_from_config_map(obj.raw, obj.fail)
    return configuration(obj.raw, obj.fail)


# ---------------------------------------------------------------------------------------------- running


def _rel(value: float | None, start: float) -> float | None:
    if value is None:
        return None
    return round(value - start, 3)


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return round(ordered[low] + (ordered[high] - ordered[low]) * (pos - low), 3)


def run_scenario(scenario: Scenario, *, mode: str = "settle", until: float | None = None) -> dict[str, Any]:
    """Run a scenario (``settle``, ``once`` or ``replay``) and return the ``simulate --json`` document."""
    if mode not in ("settle", "once", "replay"):
        raise ValueError(f"unknown mode {mode!r}")
    engine = Engine(scenario.state, scenario.start)
    replay = Replay(engine, start=scenario.start, checks_delay=scenario.checks_delay)
    if mode == "once":
        for stop in engine.drain(scenario.start):
            rec = replay.records[stop.workload]
            rec.stop_eviction, rec.stopped_at = stop, scenario.start
            replay.queues[stop.cluster_queue].drained += int(stop.admitted)
        outcome = engine.cycle(scenario.start)
        result = ReplayResult(replay.records, replay.queues, scenario.start, scenario.start, 1)
        for decision in outcome.admitted:
            rec = result.records[decision.workload]
            rec.admitted_at = rec.first_admitted_at = scenario.start
            rec.admissions += 1
            replay.queues[decision.cluster_queue].admissions += 1
        for pre in outcome.preemptions:
            result.records[pre.victim].preempted_by = pre.preemptor
            replay.queues[pre.victim_cluster_queue].preempted += 1
        window = 0.0
    elif mode == "settle":
        result = replay.run(until=scenario.start)
        window = 0.0
    else:
        for when, wl in scenario.submissions:
            replay.submit_at(wl, when)
        result = replay.run(until=None if until is None else scenario.start + until)
        window = result.end - result.start
    return _document(engine, scenario, result, window)


def _document(engine: Engine, scenario: Scenario, result: ReplayResult, window: float) -> dict[str, Any]:
    start = scenario.start
    rows = []
    waits: list[float] = []
    counts: dict[str, dict[str, int]] = {
        name: {"admitted": 0, "pending": 0, "preempted": 0, "finished": 0, "borrowing": 0} for name in engine.cqs
    }
    for key in sorted(engine.workloads):
        wl = engine.workloads[key]
        rec = result.records.get(key)
        if wl.state == ADMITTED:
            state = "admitted"
        elif wl.state == FINISHED:
            state = "finished"
        elif wl.state == EVICTING:
            state = "evicted" if wl.eviction is not None and wl.eviction.reason in QUEUE_STOP_REASONS else "preempted"
        else:
            state = "pending"
        reason = None
        kueue_message: str | None = None
        if wl.state in (PENDING, RESERVED):
            explanation = explain_wl(engine, wl)
            if explanation.reason is not None:
                reason = {"code": explanation.reason.code, "message": explanation.reason.message}
                kueue_message = explanation.reason.kueue_message
            else:
                reason = {
                    "code": "higher_priority_ahead",
                    "message": "This job fits and is admitted in the next cycle.",
                }
                kueue_message = ""
        elif wl.state == ADMITTED:
            kueue_message = f"Quota reserved in ClusterQueue {wl.cq}"
        elif wl.state == EVICTING and wl.eviction is not None:
            kueue_message = wl.eviction.message
        if wl.state in (ADMITTED, RESERVED, EVICTING):
            pod_sets = [
                {"name": a.name, "count": a.count, "flavors": dict(sorted(a.flavors.items())), "nodes": list(a.nodes)}
                for a in wl.assignment
            ]
        else:
            pod_sets = [{"name": ps.name, "count": ps.count, "flavors": {}, "nodes": []} for ps in wl.pod_sets]
        submitted = wl.spec.created_at
        admitted_at = rec.admitted_at if rec is not None and rec.admitted_at is not None else None
        if wl.state in (ADMITTED, EVICTING) and admitted_at is None:
            admitted_at = wl.admitted_at
        if wl.state in (PENDING, RESERVED):
            admitted_at = None
        if rec is not None and rec.first_admitted_at is not None:
            waits.append(rec.first_admitted_at - submitted)
        preempted_by = wl.preempted_by or (rec.preempted_by if rec is not None else None)
        row = {
            "name": key,
            "clusterQueue": wl.cq,
            "state": state,
            "podSets": pod_sets,
            "borrowing": bool(wl.borrowing) if wl.state in (ADMITTED, RESERVED, EVICTING) else False,
            "reason": reason,
            "kueueMessage": kueue_message,
            "preemptedBy": preempted_by,
            "submittedAt": _rel(submitted, start),
            "admittedAt": _rel(admitted_at, start),
            "finishedAt": _rel(rec.finished_at if rec is not None else None, start),
        }
        if rec is not None and rec.stop_eviction is not None:
            # Only on workloads a stopped queue took quota from, so other documents keep their shape.
            row["stopEviction"] = {
                "reason": rec.stop_eviction.reason,
                "message": rec.stop_eviction.message,
                "admitted": rec.stop_eviction.admitted,
                "at": _rel(rec.stopped_at, start),
            }
        rows.append(row)
        if wl.cq in counts:
            c = counts[wl.cq]
            if wl.state == ADMITTED:
                c["admitted"] += 1
                if wl.borrowing:
                    c["borrowing"] += 1
            elif wl.state in (PENDING, RESERVED):
                c["pending"] += 1
            elif wl.state == FINISHED:
                c["finished"] += 1
    queues: dict[str, Any] = {}
    for name in sorted(engine.cqs):
        stats = result.queues[name]
        resource, nominal = primary_resource(engine, name)
        if nominal <= 0:
            utilization = None
        elif window > 0:
            utilization = round(stats.integral / (nominal * window), 4)
        else:
            usage = sum(v for (f, r), v in engine.cqs[name].node.usage.items() if r == resource)
            utilization = round(usage / nominal, 4)
        c = counts[name]
        queues[name] = {
            "utilization": utilization,
            "admitted": c["admitted"],
            "pending": c["pending"],
            "borrowing": c["borrowing"],
            "finished": c["finished"],
            "preempted": stats.preempted,
            "admissions": stats.admissions,
            "resource": resource,
            "nominal": nominal,
        }
        if stats.drained:
            queues[name]["evicted"] = stats.drained
    summary: dict[str, Any] = {
        "clusterQueues": queues,
        "waitSeconds": {"p50": _percentile(waits, 0.5), "p90": _percentile(waits, 0.9)},
    }
    if engine.fair is not None:
        # Shown only with fair sharing on, so documents of clusters without it keep their shape.
        queue_shares, cohort_shares = engine.weighted_shares()
        for name, value in queue_shares.items():
            queues[name]["weightedShare"] = value
        summary["fairSharing"] = {"preemptionStrategies": list(engine.fair.preemption_strategies)}
        summary["cohorts"] = {name: {"weightedShare": value} for name, value in cohort_shares.items()}
    return {"workloads": rows, "summary": summary}


def render_table(document: Mapping[str, Any]) -> str:
    """A readable text table of a ``run_scenario`` document."""
    headers = ["WORKLOAD", "QUEUE", "STATE", "FLAVORS", "NODES", "REASON"]
    rows = []
    for w in document["workloads"]:
        flavors = ",".join(sorted({f for ps in w["podSets"] for f in ps["flavors"].values()})) or "-"
        nodes = ",".join(sorted({n for ps in w["podSets"] for n in ps["nodes"]})) or "-"
        reason = (
            w["reason"]["code"]
            if w["reason"]
            else ("preempted by " + w["preemptedBy"] if w["preemptedBy"] and w["state"] == "preempted" else "-")
        )
        stop = w.get("stopEviction")
        if stop and stop["admitted"]:
            reason = f"{reason} (evicted: {stop['reason']})" if w["reason"] else f"evicted: {stop['reason']}"
        rows.append([w["name"], w["clusterQueue"] or "-", w["state"], flavors, nodes, reason])
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in [headers, *rows]]
    for w in document["workloads"]:
        if w["reason"]:
            lines.append("")
            lines.append(f"{w['name']}: [{w['reason']['code']}] {w['reason']['message']}")
            if w["kueueMessage"]:
                lines.append(f"  kueue: {w['kueueMessage']}")
    lines.append("")
    lines.append("QUEUE  UTILIZATION  ADMITTED  PENDING")
    for name, q in document["summary"]["clusterQueues"].items():
        util = "-" if q["utilization"] is None else f"{q['utilization'] * 100:.1f}%"
        share = f"  weightedShare={q['weightedShare']}" if "weightedShare" in q else ""
        lines.append(f"{name}  {util}  {q['admitted']}  {q['pending']}{share}")
    wait = document["summary"]["waitSeconds"]
    p50 = "-" if wait["p50"] is None else f"{wait['p50']}s"
    p90 = "-" if wait["p90"] is None else f"{wait['p90']}s"
    lines.append(f"wait p50={p50} p90={p90}")
    return "\n".join(lines)


def iter_kinds() -> Iterable[str]:
    """The kinds a scenario may contain."""
    return sorted(CORE_KINDS | KUEUE_KINDS | CONFIG_KINDS)
