"""Explain pending Kueue Workloads from a file, the way ``kubectl get -o yaml|json`` prints them.

Reads Workloads (a ``List``, multi-document YAML, a JSON array or single objects) and, when present, the objects
that give the pool view: ClusterQueues (quota and Kueue's own reservation figures), LocalQueues (which
ClusterQueue a workload's queue feeds), ResourceFlavors (which nodes make a flavor, and its topology), Nodes
(devices, readiness, taints, cordons) and Pods (requests held on nodes, and the scheduler's "unschedulable"
message for the pods of an admitted workload). Every Workload gets one ``{"name", "code", "message"}`` record,
translated by :mod:`queues.kueue_messages`; text the portal does not recognise is reported as ``unrecognised``
with Kueue's raw message, never dropped.

Pure Python (no Django): ``manage.py explain`` and the tests share it.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kernel import safe_yaml
from kernel.k8s_names import dns_subdomain_problem
from kernel.quantity import MAX_NODE_DEVICE_UNITS, is_device_resource, parse_decimal, parse_quantity
from pools.matching import flavor_matches
from queues import kueue_messages as km

#: Kinds the explainer reads; other kinds in the file are ignored (a cluster dump holds many).
READ_KINDS = ("Workload", "ClusterQueue", "LocalQueue", "ResourceFlavor", "Node", "Pod", "Event")
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
TERMINAL_PHASES = ("Succeeded", "Failed")


class ExplainError(ValueError):
    """The file cannot be explained; the message names the document or object and the field."""


@dataclass
class Explanation:
    """One workload's reading."""

    name: str
    namespace: str
    code: str
    message: str
    state: str = ""
    kueue_message: str = ""
    since: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    #: Kueue's Events about this Workload (core/v1 or events.k8s.io/v1 in the file), each translated.
    events: list[dict[str, str]] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        """The JSON record: name, code, message first; then where it is and Kueue's own words."""
        return {
            "name": self.name,
            "code": self.code,
            "message": self.message,
            "namespace": self.namespace,
            "state": self.state,
            "kueue_message": self.kueue_message,
            "since": self.since,
            "events": self.events,
        }


# --- reading the file --------------------------------------------------------------------------------------------


def load_documents(text: str, *, source: str = "<text>") -> list[Mapping[str, Any]]:
    """Objects of a kubectl dump: JSON object/array/List or (multi-document) YAML; Lists are flattened."""
    stripped = text.lstrip()
    if not stripped:
        raise ExplainError(f"{source}: the file is empty")
    try:
        if stripped.startswith(("{", "[")):
            data = json.loads(text)
            docs = data if isinstance(data, list) else [data]
        else:
            docs = [d for d in safe_yaml.safe_load_all(text) if d is not None]
    except (json.JSONDecodeError, safe_yaml.YAMLError) as exc:
        raise ExplainError(f"{source}: cannot parse as YAML or JSON: {exc}") from None
    except RecursionError:
        raise ExplainError(f"{source}: nested too deeply for a Kubernetes object") from None
    out: list[Mapping[str, Any]] = []
    for i, doc in enumerate(docs):
        where = f"{source}: document[{i}]"
        if not isinstance(doc, Mapping):
            raise ExplainError(f"{where}: expected an object with apiVersion and kind, got {type(doc).__name__}")
        kind = doc.get("kind")
        if not isinstance(kind, str) or not kind:
            raise ExplainError(f"{where}: kind: missing (is this kubectl get -o yaml|json output?)")
        if kind == "List" or (kind.endswith("List") and "items" in doc):
            items = doc.get("items")
            if not isinstance(items, list):
                raise ExplainError(f"{where} ({kind}): items: must be a list")
            for j, item in enumerate(items):
                if not isinstance(item, Mapping) or not isinstance(item.get("kind"), str):
                    raise ExplainError(f"{where} ({kind}): items[{j}]: expected an object with a kind")
                out.append(item)
        else:
            out.append(doc)
    return out


def _meta(obj: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str) or not meta.get("name"):
        raise ExplainError(f"{where}: metadata.name: missing")
    if problem := dns_subdomain_problem(meta["name"]):
        raise ExplainError(f"{where}: metadata.name: {problem}")
    return meta


