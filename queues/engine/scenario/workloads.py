"""Workload objects of a scenario: pod sets, priority, status (admission, eviction, checks) and submission times."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, cast

from queues.engine.model import (
    Admission,
    AdmissionCheckRule,
    AdmissionCheckState,
    ClusterQueue,
    Eviction,
    LocalQueue,
    PodSet,
    PodSetAdmission,
    TopologyRequest,
    Workload,
)

from .fields import parse_node_affinity, parse_tolerations, pod_requests
from .manifest import (
    ANN_CHECKS,
    ANN_GATED,
    ANN_NODES,
    ANN_PODS_READY,
    ANN_PREFERRED,
    ANN_REQUIRED,
    ANN_RUNTIME,
    ANN_SUBMIT,
    ANN_UNCONSTRAINED,
    JOB_UID_LABEL,
    Manifest,
    parse_timestamp,
)


def _pod_set(obj: Manifest, ppath: str, ps: Any, names: set[str]) -> PodSet:
    """One entry of ``spec.podSets`` (its name added to ``names``, which must not hold it yet)."""
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
    requests = pod_requests(obj, f"{ppath}.template.spec", pspec)
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
    min_count = ps.get("minCount")
    if min_count is not None and (
        not isinstance(min_count, int) or isinstance(min_count, bool) or not 0 <= min_count <= count_raw
    ):
        # Kueue's webhook: a non-negative count not above the pod set's count.
        raise obj.fail(f"{ppath}.minCount", f"must be an integer from 0 to count ({count_raw}), got {min_count!r}")
    return PodSet(
        name=name,
        count=count_raw,
        requests=requests,
        node_selector={str(k): str(v) for k, v in node_selector.items()},
        node_affinity=parse_node_affinity(obj, f"{ppath}.template.spec", pspec),
        tolerations=parse_tolerations(obj, f"{ppath}.template.spec.tolerations", pspec.get("tolerations")),
        topology=topology,
        min_count=min_count,
    )


def _priority(obj: Manifest, spec: Mapping[str, Any], priorities: Mapping[str, int]) -> tuple[int, str | None]:
    """The workload's priority (``spec.priority``, else its WorkloadPriorityClass's, else 0) and class name."""
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
    return priority, pc_name


def pods_ready_after(obj: Manifest, ann: Mapping[str, str]) -> float | None:
    """``sim.portal/pods-ready-after``: how long after its admission every pod is Ready (``never``: inf)."""
    if ANN_PODS_READY not in ann:
        return None
    raw = ann[ANN_PODS_READY]
    if str(raw).strip().lower() == "never":
        return math.inf
    return obj.duration(f'metadata.annotations["{ANN_PODS_READY}"]', raw)


def reclaimable_pods(obj: Manifest, status: Mapping[str, Any], pod_sets: list[PodSet]) -> dict[str, int]:
    """``status.reclaimablePods`` (Kueue's webhook: a known pod set, a count from 0 to its count)."""
    raw = status.get("reclaimablePods") or []
    if not isinstance(raw, list):
        raise obj.fail("status.reclaimablePods", "must be a list")
    counts = {p.name: p.count for p in pod_sets}
    out: dict[str, int] = {}
    for i, item in enumerate(raw):
        path = f"status.reclaimablePods[{i}]"
        if not isinstance(item, Mapping) or not item.get("name"):
            raise obj.fail(f"{path}.name", "required field is missing")
        name = str(item["name"])
        if name not in counts:
            raise obj.fail(f"{path}.name", f"no pod set named {name!r} (pod sets: {', '.join(counts)})")
        count = item.get("count")
        if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= counts[name]:
            raise obj.fail(f"{path}.count", f"must be an integer from 0 to {counts[name]}, got {count!r}")
        out[name] = count
    return out


def _requeue_state(obj: Manifest, status: Mapping[str, Any]) -> tuple[int, float | None]:
    """``status.requeueState``: PodsReady-timeout requeues so far and the backoff's end (an RFC 3339 time)."""
    raw = status.get("requeueState") or {}
    if not isinstance(raw, Mapping):
        raise obj.fail("status.requeueState", "must be an object")
    count = raw.get("count", 0) or 0
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise obj.fail("status.requeueState.count", f"must be a non-negative integer, got {count!r}")
    at = None
    if raw.get("requeueAt") is not None:
        try:
            at = parse_timestamp(raw["requeueAt"])
        except ValueError as exc:
            raise obj.fail("status.requeueState.requeueAt", str(exc)) from None
    return count, at


def _facts(obj: Manifest, ann: Mapping[str, str]) -> tuple[dict[str, Any], float | None]:
    """Simulation facts (creation time, ``sim.portal/submit-at``, ``checks-ready-after``) and the runtime."""
    created_raw = obj.meta.get("creationTimestamp")
    try:
        created = parse_timestamp(created_raw) if created_raw is not None else None
    except ValueError as exc:
        raise obj.fail("metadata.creationTimestamp", str(exc)) from None
    facts: dict[str, Any] = {"created": created}
    if ANN_SUBMIT in ann:
        facts["submit"] = obj.duration(f'metadata.annotations["{ANN_SUBMIT}"]', ann[ANN_SUBMIT])
    runtime = obj.duration(f'metadata.annotations["{ANN_RUNTIME}"]', ann[ANN_RUNTIME]) if ANN_RUNTIME in ann else None
    if ANN_CHECKS in ann:
        facts["checks"] = obj.duration(f'metadata.annotations["{ANN_CHECKS}"]', ann[ANN_CHECKS])
    return facts, runtime


def _check_states(obj: Manifest, status: Mapping[str, Any]) -> dict[str, AdmissionCheckState]:
    """``status.admissionChecks``: each check's state."""
    checks: dict[str, AdmissionCheckState] = {}
    for i, ac in enumerate(status.get("admissionChecks") or []):
        state = (ac or {}).get("state") or "Pending"
        if state not in ("Pending", "Ready", "Retry", "Rejected"):
            raise obj.fail(f"status.admissionChecks[{i}].state", f"invalid state {state!r}")
        checks[str(ac.get("name"))] = cast(AdmissionCheckState, state)
    return checks


def _admission(
    obj: Manifest, status: Mapping[str, Any], pod_sets: list[PodSet], ann: Mapping[str, str]
) -> tuple[Admission | None, float | None, Eviction | None]:
    """``status.admission`` (nodes from ``sim.portal/nodes``), when quota was reserved, and an eviction under way."""
    conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, Mapping)}
    adm = status.get("admission")
    if not adm:
        return None, None, None
    if not adm.get("clusterQueue"):
        raise obj.fail("status.admission.clusterQueue", "required field is missing")
    by_name = {p.name: p for p in pod_sets}
    assignments = []
    for i, a in enumerate(adm.get("podSetAssignments") or []):
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
    admitted_at = None
    qr = conditions.get("QuotaReserved")
    if qr and qr.get("lastTransitionTime"):
        try:
            admitted_at = parse_timestamp(qr["lastTransitionTime"])
        except ValueError as exc:
            raise obj.fail("status.conditions[QuotaReserved].lastTransitionTime", str(exc)) from None
    eviction = None
    ev = conditions.get("Evicted")
    if ev and str(ev.get("status")) == "True":
        eviction = Eviction(reason=str(ev.get("reason") or "Preempted"), message=str(ev.get("message") or ""))
    return admission, admitted_at, eviction