def _mapping(obj: Mapping[str, Any], path: str, where: str) -> Mapping[str, Any]:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
        if value is None:
            return {}
    if not isinstance(value, Mapping):
        raise ExplainError(f"{where}: {path}: must be an object")
    return value


def _list(obj: Mapping[str, Any], path: str, where: str) -> list:
    parent, _, last = path.rpartition(".")
    holder = _mapping(obj, parent, where) if parent else obj
    value = holder.get(last)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ExplainError(f"{where}: {path}: must be a list")
    return value


def _qty(value: Any, resource: str, where: str) -> int:
    """A quantity; device counts whole (Kubernetes refuses "8.5" or "8500m" GPUs) and at most a node's worth."""
    try:
        amount = parse_quantity(value, resource)
        whole = parse_decimal(value) == amount
    except (ValueError, TypeError):
        raise ExplainError(f"{where}: {resource}: {value!r} is not a Kubernetes quantity") from None
    if is_device_resource(resource) and not whole:
        raise ExplainError(f"{where}: {resource}: {value!r} is not a whole number of devices")
    return amount


def _container_requests(pod_spec: Mapping[str, Any], where: str) -> dict[str, int]:
    """Effective requests of one pod: the sum over containers, at least the largest init container."""
    total: dict[str, int] = defaultdict(int)
    for c in pod_spec.get("containers") or []:
        for res, value in ((c.get("resources") or {}).get("requests") or {}).items():
            total[res] += _qty(value, res, where)
    for c in pod_spec.get("initContainers") or []:
        for res, value in ((c.get("resources") or {}).get("requests") or {}).items():
            total[res] = max(total[res], _qty(value, res, where))
    return dict(total)


# --- the pool view -------------------------------------------------------------------------------------------------


@dataclass
class _Pool:
    """Everything in the file besides the Workloads, indexed."""

    cluster_queues: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    local_queues: dict[tuple[str, str], str] = field(default_factory=dict)
    flavors: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    nodes: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    pods: list[Mapping[str, Any]] = field(default_factory=list)
    events: dict[tuple[str, str], list[Mapping[str, Any]]] = field(default_factory=lambda: defaultdict(list))


def _event_subject(event: Mapping[str, Any]) -> tuple[str, str] | None:
    """The (namespace, name) of the Workload an Event is about (core/v1 ``involvedObject``, events/v1 ``regarding``)."""
    subject = event.get("involvedObject") or event.get("regarding") or {}
    if not isinstance(subject, Mapping) or subject.get("kind") != "Workload":
        return None
    namespace = subject.get("namespace") or (event.get("metadata") or {}).get("namespace", "")
    return str(namespace), str(subject.get("name", ""))


def _event_records(events: Iterable[Mapping[str, Any]], context: km.MessageContext) -> list[dict[str, str]]:
    """Each Event's reason, its code and sentence, and Kueue's raw text (file order)."""
    out = []
    for event in events:
        reason = str(event.get("reason", ""))
        text = str(event.get("message") or event.get("note") or "")
        t = km.translate(text, reason=reason, context=context)
        message = t.message
        if t.code == km.UNRECOGNISED:
            message = f"Unrecognised Kueue message (the portal has no translation yet): {text}"
        out.append(
            {
                "reason": reason,
                "type": str(event.get("type", "")),
                "code": t.code,
                "message": message,
                "kueue_message": text,
            }
        )
    return out


def _node_excluded(node: Mapping[str, Any]) -> bool:
    """NotReady, cordoned or carrying a health taint: the node's devices are excluded for health."""
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return True
    if any((t or {}).get("key") in km.HEALTH_TAINT_KEYS for t in spec.get("taints") or []):
        return True
    ready = next((c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None)
    return ready is not None and ready.get("status") != "True"


def _node_flavors(node: Mapping[str, Any], flavors: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The flavors a node belongs to (Kueue's meaning: a flavor without nodeLabels takes every node)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    wanted = {name: (flavor.get("spec") or {}).get("nodeLabels") or {} for name, flavor in flavors.items()}
    return [name for name, want in wanted.items() if flavor_matches(labels, want)]


def _admitted_use(workloads: Iterable[Mapping[str, Any]]) -> tuple[dict, dict]:
    """What admitted (quota-reserved, unfinished) workloads hold: per (cq, flavor, resource) and per flavor."""
    per_cq: dict[tuple[str, str, str], int] = defaultdict(int)
    per_flavor: dict[tuple[str, str], int] = defaultdict(int)
    for wl in workloads:
        conditions = km.conditions_of(wl)
        if (conditions.get("QuotaReserved") or {}).get("status") != "True":
            continue
        if (conditions.get("Finished") or {}).get("status") == "True":
            continue
        admission = (wl.get("status") or {}).get("admission") or {}
        cq = admission.get("clusterQueue") or ""
        for psa in admission.get("podSetAssignments") or []:
            flavors = psa.get("flavors") or {}
            for res, value in (psa.get("resourceUsage") or {}).items():
                flavor = flavors.get(res)
                if not flavor:
                    continue
                try:
                    n = parse_quantity(value, res)
                except ValueError:
                    continue
                per_cq[(cq, flavor, res)] += n
                per_flavor[(flavor, res)] += n
    return per_cq, per_flavor


def _quota_figures(pool: _Pool, admitted: Mapping[tuple[str, str, str], int]) -> dict:
    """QuotaFigures per (ClusterQueue, flavor, resource), with the cohort's totals."""
    nominal: dict[tuple[str, str, str], int] = {}
    borrowing: dict[tuple[str, str, str], int | None] = {}
    used: dict[tuple[str, str, str], int] = {}
    cohort_of: dict[str, str] = {}
    reclaim_of: dict[str, str] = {}
    for name, cq in pool.cluster_queues.items():
        where = f"ClusterQueue/{name}"
        spec = cq.get("spec") or {}
        reclaim_of[name] = str((spec.get("preemption") or {}).get("reclaimWithinCohort") or "Never")
        if spec.get("cohortName") or spec.get("cohort"):
            cohort_of[name] = str(spec.get("cohortName") or spec.get("cohort"))
        for group in _list(cq, "spec.resourceGroups", where):
            for fq in group.get("flavors") or []:
                for res in fq.get("resources") or []:
                    key = (name, fq.get("name", ""), res.get("name", ""))
                    nominal[key] = _qty(res.get("nominalQuota", 0), key[2], where)
                    limit = res.get("borrowingLimit")
                    borrowing[key] = _qty(limit, key[2], where) if limit is not None else None
        reservation = _list(cq, "status.flavorsReservation", where) or _list(cq, "status.flavorsUsage", where)
        for fr in reservation:
            for res in fr.get("resources") or []:
                key = (name, fr.get("name", ""), res.get("name", ""))
                used[key] = _qty(res.get("total", 0), key[2], where)
        if not reservation:
            for key, n in admitted.items():
                if key[0] == name:
                    used[key] = n
    cap: dict[tuple[str, str, str], int] = defaultdict(int)
    cused: dict[tuple[str, str, str], int] = defaultdict(int)
    for (cq, flavor, res), n in nominal.items():
        if cq in cohort_of:
            cap[(cohort_of[cq], flavor, res)] += n
            cused[(cohort_of[cq], flavor, res)] += used.get((cq, flavor, res), 0)
    out = {}
    for key, n in nominal.items():
        cohort = cohort_of.get(key[0])
        ckey = (cohort or "", key[1], key[2])
        out[key] = km.QuotaFigures(
            nominal=n,
            used=used.get(key, 0),
            borrowing_limit=borrowing.get(key),
            in_cohort=bool(cohort),
            cohort_capacity=cap.get(ckey) if cohort else None,
            cohort_used=cused.get(ckey) if cohort else None,
            cohort=cohort or "",
            reclaim=reclaim_of.get(key[0], ""),
        )
    return out


def _pool_figures(pool: _Pool, admitted_by_flavor: Mapping[tuple[str, str], int]) -> dict:
    """PoolFigures per (flavor, device resource) from Nodes, the Pods bound to them and admitted workloads."""
    held: dict[tuple[str, str], int] = defaultdict(int)
    for pod in pool.pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            continue
        where = f"Pod/{(pod.get('metadata') or {}).get('name', '?')}"
        for res, n in _container_requests(pod.get("spec") or {}, where).items():
            held[(node, res)] += n
    total: dict[tuple[str, str], int] = defaultdict(int)
    excluded: dict[tuple[str, str], int] = defaultdict(int)
    free: dict[tuple[str, str], int] = defaultdict(int)
    best: dict[tuple[str, str], int] = defaultdict(int)
    for name, node in pool.nodes.items():
        where = f"Node/{name}"
        allocatable = _mapping(node, "status.allocatable", where) or _mapping(node, "status.capacity", where)
        is_out = _node_excluded(node)
        for flavor in _node_flavors(node, pool.flavors):
            for res, value in allocatable.items():
                if not is_device_resource(res):
                    continue
                n = _qty(value, res, where)
                if n > MAX_NODE_DEVICE_UNITS:
                    raise ExplainError(f"{where}: {res}: {n} devices, at most {MAX_NODE_DEVICE_UNITS} on a node")
                key = (flavor, res)
                total[key] += n
                if is_out:
                    excluded[key] += n
                    continue
                left = max(n - held.get((name, res), 0), 0)
                free[key] += left
                best[key] = max(best[key], left)
    out = {}
    for key, n in total.items():
        usable = n - excluded[key]
        # admitted workloads whose pods are not in the file still hold their devices somewhere in the flavor
        f = min(free[key], max(usable - admitted_by_flavor.get(key, 0), 0)) if admitted_by_flavor else free[key]
        out[key] = km.PoolFigures(total=n, free=f, health_excluded=excluded[key], max_free_per_node=min(best[key], f))
    return out


def _request(wl: Mapping[str, Any], where: str) -> tuple[dict[str, int], dict[str, int]]:
    """(total request, per-pod request of the first pod set) of a workload."""
    total: dict[str, int] = defaultdict(int)
    first: dict[str, int] = {}
    for i, ps in enumerate(_list(wl, "spec.podSets", where)):
        if not isinstance(ps, Mapping):
            raise ExplainError(f"{where}: spec.podSets[{i}]: expected an object")
        count = ps.get("count", 1)
        if not isinstance(count, int) or count < 0:
            raise ExplainError(f"{where}: spec.podSets[{i}].count: must be a non-negative integer, got {count!r}")
        per_pod = _container_requests(((ps.get("template") or {}).get("spec") or {}), where)
        if i == 0:
            first = per_pod
        for res, n in per_pod.items():
            total[res] += n * count
    return dict(total), first


def _pod_messages(wl: Mapping[str, Any], pods: list[Mapping[str, Any]]) -> list[str]:
    """The scheduler's "unschedulable" texts of the pods of a workload's job."""
    meta = wl.get("metadata") or {}
    owners = {o.get("name") for o in meta.get("ownerReferences") or [] if o.get("name")}
    if not owners:
        return []
    out = []
    for pod in pods:
        pmeta = pod.get("metadata") or {}
        if pmeta.get("namespace", "") != meta.get("namespace", ""):
            continue
        labels = pmeta.get("labels") or {}
        pod_owners = {o.get("name") for o in pmeta.get("ownerReferences") or []}
        if not (owners & pod_owners or owners & {labels.get(k) for k in JOB_NAME_LABELS}):
            continue
        for c in (pod.get("status") or {}).get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("message"):
                out.append(str(c["message"]))
    return out


# --- explaining ---------------------------------------------------------------------------------------------------


def explain_documents(docs: list[Mapping[str, Any]], *, source: str = "<text>") -> list[Explanation]:
    """One explanation per Workload in ``docs``, in file order; raises ExplainError on malformed objects."""
    pool = _Pool()
    workloads: list[tuple[str, Mapping[str, Any]]] = []
    for i, obj in enumerate(docs):
        kind = obj.get("kind")
        if kind not in READ_KINDS:
            continue
        where = f"{kind} at object[{i}]"
        meta = _meta(obj, where)
        name = meta["name"]
        where = f"{kind}/{name}"
        if kind == "Workload":
            if not isinstance(obj.get("status") or {}, Mapping):
                raise ExplainError(f"{where}: status: must be an object")
            conditions = _list(obj, "status.conditions", where)
            if any(not isinstance(c, Mapping) for c in conditions):
                raise ExplainError(f"{where}: status.conditions: every condition must be an object")
            workloads.append((where, obj))
        elif kind == "ClusterQueue":
            pool.cluster_queues[name] = obj
        elif kind == "LocalQueue":
            pool.local_queues[(meta.get("namespace", ""), name)] = str((obj.get("spec") or {}).get("clusterQueue", ""))
        elif kind == "ResourceFlavor":
            pool.flavors[name] = obj
        elif kind == "Node":
            pool.nodes[name] = obj
        elif kind == "Pod":
            pool.pods.append(obj)
        elif kind == "Event" and (subject := _event_subject(obj)) is not None:
            pool.events[subject].append(obj)
    if not workloads:
        kinds = sorted({str(o.get("kind")) for o in docs})
        raise ExplainError(
            f"{source}: no Workload objects (found: {', '.join(kinds) or 'nothing'}); "
            "dump them with kubectl get workloads -A -o yaml"
        )
    admitted_cq, admitted_flavor = _admitted_use(wl for _, wl in workloads)
    quotas = _quota_figures(pool, admitted_cq)
    pool_figures = _pool_figures(pool, admitted_flavor) if pool.nodes and pool.flavors else {}
    topology_flavors: dict[str, list[str]] = defaultdict(list)
    for name, flavor in pool.flavors.items():
        topo = (flavor.get("spec") or {}).get("topologyName")
        if topo:
            topology_flavors[topo].append(name)
    out = []
    for where, wl in workloads:
        meta = wl.get("metadata") or {}
        total, per_pod = _request(wl, where)
        context = km.MessageContext(
            cluster_queue=_cluster_queue_of(wl, pool),
            quotas=quotas,
            pool=pool_figures,
            topology_flavors=dict(topology_flavors),
            request=total,
            per_pod=per_pod,
        )
        verdict = km.workload_verdict(wl, context=context, pod_messages=_pod_messages(wl, pool.pods))
        message = verdict.message
        if verdict.code == km.UNRECOGNISED:
            raw = verdict.kueue_message or verdict.message
            message = f"Unrecognised Kueue message (the portal has no translation yet): {raw}"
        out.append(
            Explanation(
                name=meta["name"],
                namespace=str(meta.get("namespace", "")),
                code=verdict.code,
                message=message,
                state=verdict.state,
                kueue_message=verdict.kueue_message,
                since=verdict.since,
                details=verdict.details,
                events=_event_records(pool.events.get((str(meta.get("namespace", "")), meta["name"]), ()), context),
            )
        )
    return out


def _cluster_queue_of(wl: Mapping[str, Any], pool: _Pool) -> str:
    """The workload's ClusterQueue: from its admission, its LocalQueue, or the only one in the file."""
    admission = (wl.get("status") or {}).get("admission") or {}
    if admission.get("clusterQueue"):
        return str(admission["clusterQueue"])
    meta = wl.get("metadata") or {}
    queue = (wl.get("spec") or {}).get("queueName", "")
    cq = pool.local_queues.get((meta.get("namespace", ""), queue))
    if cq:
        return cq
    if len(pool.cluster_queues) == 1:
        return next(iter(pool.cluster_queues))
    return ""


def explain_text(text: str, *, source: str = "<text>") -> list[Explanation]:
    """Parse and explain a kubectl dump."""
    return explain_documents(load_documents(text, source=source), source=source)


def render_table(explanations: list[Explanation]) -> str:
    """A human-readable listing: one block per workload."""
    lines = []
    for e in explanations:
        where = f"{e.namespace}/{e.name}" if e.namespace else e.name
        lines.append(f"{where}  [{e.code}]  {e.state}")
        lines.append(f"    {e.message}")
        if e.kueue_message and e.kueue_message != e.message and e.code != km.UNRECOGNISED:
            lines.append(f"    Kueue: {e.kueue_message}")
        for ev in e.events:
            lines.append(f"    event {ev['reason']} [{ev['code']}]: {ev['message']}")
    return "\n".join(lines) + "\n"