def parse_workload(obj: Manifest, priorities: Mapping[str, int]) -> tuple[Workload, dict]:
    """One Workload object, and its simulation facts (``created``, ``submit``, ``checks``)."""
    spec = obj.get("spec", required=True, types=(Mapping,))
    if not obj.namespace:
        raise obj.fail("metadata.namespace", "required field is missing")
    queue = obj.get("spec.queueName", required=True)
    podsets_raw = obj.get("spec.podSets", required=True, types=(list,))
    if not podsets_raw:
        raise obj.fail("spec.podSets", "must not be empty")
    names: set[str] = set()
    pod_sets = [_pod_set(obj, f"spec.podSets[{i}]", ps, names) for i, ps in enumerate(podsets_raw)]
    priority, pc_name = _priority(obj, spec, priorities)
    ann = obj.annotations()
    facts, runtime = _facts(obj, ann)
    labels = obj.labels()
    status = obj.get("status", {}) or {}
    checks = _check_states(obj, status)
    admission, admitted_at, eviction = _admission(obj, status, pod_sets, ann)
    created = facts["created"]
    ready_after = pods_ready_after(obj, ann)
    if admission is not None and ready_after is None:
        # Admitted with PodsReady=False (and no sim.portal/pods-ready-after): its pods are not Ready, nor will be.
        cond = next(
            (c for c in status.get("conditions") or [] if isinstance(c, Mapping) and c.get("type") == "PodsReady"),
            None,
        )
        if cond is not None and str(cond.get("status")) == "False":
            ready_after = math.inf
    requeue_count, requeue_at = _requeue_state(obj, status)
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
        reclaimable_pods=reclaimable_pods(obj, status, pod_sets),
        pods_ready_after=ready_after,
        requeue_count=requeue_count,
        requeue_at=requeue_at,
        admission_gated_by=str(ann.get(ANN_GATED, "") or ""),
    )
    return workload, facts


def _spread_nodes(assignments: list[PodSetAdmission], names: list[str]) -> list[PodSetAdmission]:
    """Nodes for the pods of each pod set: one name per pod in order, else the names taken round-robin."""
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


def _start(parsed: list[tuple[Workload, dict]]) -> float:
    """The scenario's start: the latest creation of a workload present from the start, else the earliest one."""
    created = [f["created"] for _, f in parsed if f["created"] is not None]
    present = [f["created"] for _, f in parsed if f["created"] is not None and "submit" not in f]
    if present:
        return max(present)
    if created:
        return min(created)
    return 0.0


def schedule_workloads(
    parsed: list[tuple[Workload, dict]],
    local_queues: list[LocalQueue],
    cluster_queues: list[ClusterQueue],
    check_delay: Mapping[str, float],
) -> tuple[float, list[Workload], list[tuple[float, Workload]], dict[str, float]]:
    """Place the workloads in simulated time: (start, initial workloads, later submissions, admission-check delays)."""
    start = _start(parsed)
    initial: list[Workload] = []
    later: list[tuple[float, Workload]] = []
    delays: dict[str, float] = {}
    lq_to_cq = {(q.namespace, q.name): q.cluster_queue for q in local_queues}
    cq_rules: dict[str, tuple[AdmissionCheckRule, ...]] = {cq.name: cq.admission_checks for cq in cluster_queues}
    for wl, facts in parsed:
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
    later.sort(key=lambda item: (item[0], item[1].key))
    return start, initial, later, delays
