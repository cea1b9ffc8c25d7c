"""The admission engine: Kueue's queues, flavor assignment, preemption and scheduling cycle, plus placement.

``Engine`` holds a mutable working copy of a ``ClusterState`` with incremental usage accounting (per
ClusterQueue and cohort, per node) so that cycles, replays and diagnoses are cheap. Nothing here reads
the wall clock; iteration orders are fixed (sorted names, priority/time/key orderings), so the same
input always yields the same decisions.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from itertools import count as _counter

from . import messages as msg
from .decisions import QUEUE_STOP_REASONS, AdmissionDecision, PodSetAssignment, Preemption, QueueStopEviction
from .fair_share import share
from .fair_sharing import fair_targets, tournament
from .labels import NAMESPACE_NAME_LABEL, first_untolerated, node_affinity_matches, selector_matches, taint_go_struct
from .model import (
    Admission,
    AdmissionCheck,
    ClusterQueue,
    ClusterState,
    Eviction,
    FlavorResource,
    LocalQueue,
    Node,
    PodSet,
    PodSetAdmission,
    ResourceFlavor,
    ResourceQuota,
    Topology,
    Workload,
)
from .placement import NodePool, PlacementResult, PodSetRequest
from .quota import QuotaNode, QuotaTree

# Granular flavor modes (Kueue's preemptionMode), ordered worst to best.
NOFIT, NO_CANDIDATES, PREEMPT, RECLAIM, FIT = 0, 1, 2, 3, 4
# Pod-set level modes (Kueue's FlavorAssignmentMode).
PS_NOFIT, PS_PREEMPT, PS_FIT = 0, 1, 3

# Kueue's per-flavor no-fit reasons and their severity.
NO_MATCHING_FLAVOR = "NoMatchingFlavor"
EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"
WAITING_FOR_QUOTA = "WaitingForQuota"
TOPOLOGY_PLACEMENT_FAILED = "TopologyPlacementFailed"
SEVERITY = {"": 0, TOPOLOGY_PLACEMENT_FAILED: 1, WAITING_FOR_QUOTA: 2, EXCEEDS_MAX_QUOTA: 3, NO_MATCHING_FLAVOR: 4}

# Preemption candidate variants (Kueue's classical preemption).
V_NEVER, V_WITHIN_CQ, V_HIER_RECLAIM, V_RECLAIM_NO_BORROW, V_RECLAIM_WHILE_BORROW = range(5)
VARIANT_REASON = {
    V_WITHIN_CQ: "InClusterQueue",
    V_HIER_RECLAIM: "InCohortReclamation",
    V_RECLAIM_NO_BORROW: "InCohortReclamation",
    V_RECLAIM_WHILE_BORROW: "InCohortReclaimWhileBorrowing",
}

PENDING, RESERVED, ADMITTED, EVICTING, FINISHED = "pending", "reserved", "admitted", "evicting", "finished"


# ---------------------------------------------------------------------------------------------- internals


class _PodSetInfo:
    __slots__ = ("count", "name", "per_pod", "spec", "total")

    def __init__(self, spec: PodSet) -> None:
        self.spec = spec
        self.name = spec.name
        self.count = spec.count
        self.per_pod = {r: v for r, v in sorted(spec.requests.items()) if v > 0}
        self.total = {r: v * spec.count for r, v in self.per_pod.items()}


@dataclass(slots=True)
class _PSA:
    """A pod set's flavor assignment (internal)."""

    name: str
    count: int
    flavors: dict[str, str] = field(default_factory=dict)
    modes: dict[str, int] = field(default_factory=dict)
    reasons: list[str | tuple] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    failed: bool = False
    no_fit_reason: str = ""
    group_attempts: list[list[dict]] = field(default_factory=list)
    placement: PlacementResult | None = None
    placement_visible: bool = False
    nodes: list[str] = field(default_factory=list)

    @property
    def mode(self) -> int:
        """Kueue's representative mode of the pod set."""
        if self.failed:
            return PS_NOFIT
        if not self.reasons and all(m == PS_FIT for m in self.modes.values()):
            return PS_FIT
        if not self.flavors:
            return PS_NOFIT
        return min(self.modes.values(), default=PS_FIT)


@dataclass(slots=True)
class _Assignment:
    pod_sets: list[_PSA]
    usage: dict[FlavorResource, int]
    borrow: int = 0
    needs_placement_preemption: bool = False

    @property
    def mode(self) -> int:
        """The worst pod-set mode."""
        if not self.pod_sets:
            return PS_NOFIT
        return min(ps.mode for ps in self.pod_sets)

    def message(self) -> str:
        """Kueue's QuotaReserved=False message for this assignment."""
        parts = []
        for ps in self.pod_sets:
            visible = [_fmt(r) for r in ps.reasons if r]
            if ps.mode == PS_FIT or not visible:
                continue
            parts.append(msg.podset_failed(ps.name, visible))
        return "; ".join(parts)


def _fmt(reason: str | tuple) -> str:
    """Format a lazily stored per-flavor reason."""
    if isinstance(reason, str):
        return reason
    if reason[0] == "iuq":
        return msg.insufficient_unused_quota(reason[1], reason[2], reason[3])
    return msg.max_capacity_exceeded(reason[1], reason[2], reason[3], reason[4], reason[5])


class _Wl:
    __slots__ = (
        "admitted_at",
        "assignment",
        "borrowing",
        "cq",
        "created",
        "evicted_at",
        "eviction",
        "group",
        "key",
        "lq",
        "note",
        "pending_checks",
        "pod_sets",
        "pods",
        "preempted_by",
        "priority",
        "seq",
        "shape",
        "spec",
        "state",
        "ts",
        "usage",
    )

    def __init__(self, spec: Workload, seq: int) -> None:
        self.spec = spec
        self.key = spec.key
        self.seq = seq
        self.priority = spec.priority
        self.created = spec.created_at
        self.ts = spec.requeued_at if spec.requeued_at is not None else spec.created_at
        self.pod_sets = [_PodSetInfo(ps) for ps in spec.pod_sets]
        self.state = PENDING
        self.cq: str | None = None
        self.lq: LocalQueue | None = None
        self.assignment: list[PodSetAssignment] = []
        self.usage: dict[FlavorResource, int] = {}
        self.pods: list[tuple[str, dict[str, int]]] = []
        self.admitted_at: float | None = spec.admitted_at
        self.borrowing = False
        self.pending_checks: tuple[str, ...] = ()
        self.eviction: Eviction | None = spec.eviction
        self.evicted_at: float | None = spec.requeued_at
        self.preempted_by: str | None = None
        self.group: _Group | None = None
        self.shape: tuple = ()
        self.note: dict | None = None

    def sort_key(self) -> tuple:
        """Queue order: priority, then queue time, then key."""
        return (-self.priority, self.ts, self.key)


class _Group:
    """Pending workloads of one ClusterQueue with the same shape (requests, priority, constraints)."""

    __slots__ = ("active", "cq", "items", "shape", "version")

    def __init__(self, cq: _CQ, shape: tuple) -> None:
        self.cq = cq
        self.shape = shape
        self.items: list[tuple[int, float, str, _Wl]] = []
        self.active = True
        self.version = 0


@dataclass(slots=True)
class _RG:
    covered: tuple[str, ...]
    flavors: tuple[str, ...]


class _CQ:
    __slots__ = (
        "admitted",
        "blocked",
        "checks",
        "cohort_cqs",
        "groups",
        "heap",
        "inactive",
        "name",
        "node",
        "parked",
        "path",
        "preempts",
        "quotas",
        "rg_of",
        "rgs",
        "spec",
        "stopped",
        "strict",
        "tas_only",
    )

    def __init__(self, spec: ClusterQueue, node: QuotaNode) -> None:
        self.spec = spec
        self.name = spec.name
        self.node = node
        self.rgs = [_RG(tuple(g.covered_resources), tuple(f.name for f in g.flavors)) for g in spec.resource_groups]
        self.rg_of: dict[str, int] = {}
        for idx, group in enumerate(spec.resource_groups):
            for res in group.covered_resources:
                self.rg_of.setdefault(res, idx)
        self.quotas: dict[FlavorResource, ResourceQuota] = {
            (f.name, r.name): r for g in spec.resource_groups for f in g.flavors for r in f.resources
        }
        self.strict = spec.queueing_strategy == "StrictFIFO"
        p = spec.preemption
        self.preempts = (
            p.within_cluster_queue != "Never"
            or p.reclaim_within_cohort != "Never"
            or p.borrow_within_cohort.policy != "Never"
        )
        self.checks = spec.admission_checks
        self.tas_only = False
        self.inactive = ""
        self.stopped = spec.stop_policy in ("Hold", "HoldAndDrain")
        self.path = QuotaTree.path(node)
        self.groups: dict[tuple, _Group] = {}
        self.heap: list[tuple] = []
        self.parked: list[_Group] = []
        self.blocked = False
        self.admitted: dict[str, _Wl] = {}
        self.cohort_cqs: list[_CQ] = []


@dataclass(slots=True)
class _Entry:
    wl: _Wl
    cq: _CQ
    assignment: _Assignment
    targets: list[tuple[_Wl, str]]
    nominated: bool


@dataclass(slots=True)
class CycleOutcome:
    """What one cycle did (engine-internal form; the public API converts it)."""

    admitted: list[AdmissionDecision] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    evaluated: list[str] = field(default_factory=list)
    parked: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """True when the cycle admitted or preempted anything."""
        return bool(self.admitted or self.preemptions)


# ---------------------------------------------------------------------------------------------- engine


class Engine:
    """A working copy of a cluster state that runs Kueue scheduling cycles."""

    def __init__(self, state: ClusterState, now: float = 0.0) -> None:
        self.now = now
        self.flavors: dict[str, ResourceFlavor] = {f.name: f for f in state.flavors}
        self.topologies: dict[str, Topology] = {t.name: t for t in state.topologies}
        self.admission_checks: dict[str, AdmissionCheck] = {a.name: a for a in state.admission_checks}
        self.namespaces: dict[str, dict[str, str]] = {}
        for ns in state.namespaces:
            labels = dict(ns.labels)
            labels.setdefault(NAMESPACE_NAME_LABEL, ns.name)
            self.namespaces[ns.name] = labels
        self.local_queues: dict[tuple[str, str], LocalQueue] = {(q.namespace, q.name): q for q in state.local_queues}
        #: Whether any queue has a stopPolicy (only then can ``drain`` find anything to do).
        self.has_stopped_queues = any(q.stop_policy != "None" for q in state.local_queues) or any(
            c.stop_policy != "None" for c in state.cluster_queues
        )
        self.priority_classes = {p.name: p.value for p in state.priority_classes}
        self.quota = QuotaTree(state.cluster_queues, state.cohorts)
        self.fair = state.fair_sharing
        self.pool = NodePool(state.nodes)
        self.cqs: dict[str, _CQ] = {}
        for spec in sorted(state.cluster_queues, key=lambda c: c.name):
            self.cqs[spec.name] = self._compile_cq(spec)
        for cq in self.cqs.values():
            cq.cohort_cqs = [self.cqs[name] for name in sorted(self.quota.cohort_cqs(cq.name))]
        self.workloads: dict[str, _Wl] = {}
        self._cq_node_cache: dict[str, set[str]] = {}
        self._flavor_checks: dict[tuple, tuple[str, str] | None] = {}
        self.evicting: set[str] = set()
        self.dirty: set[str] = set()
        self._seq = _counter()
        self._heap_seq = _counter()
        self.spec_state = state
        unplaced: list[_Wl] = []
        for spec in sorted(state.workloads, key=lambda w: w.key):
            wl = self._add(spec)
            if wl.state in (RESERVED, ADMITTED, EVICTING) and self.pool.enabled and not wl.pods:
                unplaced.append(wl)
        for wl in sorted(unplaced, key=lambda w: (w.admitted_at or 0.0, w.key)):
            self._place_existing(wl)
        for cq in self.cqs.values():
            self._mark_borrowing(cq)
        # A preemptor keeps its ClusterQueue's head until it is admitted or found inadmissible (see heads()).
        self.preemptors: dict[str, _Wl] = {}
        for wl in sorted(self.workloads.values(), key=lambda w: w.key):
            preemptor = self.workloads.get(wl.eviction.preemptor or "") if wl.eviction is not None else None
            if wl.state == EVICTING and preemptor is not None and preemptor.state == PENDING and preemptor.cq:
                self.preemptors.setdefault(preemptor.cq, preemptor)

    # ------------------------------------------------------------------ configuration

    def _compile_cq(self, spec: ClusterQueue) -> _CQ:
        cq = _CQ(spec, self.quota.cqs[spec.name])
        flavor_names = [f for rg in cq.rgs for f in rg.flavors]
        missing = sorted({f for f in flavor_names if f not in self.flavors})
        causes = []
        if cq.stopped:
            causes.append("is stopped")
        if missing:
            causes.append(f"references missing ResourceFlavor(s): {', '.join(missing)}")
        check_missing = sorted(c.name for c in spec.admission_checks if c.name not in self.admission_checks)
        if check_missing:
            causes.append(f"references missing AdmissionCheck(s): {', '.join(check_missing)}")
        check_inactive = sorted(
            c.name
            for c in spec.admission_checks
            if c.name in self.admission_checks and not self.admission_checks[c.name].active
        )
        if check_inactive:
            causes.append(f"references inactive AdmissionCheck(s): {', '.join(check_inactive)}")
        for fname in flavor_names:
            flavor = self.flavors.get(fname)
            if flavor and flavor.topology_name and flavor.topology_name not in self.topologies:
                causes.append(f'there is no Topology "{flavor.topology_name}" for TAS flavor "{fname}"')
        node = cq.node
        for anc in node.path_to_root():
            if anc.name in self.quota.cyclic:
                causes.append("cohort has a cycle")
                break
        cq.inactive = ", ".join(causes)
        cq.tas_only = bool(flavor_names) and all(
            self.flavors.get(f) is not None and self.flavors[f].topology_name for f in flavor_names
        )
        return cq

    # ------------------------------------------------------------------ workloads

    def _resolve_queue(self, wl: _Wl) -> None:
        spec = wl.spec
        lq = self.local_queues.get((spec.namespace, spec.queue_name))
        wl.lq = lq
        if spec.admission is not None:
            wl.cq = spec.admission.cluster_queue
        elif lq is not None:
            wl.cq = lq.cluster_queue
        else:
            wl.cq = None

    def blocker(self, wl: _Wl) -> tuple[str, str, str] | None:
        """(kueue_message, kueue_reason, cause) when the workload cannot even be queued, else None."""
        spec = wl.spec
        if not spec.active:
            return msg.DEACTIVATED, "Deactivated", "deactivated"
        if wl.lq is None:
            return msg.local_queue_missing(spec.queue_name), "Misconfigured", "local_queue_missing"
        if wl.lq.stop_policy in ("Hold", "HoldAndDrain"):
            return msg.local_queue_inactive(spec.queue_name), "Suspended", "local_queue_stopped"
        cq = self.cqs.get(wl.cq or "")
        if cq is None:
            return msg.cluster_queue_missing(wl.cq or ""), "Misconfigured", "cluster_queue_missing"
        if cq.inactive:
            return msg.cluster_queue_inactive(cq.name, cq.stopped), "Suspended", "cluster_queue_inactive"
        labels = self.namespaces.get(spec.namespace, {NAMESPACE_NAME_LABEL: spec.namespace})
        if not selector_matches(cq.spec.namespace_selector, labels):
            return msg.NAMESPACE_MISMATCH, "Misconfigured", "namespace_mismatch"
        if any(state in ("Retry", "Rejected") for state in spec.admission_checks.values()):
            return msg.FAILED_CHECKS, "PendingEvaluation", "failed_checks"
        return None

    def _shape(self, wl: _Wl) -> tuple:
        parts = []
        for ps in wl.pod_sets:
            spec = ps.spec
            parts.append(
                (
                    ps.name,
                    ps.count,
                    tuple(ps.per_pod.items()),
                    tuple(sorted(spec.node_selector.items())),
                    spec.node_affinity,
                    spec.tolerations,
                    spec.topology,
                )
            )
        return (wl.priority, tuple(parts))

    def _add(self, spec: Workload) -> _Wl:
        wl = _Wl(spec, next(self._seq))
        self.workloads[wl.key] = wl
        self._resolve_queue(wl)
        wl.shape = self._shape(wl)
        if spec.admission is not None:
            self._load_admission(wl, spec.admission)
        else:
            self._enqueue(wl)
        return wl

    def _load_admission(self, wl: _Wl, admission: Admission) -> None:
        by_name = {p.name: p for p in admission.pod_sets}
        usage: dict[FlavorResource, int] = {}
        assignment = []
        pods: list[tuple[str, dict[str, int]]] = []
        for ps in wl.pod_sets:
            psa = by_name.get(ps.name)
            count = psa.count if psa is not None else ps.count
            flavors = dict(psa.flavors) if psa is not None else {}
            ps_usage = {r: v * count for r, v in ps.per_pod.items()}
            for res, val in ps_usage.items():
                flavor = flavors.get(res)
                if flavor is None:
                    continue
                usage[(flavor, res)] = usage.get((flavor, res), 0) + val
            nodes = list(psa.nodes) if psa is not None else []
            for node in nodes:
                pods.append((node, ps.per_pod))
            assignment.append(PodSetAssignment(ps.name, count, flavors, ps_usage, tuple(nodes)))
        wl.assignment = assignment
        wl.usage = usage
        wl.pods = pods
        cq = self.cqs.get(wl.cq or "")
        wl.pending_checks = self._pending_checks(cq, wl, assignment) if cq is not None else ()
        wl.state = EVICTING if wl.eviction is not None else (RESERVED if wl.pending_checks else ADMITTED)
        if wl.eviction is not None:
            wl.preempted_by = wl.eviction.preemptor
            self.evicting.add(wl.key)
        if wl.admitted_at is None:
            wl.admitted_at = wl.created
        node = cq.node if cq is not None else None
        if node is not None:
            QuotaTree.add_usage(node, usage)
            cq.admitted[wl.key] = wl
        self.pool.add(pods)

    def _mark_borrowing(self, cq: _CQ) -> None:
        """Workloads that already hold quota borrow when, in admission order, they take the queue past nominal."""
        running: dict[FlavorResource, int] = {}
        for wl in sorted(cq.admitted.values(), key=lambda w: (w.admitted_at or 0.0, w.key)):
            for fr, val in wl.usage.items():
                running[fr] = running.get(fr, 0) + val
            wl.borrowing = any(running[fr] > cq.node.subtree.get(fr, 0) for fr in wl.usage)

    def _place_existing(self, wl: _Wl) -> None:
        cq = self.cqs.get(wl.cq or "")
        if cq is None:
            return
        psas = [_PSA(a.name, a.count, flavors=dict(a.flavors), usage=dict(a.usage)) for a in wl.assignment]
        results = self._place_all(wl, cq, psas)
        if results is None:
            return
        pods = []
        new_assignment = []
        for ps, a, nodes in zip(wl.pod_sets, wl.assignment, results, strict=True):
            pods.extend((n, ps.per_pod) for n in nodes)
            new_assignment.append(replace(a, nodes=tuple(nodes)))
        wl.pods = pods
        wl.assignment = new_assignment
        self.pool.add(pods)

    def _pending_checks(self, cq: _CQ, wl: _Wl, assignment: Iterable[PodSetAssignment]) -> tuple[str, ...]:
        if not cq.checks:
            return ()
        used = {f for a in assignment for f in a.flavors.values()}
        out = []
        for rule in cq.checks:
            if rule.on_flavors and not used.intersection(rule.on_flavors):
                continue
            if wl.spec.admission_checks.get(rule.name) != "Ready":
                out.append(rule.name)
        return tuple(sorted(out))

    # ------------------------------------------------------------------ queues

    def _enqueue(self, wl: _Wl) -> None:
        wl.state = PENDING
        wl.group = None
        if self.blocker(wl) is not None:
            return
        cq = self.cqs[wl.cq]  # type: ignore[index]
        group = cq.groups.get(wl.shape)
        if group is None:
            group = _Group(cq, wl.shape)
            cq.groups[wl.shape] = group
            group.active = True
        wl.group = group
        item = (-wl.priority, wl.ts, wl.key, wl)
        was_head = group.items[0] if group.items else None
        heapq.heappush(group.items, item)
        if cq.strict:
            cq.blocked = False
        if not group.active:
            if cq.strict:
                self._activate(group)
            return
        if was_head is None or item[:3] < was_head[:3]:
            self._push_group(group)

    def _push_group(self, group: _Group) -> None:
        head = group.items[0]
        group.version += 1
        heapq.heappush(group.cq.heap, (head[0], head[1], head[2], next(self._heap_seq), group.version, group))

    def _activate(self, group: _Group) -> None:
        group.active = True
        if group.items:
            self._push_group(group)

    def _park(self, group: _Group) -> None:
        if not group.active:
            return
        group.active = False
        group.version += 1
        group.cq.parked.append(group)

    def _reactivate_cq(self, cq: _CQ) -> None:
        cq.blocked = False
        if cq.parked:
            parked, cq.parked = cq.parked, []
            quick = not cq.preempts
            for group in parked:
                if group.active:
                    continue
                if quick and not self._may_fit(cq, group):
                    cq.parked.append(group)
                    continue
                self._activate(group)

    def _may_fit(self, cq: _CQ, group: _Group) -> bool:
        """Cheap, exact pre-check for a parked group (no preemption, no nodes): can its head fit any flavor now?

        Without preemption and placement a pod set's outcome depends only on whether some flavor has
        ``request <= available`` for every resource, so a parked group that fails this stays parked without
        a full evaluation (Kueue would evaluate and park it again with the same result).
        """
        items = group.items
        while items and (items[0][3].state != PENDING or items[0][3].group is not group):
            heapq.heappop(items)
        if not items:
            return False
        wl = items[0][3]
        if len(wl.pod_sets) != 1:
            return True
        ps = wl.pod_sets[0]
        requests = ps.total
        if "pods" in cq.rg_of:
            requests = {**requests, "pods": ps.count}
        groups = {cq.rg_of.get(r) for r, v in requests.items() if v > 0}
        if len(groups) != 1:
            return True
        (idx,) = groups
        if idx is None:
            return False
        node = cq.node
        available = QuotaTree.available
        for fname in cq.rgs[idx].flavors:
            if all(v <= available(node, (fname, r)) for r, v in requests.items() if v > 0):
                if not self.pool.enabled or not ps.per_pod:
                    return True
                flavor = self.flavors.get(fname)
                if flavor is None:
                    continue
                # Placement needs, at least, enough free capacity in total and one node big enough for a pod.
                summary = self.pool.free_summary(flavor.node_labels, ps.per_pod)
                if all(summary[r][0] >= v * ps.count and summary[r][1] >= v for r, v in ps.per_pod.items()):
                    return True
        return False

    def _on_release(self, cq_name: str | None, nodes: Iterable[str] = ()) -> None:
        if cq_name is None or cq_name not in self.cqs:
            for cq in self.cqs.values():
                self._reactivate_cq(cq)
            return
        targets = {c.name: c for c in self.cqs[cq_name].cohort_cqs}
        if self.pool.enabled:
            freed = set(nodes)
            if freed:
                # Node capacity is shared across cohorts: wake every queue with a flavor on the freed nodes.
                for cq in self.cqs.values():
                    if cq.name not in targets and self._cq_nodes(cq) & freed:
                        targets[cq.name] = cq
        for name in sorted(targets):
            self._reactivate_cq(targets[name])

    def _cq_nodes(self, cq: _CQ) -> set[str]:
        cached = self._cq_node_cache.get(cq.name)
        if cached is None:
            cached = set()
            for rg in cq.rgs:
                for fname in rg.flavors:
                    flavor = self.flavors.get(fname)
                    if flavor is not None:
                        cached.update(n.name for n in self.pool.flavor_nodes(flavor.node_labels))
            self._cq_node_cache[cq.name] = cached
        return cached

    def _on_admission(self, cq_name: str) -> None:
        for cq in self.cqs[cq_name].cohort_cqs:
            if cq.preempts:
                self._reactivate_cq(cq)

    def _head(self, cq: _CQ) -> _Wl | None:
        heap = cq.heap
        while heap:
            negp, ts, key, _, version, group = heap[0]
            if version != group.version or not group.active:
                heapq.heappop(heap)
                continue
            items = group.items
            while items and (items[0][3].state != PENDING or items[0][3].group is not group):
                heapq.heappop(items)
            if not items:
                heapq.heappop(heap)
                group.version += 1
                continue
            top = items[0]
            if (top[0], top[1], top[2]) != (negp, ts, key):
                heapq.heappop(heap)
                self._push_group(group)
                continue
            return top[3]
        return None

    def pending_in(self, cq_name: str) -> list[_Wl]:
        """Pending workloads of a ClusterQueue in Kueue's queue order."""
        return sorted((w for w in self.workloads.values() if w.state == PENDING and w.cq == cq_name), key=_Wl.sort_key)

    def queue_head(self, cq_name: str) -> _Wl | None:
        """The first pending workload of a ClusterQueue in queue order, parked or not."""
        best: _Wl | None = None
        for w in self.workloads.values():
            if w.state == PENDING and w.cq == cq_name and w.group is not None:
                if best is None or w.sort_key() < best.sort_key():
                    best = w
        return best

    # ------------------------------------------------------------------ flavor assignment

    def _check_flavor(self, cq: _CQ, fname: str, ps: _PodSetInfo) -> tuple[str, str] | None:
        flavor = self.flavors.get(fname)
        if flavor is None:
            return msg.flavor_not_found(fname), "not_found"
        spec = ps.spec
        topo = spec.topology
        requested = (topo is not None and topo.requested) or cq.tas_only
        if requested:
            if not flavor.topology_name:
                return msg.tas_not_supported(fname), "tas_not_supported"
            topology = self.topologies.get(flavor.topology_name)
            if topology is None:
                return msg.tas_cache_missing(fname), "tas_cache_missing"
            level = (topo.required or topo.preferred) if topo is not None else None
            if level and level not in topology.levels:
                return msg.tas_level_missing(fname), "tas_level_missing"
        elif flavor.topology_name and not cq.tas_only:
            return msg.tas_only(fname), "tas_only"
        taint = first_untolerated(flavor.node_taints, (*spec.tolerations, *flavor.tolerations))
        if taint is not None:
            return msg.untolerated_taint(taint_go_struct(taint), fname), "taint"
        if not node_affinity_matches(spec.node_selector, spec.node_affinity, flavor.node_labels, flavor.node_labels):
            return msg.affinity_mismatch(fname), "affinity"
        return None

    def _fits_resource_quota(
        self, wl: _Wl, cq: _CQ, fr: FlavorResource, assumed: int, request: int
    ) -> tuple[int, int, str | tuple, dict]:
        node = cq.node
        available = QuotaTree.available(node, fr)
        maximum = QuotaTree.potential_available(node, fr)
        val = assumed + request
        info = {"flavor": fr[0], "resource": fr[1], "request": val, "available": available, "maximum": maximum}
        if val > maximum:
            info["kind"] = EXCEEDS_MAX_QUOTA
            return NOFIT, 0, ("max", fr[1], fr[0], assumed, request, maximum), info
        borrow, may_reclaim = QuotaTree.lowest_subtree_that_fits(node, fr, val)
        if val <= available:
            info["kind"] = ""
            return FIT, borrow, "", info
        reason = ("iuq", fr[1], fr[0], val - available)
        info["kind"] = WAITING_FOR_QUOTA
        quota = cq.quotas.get(fr)
        nominal = quota.nominal if quota is not None else 0
        bwc = cq.spec.preemption.borrow_within_cohort.policy != "Never" or (
            self.fair is not None and cq.spec.preemption.reclaim_within_cohort != "Never"
        )
        if nominal >= val or may_reclaim or bwc:
            targets = self._targets(wl, cq, {fr}, {fr: val}, check_placement=False)
            if not targets:
                return NO_CANDIDATES, borrow, reason, info
            # Borrowing height once the targets are gone.
            self._remove_many([t for t, _ in targets])
            borrow_after, _ = QuotaTree.lowest_subtree_that_fits(node, fr, val)
            self._restore_many([t for t, _ in targets])
            mode = PREEMPT if any(t.cq == cq.name for t, _ in targets) else RECLAIM
            return mode, borrow_after, reason, info
        return NOFIT, borrow, reason, info

    @staticmethod
    def _preferred(a: tuple[int, int], b: tuple[int, int]) -> bool:
        """Kueue's isPreferred (BorrowingOverPreemption)."""
        if a[0] == NOFIT:
            return False
        if b[0] == NOFIT:
            return True
        a_nc, b_nc = a[0] == NO_CANDIDATES, b[0] == NO_CANDIDATES
        if a_nc != b_nc:
            return not a_nc
        if a[0] != b[0]:
            return a[0] > b[0]
        return a[1] < b[1]

    @staticmethod
    def _try_next(mode: tuple[int, int], cq: _CQ) -> bool:
        fung = cq.spec.flavor_fungibility
        if mode[0] in (NOFIT, NO_CANDIDATES):
            return True
        if mode[0] in (PREEMPT, RECLAIM) and fung.when_can_preempt == "TryNextFlavor":
            return True
        return mode[1] > 0 and fung.when_can_borrow == "TryNextFlavor"

    def _find_flavor(
        self,
        wl: _Wl,
        cq: _CQ,
        ps: _PodSetInfo,
        rg: _RG,
        requests: Mapping[str, int],
        assumed: Mapping[FlavorResource, int],
    ) -> tuple[dict[str, str], dict[str, int], list[str | tuple], int, list[dict]]:
        reasons: list[str | tuple] = []
        attempts: list[dict] = []
        best: dict[str, str] = {}
        best_modes: dict[str, int] = {}
        best_mode = (NOFIT, 1 << 30)
        for fname in rg.flavors:
            check_key = (cq.name, fname, wl.shape, ps.name)
            bad = self._flavor_checks.get(check_key, False)
            if bad is False:
                bad = self._check_flavor(cq, fname, ps)
                self._flavor_checks[check_key] = bad
            if bad is not None:
                reasons.append(bad[0])
                attempts.append({"flavor": fname, "kind": NO_MATCHING_FLAVOR, "why": bad[1], "reason": bad[0]})
                continue
            rep = (FIT, 0)
            assigned: dict[str, str] = {}
            modes: dict[str, int] = {}
            flavor_kind = ""
            infos = []
            for rname in sorted(requests):
                val = requests[rname]
                fr = (fname, rname)
                pmode, borrow, reason, info = self._fits_resource_quota(wl, cq, fr, assumed.get(fr, 0), val)
                infos.append(info)
                if reason:
                    reasons.append(reason)
                    if SEVERITY[info["kind"]] > SEVERITY[flavor_kind]:
                        flavor_kind = info["kind"]
                mode = (pmode, borrow)
                if self._preferred(rep, mode):
                    rep = mode
                if rep[0] == NOFIT:
                    break
                assigned[rname] = fname
                modes[rname] = PS_FIT if pmode == FIT else PS_PREEMPT
            attempts.append(
                {
                    "flavor": fname,
                    "kind": flavor_kind if rep[0] != FIT else "",
                    "mode": rep[0],
                    "borrow": rep[1],
                    "resources": infos,
                }
            )
            if rep[0] == NOFIT:
                assigned, modes = {}, {}
            if not self._try_next(rep, cq):
                best, best_modes, best_mode = assigned, modes, rep
                break
            if self._preferred(rep, best_mode):
                best, best_modes, best_mode = assigned, modes, rep
        if best_mode[0] == FIT:
            return best, best_modes, [], best_mode[1], attempts
        return best, best_modes, reasons, (best_mode[1] if best_mode[0] != NOFIT else 0), attempts

    def assign(self, wl: _Wl, cq: _CQ, *, place: bool = True) -> _Assignment:
        """Kueue's flavor assignment for every pod set (then node placement when nodes are known)."""
        result = _Assignment(pod_sets=[], usage={})
        covers_pods = "pods" in cq.rg_of
        for ps in wl.pod_sets:
            requests = dict(ps.total)
            if covers_pods:
                requests["pods"] = ps.count
            psa = _PSA(ps.name, ps.count, usage=requests)
            result.pod_sets.append(psa)
            for res in sorted(requests):
                if requests[res] == 0 or res in psa.flavors:
                    continue
                rg_idx = cq.rg_of.get(res)
                if rg_idx is None:
                    psa.reasons.append(msg.resource_unavailable(res))
                    psa.no_fit_reason = NO_MATCHING_FLAVOR
                    psa.failed = True
                    psa.group_attempts.append(
                        [
                            {
                                "flavor": "",
                                "kind": NO_MATCHING_FLAVOR,
                                "why": "undeclared",
                                "resource": res,
                                "reason": psa.reasons[-1],
                            }
                        ]
                    )
                    break
                rg = cq.rgs[rg_idx]
                group_requests = {r: v for r, v in requests.items() if r in rg.covered and v > 0}
                flavors, modes, reasons, borrow, attempts = self._find_flavor(
                    wl, cq, ps, rg, group_requests, result.usage
                )
                psa.group_attempts.append(attempts)
                if not flavors:
                    psa.reasons.extend(reasons)
                    psa.failed = True
                    break
                psa.flavors.update(flavors)
                psa.modes.update(modes)
                psa.reasons.extend(reasons)
                result.borrow = max(result.borrow, borrow)
            if psa.failed:
                return result
            for res, val in requests.items():
                flavor = psa.flavors.get(res)
                if flavor is not None:
                    fr = (flavor, res)
                    result.usage[fr] = result.usage.get(fr, 0) + val
        if result.mode == PS_NOFIT:
            return result
        if place and self.pool.enabled:
            self._placement_stage(wl, cq, result)
        return result

    # ------------------------------------------------------------------ placement

    def _podset_request(self, cq: _CQ, ps: _PodSetInfo, flavors: Mapping[str, str]) -> tuple[PodSetRequest, str | None]:
        labels: dict[str, str] = {}
        tolerations = list(ps.spec.tolerations)
        tas_flavor = None
        for fname in sorted(set(flavors.values())):
            flavor = self.flavors.get(fname)
            if flavor is None:
                continue
            labels.update(flavor.node_labels)
            tolerations.extend(flavor.tolerations)
            if flavor.topology_name and tas_flavor is None:
                tas_flavor = flavor
        levels: tuple[str, ...] = ()
        topo_name = None
        required = preferred = None
        if tas_flavor is not None and tas_flavor.topology_name in self.topologies:
            topo_name = tas_flavor.topology_name
            levels = self.topologies[topo_name].levels
            if ps.spec.topology is not None:
                required = ps.spec.topology.required
                preferred = ps.spec.topology.preferred
        per_pod = dict(ps.per_pod)
        req = PodSetRequest(
            count=ps.count,
            per_pod=per_pod,
            node_labels=labels,
            node_selector=dict(ps.spec.node_selector),
            node_affinity=ps.spec.node_affinity,
            tolerations=tuple(tolerations),
            levels=levels,
            topology_name=topo_name,
            required=required,
            preferred=preferred,
        )
        return req, topo_name

    def _place_all(
        self, wl: _Wl, cq: _CQ, psas: list[_PSA], *, empty: bool = False, healthy: bool = False
    ) -> list[list[str]] | None:
        """Place every pod set in turn (earlier pod sets' pods count for later ones); None if any fails."""
        placed: list[tuple[str, dict[str, int]]] = []
        out: list[list[str]] = []
        ok = True
        for ps, psa in zip(wl.pod_sets, psas, strict=False):
            if not ps.per_pod or ps.count == 0:
                out.append([])
                continue
            req, _ = self._podset_request(cq, ps, psa.flavors)
            res = self.pool.place(req, empty=empty, healthy=healthy)
            psa.placement = res
            if not res.ok:
                ok = False
                break
            pods = [(n, ps.per_pod) for n in res.nodes]
            if not empty:
                self.pool.add(pods)
                placed.extend(pods)
            out.append(res.nodes)
        if placed:
            self.pool.remove(placed)
        return out if ok else None

    def _placement_stage(self, wl: _Wl, cq: _CQ, result: _Assignment) -> None:
        """Kueue's TAS step, applied to every flavor: place, else preempt if it could fit, else no fit."""
        if result.mode == PS_FIT:
            nodes = self._place_all(wl, cq, result.pod_sets)
            if nodes is not None:
                for psa, n in zip(result.pod_sets, nodes, strict=False):
                    psa.nodes = n
                return
            failed = next(p for p in result.pod_sets if p.placement is not None and not p.placement.ok)
            self._add_placement_reason(cq, wl, failed)
            for res in failed.modes:
                failed.modes[res] = PS_PREEMPT
            result.needs_placement_preemption = True
        if result.mode == PS_PREEMPT:
            probe = [_PSA(p.name, p.count, flavors=dict(p.flavors)) for p in result.pod_sets]
            if self._place_all(wl, cq, probe, empty=True) is None:
                failed_probe = next(p for p in probe if p.placement is not None and not p.placement.ok)
                target = next(p for p in result.pod_sets if p.name == failed_probe.name)
                if target.placement is None:
                    target.placement = failed_probe.placement
                    self._add_placement_reason(cq, wl, target)
                target.failed = True
                target.no_fit_reason = TOPOLOGY_PLACEMENT_FAILED
            else:
                result.needs_placement_preemption = True

    def _add_placement_reason(self, cq: _CQ, wl: _Wl, psa: _PSA) -> None:
        ps = next(p for p in wl.pod_sets if p.name == psa.name)
        _, topo = self._podset_request(cq, ps, psa.flavors)
        res = psa.placement
        assert res is not None
        if topo is not None:
            psa.reasons.append(msg.tas_not_fit(topo, res.fit, ps.count, res.exclusion_text()))
            psa.placement_visible = True
        else:
            psa.reasons.append("")

    def _placement_ok(self, wl: _Wl, cq: _CQ, assignment: _Assignment) -> list[list[str]] | None:
        return self._place_all(wl, cq, [_PSA(p.name, p.count, flavors=dict(p.flavors)) for p in assignment.pod_sets])

    # ------------------------------------------------------------------ preemption

    def _remove_many(self, wls: Iterable[_Wl]) -> None:
        for w in wls:
            QuotaTree.remove_usage(self.cqs[w.cq].node, w.usage)  # type: ignore[index]
            self.pool.remove(w.pods)

    def _restore_many(self, wls: Iterable[_Wl]) -> None:
        for w in wls:
            QuotaTree.add_usage(self.cqs[w.cq].node, w.usage)  # type: ignore[index]
            self.pool.add(w.pods)

    @staticmethod
    def _uses(wl: _Wl, frs: set[FlavorResource]) -> bool:
        return any(fr in frs for fr in wl.usage)

    def _priority_too_high(self, cq: _CQ, wl: _Wl, cand: _Wl) -> bool:
        policy = (
            cq.spec.preemption.within_cluster_queue if cand.cq == cq.name else cq.spec.preemption.reclaim_within_cohort
        )
        lower = wl.priority > cand.priority
        if policy == "LowerPriority":
            return not lower
        if policy == "LowerOrNewerEqualPriority":
            newer_equal = wl.priority == cand.priority and wl.ts < cand.ts
            return not (lower or newer_equal)
        return policy != "Any"

    def _classify(self, cq: _CQ, wl: _Wl, cand: _Wl, frs: set[FlavorResource], advantage: bool) -> int:
        if not self._uses(cand, frs):
            return V_NEVER
        if cand.evicted_at == self.now and cand.state != EVICTING:
            # Evicted and re-admitted at this instant: preempting it again here could repeat forever.
            return V_NEVER
        if self._priority_too_high(cq, wl, cand):
            return V_NEVER
        if cand.cq == cq.name:
            return V_WITHIN_CQ
        if advantage:
            return V_HIER_RECLAIM
        bwc = cq.spec.preemption.borrow_within_cohort
        if bwc.policy == "Never":
            return V_RECLAIM_NO_BORROW
        if cand.priority >= wl.priority or (
            bwc.max_priority_threshold is not None and cand.priority > bwc.max_priority_threshold
        ):
            return V_RECLAIM_NO_BORROW
        return V_RECLAIM_WHILE_BORROW

    def _collect_subtree(
        self,
        cq: _CQ,
        wl: _Wl,
        frs: set[FlavorResource],
        current: QuotaNode,
        lca: QuotaNode,
        skip: QuotaNode | None,
        advantage: bool,
        out: list[tuple[_Wl, QuotaNode, int]],
    ) -> None:
        for child in current.child_cohorts:
            if child is skip or child.within_nominal(frs):
                continue
            self._collect_subtree(cq, wl, frs, child, lca, skip, advantage, out)
        for child in current.child_cqs:
            if child is cq.node or child.within_nominal(frs):
                continue
            for cand in self.cqs[child.name].admitted.values():
                variant = self._classify(cq, wl, cand, frs, advantage)
                if variant != V_NEVER:
                    out.append((cand, lca, variant))

    @staticmethod
    def _fits_in_quota(
        node: QuotaNode, requests: Mapping[FlavorResource, int]
    ) -> tuple[bool, dict[FlavorResource, int]]:
        fits = True
        remaining = {}
        for fr, v in requests.items():
            if node.usage.get(fr, 0) + v > node.subtree.get(fr, 0):
                fits = False
            remaining[fr] = max(0, v - node.local_available(fr))
        return fits, remaining

    def _candidate_order(self, cq: _CQ, cand: _Wl) -> tuple:
        return (
            cand.cq == cq.name,
            cand.priority,
            -(cand.admitted_at or 0.0),
            cand.key,
        )

    def fair_candidate_key(self, cq: _CQ, cand: _Wl) -> tuple:
        """Kueue's candidate order: being evicted, other queues, lower priority, most recently admitted."""
        return (cand.state != EVICTING, *self._candidate_order(cq, cand))

    def fair_candidate_ok(self, cq: _CQ, wl: _Wl, cand: _Wl, frs: set[FlavorResource]) -> bool:
        """A fair-sharing candidate: uses the contested resources and its queue's policy allows preempting it."""
        return self._classify(cq, wl, cand, frs, True) != V_NEVER

    def _targets(
        self,
        wl: _Wl,
        cq: _CQ,
        frs: set[FlavorResource],
        usage: Mapping[FlavorResource, int],
        *,
        check_placement: bool,
        assignment: _Assignment | None = None,
    ) -> list[tuple[_Wl, str]]:
        """Kueue's preemption (fair sharing's when enabled, else classical): targets, empty when none work."""
        if not cq.preempts:
            return []
        if self.fair is not None:
            return fair_targets(self, wl, cq, frs, usage, check_placement=check_placement, assignment=assignment)
        policy = cq.spec.preemption
        same_queue: list[tuple[_Wl, QuotaNode | None, int]] = []
        if policy.within_cluster_queue != "Never":
            for cand in cq.admitted.values():
                variant = self._classify(cq, wl, cand, frs, False)
                if variant != V_NEVER:
                    same_queue.append((cand, None, variant))
        hierarchy: list[tuple[_Wl, QuotaNode, int]] = []
        priority: list[tuple[_Wl, QuotaNode, int]] = []
        node = cq.node
        if node.parent is not None and policy.reclaim_within_cohort != "Never":
            advantage, remaining = self._fits_in_quota(node, usage)
            previous: QuotaNode | None = None
            for subroot in node.path_to_root():
                target = hierarchy if advantage else priority
                self._collect_subtree(cq, wl, frs, subroot, subroot, previous, advantage, target)
                fits, remaining = self._fits_in_quota(subroot, remaining)
                advantage = advantage or fits
                previous = subroot
        if not same_queue and not hierarchy and not priority:
            return []

        def order(items: list) -> tuple[list, list]:
            items.sort(key=lambda c: self._candidate_order(cq, c[0]))
            evicted = [c for c in items if c[0].state == EVICTING]
            rest = [c for c in items if c[0].state != EVICTING]
            return evicted, rest

        ev_h, ne_h = order(hierarchy)
        ev_p, ne_p = order(priority)
        ev_s, ne_s = order(same_queue)
        candidates = ev_h + ev_p + ev_s + ne_h + ne_p + ne_s

        forbidden = policy.borrow_within_cohort.policy == "Never"
        under_nominal = all(node.usage.get(fr, 0) < (cq.quotas[fr].nominal if fr in cq.quotas else 0) for fr in frs)
        if (not hierarchy and not priority) or (forbidden and not under_nominal):
            attempts = [True]
        elif forbidden and not hierarchy:
            attempts = [False, True]
        else:
            attempts = [True, False]
        for allow_borrowing in attempts:
            targets = self._minimal(wl, cq, frs, usage, candidates, allow_borrowing, check_placement, assignment)
            if targets:
                return targets
        return []

    def _candidate_valid(self, cq: _CQ, cand: _Wl, lca: QuotaNode | None, variant: int, borrow: bool, frs: set) -> bool:
        if cand.cq == cq.name:
            return True
        if borrow and variant == V_RECLAIM_NO_BORROW:
            return False
        cand_node = self.cqs[cand.cq].node  # type: ignore[index]
        if cand_node.within_nominal(frs):
            return False
        for anc in cand_node.path_to_root():
            if anc is lca:
                break
            if anc.within_nominal(frs):
                return False
        return True

    def _quota_fits(self, cq: _CQ, usage: Mapping[FlavorResource, int], allow_borrowing: bool) -> bool:
        node = cq.node
        for fr, v in usage.items():
            if not allow_borrowing and node.borrowing_with(fr, v):
                return False
            if v > QuotaTree.available(node, fr):
                return False
        return True

    def _minimal(
        self,
        wl: _Wl,
        cq: _CQ,
        frs: set[FlavorResource],
        usage: Mapping[FlavorResource, int],
        candidates: list,
        allow_borrowing: bool,
        check_placement: bool,
        assignment: _Assignment | None,
    ) -> list[tuple[_Wl, str]]:
        def fits() -> bool:
            if not self._quota_fits(cq, usage, allow_borrowing):
                return False
            if check_placement and assignment is not None:
                return self._placement_ok(wl, cq, assignment) is not None
            return True

        removed: list[tuple[_Wl, str]] = []
        ok = False
        for cand, lca, variant in candidates:
            if not self._candidate_valid(cq, cand, lca, variant, allow_borrowing, frs):
                continue
            self._remove_many([cand])
            removed.append((cand, VARIANT_REASON[variant]))
            if fits():
                ok = True
                break
        if not ok:
            self._restore_many([w for w, _ in removed])
            return []
        return self._minimal_victims(list(removed), fits)

    def _minimal_victims(self, targets: list[tuple[_Wl, str]], fits: Callable[[], bool]) -> list[tuple[_Wl, str]]:
        """Of victims all removed (the last one made it fit), keep only those still needed; restore everything.

        Kueue's fill-back: from the second-to-last victim backwards, a victim whose return still fits is spared.
        """
        for i in range(len(targets) - 2, -1, -1):
            self._restore_many([targets[i][0]])
            if fits():
                targets.pop(i)
            else:
                self._remove_many([targets[i][0]])
        self._restore_many([w for w, _ in targets])
        return targets

    def preemption_targets(self, wl: _Wl, cq: _CQ, assignment: _Assignment) -> list[tuple[_Wl, str]]:
        """Targets for a workload whose assignment needs preemption (empty when none is possible)."""
        frs: set[FlavorResource] = set()
        for psa in assignment.pod_sets:
            for res, mode in psa.modes.items():
                if mode == PS_PREEMPT:
                    frs.add((psa.flavors[res], res))
        if not frs:
            return []
        return self._targets(
            wl,
            cq,
            frs,
            assignment.usage,
            check_placement=self.pool.enabled,
            assignment=assignment,
        )

    # ------------------------------------------------------------------ cycle

    def _pinned(self, cq: _CQ) -> _Wl | None:
        """The preemptor that holds ``cq``'s head while its preemption is under way (None: none, or it ended)."""
        wl = self.preemptors.get(cq.name)
        if wl is None:
            return None
        if wl.state == PENDING and wl.cq == cq.name and wl.group is not None and wl.group.active:
            return wl
        del self.preemptors[cq.name]
        return None

    def heads(self) -> list[tuple[_CQ, _Wl]]:
        """The head of every ClusterQueue that can admit now.

        A workload that issued preemptions stays its queue's head until it is admitted or inadmissible, so a
        parked workload woken by its victims' release cannot take the head and let the freed capacity go to
        another queue (which the preemptor would reclaim again at the same instant, endlessly).
        """
        out = []
        for cq in self.cqs.values():
            if cq.blocked or not cq.heap:
                continue
            head = self._pinned(cq) if self.preemptors else None
            if head is None:
                head = self._head(cq)
            if head is not None:
                out.append((cq, head))
        return out

    def cycle(self, now: float, heads: list[tuple[_CQ, _Wl]] | None = None) -> CycleOutcome:
        """One Kueue scheduling cycle: nominate every head, order, admit or preempt, re-checking fit."""
        self.now = now
        outcome = CycleOutcome()
        entries: list[_Entry] = []
        for cq, wl in heads if heads is not None else self.heads():
            wl.note = None
            if self.fair is None and not cq.preempts and wl.group is not None and not self._may_fit(cq, wl.group):
                # Exact shortcut: without preemption a head that fails this check is inadmissible.
                self._inadmissible(wl, cq, outcome)
                outcome.evaluated.append(wl.key)
                continue
            assignment = self.assign(wl, cq)
            targets: list[tuple[_Wl, str]] = []
            mode = assignment.mode
            nominated = False
            if mode == PS_FIT:
                nominated = True
            elif mode == PS_PREEMPT:
                targets = self.preemption_targets(wl, cq, assignment)
                nominated = bool(targets)
            entries.append(_Entry(wl, cq, assignment, targets, nominated))
            outcome.evaluated.append(wl.key)
        # Kueue's order; among equal borrowing and priority a preemptor from an earlier cycle goes first, so
        # the capacity its victims freed is not taken by a peer that would then be reclaimed in turn.
        pinned = {id(w) for w in self.preemptors.values()}

        def classic(e: _Entry) -> tuple:
            return (e.assignment.borrow, -e.wl.priority, id(e.wl) not in pinned, e.wl.ts, e.wl.key)

        if self.fair is None:
            entries.sort(key=classic)
            ordered: Iterable[_Entry] = entries
        else:
            ordered = tournament(entries, classic, lambda e: (id(e.wl) not in pinned, e.wl.ts, e.wl.key))
        preempted: dict[str, _Wl] = {}
        reservations: list[tuple[_CQ, dict[FlavorResource, int], list[tuple[str, dict[str, int]]]]] = []
        admitted_cqs: set[str] = set()
        changed = False
        for e in ordered:
            wl, cq, assignment = e.wl, e.cq, e.assignment
            if not e.nominated:
                self._not_nominated(e, outcome)
                if self.preemptors.get(cq.name) is wl:
                    del self.preemptors[cq.name]
                continue
            if e.targets and any(t.key in preempted for t, _ in e.targets):
                wl.note = {"kind": "overlap", "message": msg.OVERLAPPING_TARGETS}
                continue
            victims = list(preempted.values()) + [t for t, _ in e.targets]
            nodes: list[list[str]] | None = []
            if not changed and not victims:
                # Nothing moved since nomination: its fit and node placement still hold.
                fits = True
                if self.pool.enabled:
                    nodes = [list(p.nodes) for p in assignment.pod_sets]
            else:
                self._remove_many(victims)
                fits = self._quota_fits(cq, assignment.usage, True)
                if fits and self.pool.enabled:
                    nodes = self._placement_ok(wl, cq, assignment)
                    fits = nodes is not None
                self._restore_many(victims)
            if not fits:
                wl.note = {"kind": "no_longer_fits", "message": msg.NO_LONGER_FITS}
                continue
            assert nodes is not None
            pods = [
                (n, ps.per_pod)
                for ps, ns in zip(wl.pod_sets, nodes or [[]] * len(wl.pod_sets), strict=False)
                for n in ns
            ]
            if e.targets:
                for target, _ in e.targets:
                    preempted[target.key] = target
                QuotaTree.add_usage(cq.node, assignment.usage)
                self.pool.add(pods)
                reservations.append((cq, assignment.usage, pods))
                changed = True
                self.preemptors[cq.name] = wl
                issued = self._issue_preemptions(wl, cq, e.targets)
                outcome.preemptions.extend(issued)
                wl.note = {"kind": "preempting", "count": len(e.targets), "message": assignment.message()}
                continue
            decision = self._admit(wl, cq, assignment, nodes or [[] for _ in wl.pod_sets])
            if self.preemptors.get(cq.name) is wl:
                del self.preemptors[cq.name]
            changed = True
            outcome.admitted.append(decision)
            admitted_cqs.add(cq.name)
        for cq, usage, pods in reservations:
            QuotaTree.remove_usage(cq.node, usage)
            self.pool.remove(pods)
        for name in sorted(admitted_cqs):
            self._on_admission(name)
        return outcome

    def _not_nominated(self, e: _Entry, outcome: CycleOutcome) -> None:
        self._inadmissible(e.wl, e.cq, outcome)

    def _inadmissible(self, wl: _Wl, cq: _CQ, outcome: CycleOutcome) -> None:
        wl.note = {"kind": "inadmissible"}
        outcome.parked.append(wl.key)
        if cq.strict:
            cq.blocked = True
        elif wl.group is not None:
            self._park(wl.group)

    def _issue_preemptions(self, wl: _Wl, cq: _CQ, targets: list[tuple[_Wl, str]]) -> list[Preemption]:
        out = []
        for target, reason in targets:
            if target.state == EVICTING:
                continue
            victim_cq = self.cqs[target.cq]  # type: ignore[index]
            text = msg.preempted(wl.spec.uid, wl.spec.job_uid, reason, cq.path, victim_cq.path)
            target.state = EVICTING
            self.evicting.add(target.key)
            target.eviction = Eviction(reason=reason, message=text, preemptor=wl.key, issued_at=self.now)
            target.preempted_by = wl.key
            out.append(Preemption(target.key, wl.key, reason, text, victim_cq.name, cq.name))  # type: ignore[arg-type]
        return out

    def _admit(self, wl: _Wl, cq: _CQ, assignment: _Assignment, nodes: list[list[str]]) -> AdmissionDecision:
        pod_sets = []
        pods: list[tuple[str, dict[str, int]]] = []
        for ps, psa, ns in zip(wl.pod_sets, assignment.pod_sets, nodes, strict=False):
            pod_sets.append(PodSetAssignment(ps.name, ps.count, dict(psa.flavors), dict(psa.usage), tuple(ns)))
            pods.extend((n, ps.per_pod) for n in ns)
        borrowing = assignment.borrow > 0
        QuotaTree.add_usage(cq.node, assignment.usage)
        self.pool.add(pods)
        self.dirty.add(cq.name)
        wl.usage = dict(assignment.usage)
        wl.pods = pods
        wl.assignment = pod_sets
        wl.admitted_at = self.now
        wl.borrowing = borrowing
        wl.pending_checks = self._pending_checks(cq, wl, pod_sets)
        wl.state = RESERVED if wl.pending_checks else ADMITTED
        wl.eviction = None
        wl.note = None
        cq.admitted[wl.key] = wl
        group = wl.group
        wl.group = None
        if group is not None and group.active:
            items = group.items
            while items and (items[0][3].state != PENDING or items[0][3].group is not group):
                heapq.heappop(items)
            if items:
                self._push_group(group)
        return AdmissionDecision(
            workload=wl.key,
            cluster_queue=cq.name,
            pod_sets=tuple(pod_sets),
            borrowing=borrowing,
            pending_checks=wl.pending_checks,
            message=msg.quota_reserved(cq.name),
        )

    # ------------------------------------------------------------------ lifecycle

    def release(self, key: str) -> None:
        """Free a workload's quota and nodes (it finished, or its eviction completed)."""
        wl = self.workloads[key]
        cq = self.cqs.get(wl.cq or "")
        if cq is not None:
            QuotaTree.remove_usage(cq.node, wl.usage)
            cq.admitted.pop(key, None)
        self.pool.remove(wl.pods)
        freed = [n for n, _ in wl.pods]
        wl.usage = {}
        wl.pods = []
        if wl.cq:
            self.dirty.add(wl.cq)
        self._on_release(wl.cq, freed)

    def add_node(self, node: Node) -> None:
        """A node joins the cluster: its capacity is offered to every queue at the next cycle."""
        self.pool.add_node(node)
        self.pool.enabled = True
        self.spec_state = replace(
            self.spec_state, nodes=(*(n for n in self.spec_state.nodes if n.name != node.name), node)
        )
        self._cq_node_cache.clear()
        self._on_release(None)

    def remove_node(self, name: str, now: float) -> list[str]:
        """A node leaves the cluster: workloads with a pod on it lose those pods and are requeued at once.

        As when a node disappears under the simulated backend, the workload is evicted without a checkpoint and
        its eviction completes at once (its pods are gone); it queues again ordered by the eviction time. Returns
        the keys of the requeued workloads, in key order.
        """
        lost = sorted(
            key
            for key, wl in self.workloads.items()
            if wl.state in (RESERVED, ADMITTED, EVICTING) and any(n == name for n, _ in wl.pods)
        )
        for key in lost:
            wl = self.workloads[key]
            if wl.state != EVICTING:
                wl.state = EVICTING
                wl.eviction = Eviction(
                    reason="NodeLost", message=f"node {name} left the cluster", preemptor=None, issued_at=now
                )
            self.evicting.add(key)
            self.complete_eviction(key, now)
        self.pool.remove_node(name)
        self.spec_state = replace(self.spec_state, nodes=tuple(n for n in self.spec_state.nodes if n.name != name))
        self._cq_node_cache.clear()
        return lost

    def finish(self, key: str) -> None:
        """A running workload ended: release it."""
        wl = self.workloads[key]
        if wl.state in (ADMITTED, RESERVED, EVICTING):
            self.release(key)
        self.evicting.discard(key)
        wl.state = FINISHED
        wl.group = None

    def drain(self, now: float) -> list[QueueStopEviction]:
        """Kueue's workload controller on stopped queues: take quota back from workloads of stopped queues.

        An admitted workload whose LocalQueue (checked first, as Kueue does) or ClusterQueue is ``HoldAndDrain`` is
        evicted (it keeps its quota until ``complete_eviction``); one that only has quota reserved loses the
        reservation at once under any stopPolicy. ``Hold`` leaves admitted workloads running. Workloads already
        being evicted are left alone. Idempotent: a second call at any time finds nothing new.
        """
        if not self.has_stopped_queues:
            return []
        out: list[QueueStopEviction] = []
        for cq in self.cqs.values():
            for key in sorted(cq.admitted):
                wl = cq.admitted[key]
                if wl.state not in (ADMITTED, RESERVED):
                    continue
                lq_policy = wl.lq.stop_policy if wl.lq is not None else "None"
                if wl.state == ADMITTED:
                    if lq_policy == "HoldAndDrain":
                        reason, text = "LocalQueueStopped", msg.LOCAL_QUEUE_STOPPED
                    elif cq.spec.stop_policy == "HoldAndDrain":
                        reason, text = "ClusterQueueStopped", msg.CLUSTER_QUEUE_STOPPED
                    else:
                        continue
                    wl.state = EVICTING
                    self.evicting.add(key)
                    wl.eviction = Eviction(reason=reason, message=text, preemptor=None, issued_at=now)
                    out.append(QueueStopEviction(key, cq.name, reason, text))  # type: ignore[arg-type]
                    continue
                if lq_policy != "None":
                    reason, text = "LocalQueueStopped", msg.local_queue_stopped(wl.spec.queue_name)
                elif cq.spec.stop_policy != "None":
                    reason, text = "ClusterQueueStopped", msg.cluster_queue_inactive(cq.name, True)
                else:
                    continue
                # Nothing runs yet: Kueue unsets the reservation directly; the queue order is unchanged.
                self.release(key)
                wl.assignment = []
                wl.admitted_at = None
                wl.pending_checks = ()
                self._enqueue(wl)
                out.append(QueueStopEviction(key, cq.name, reason, text, admitted=False))  # type: ignore[arg-type]
        return out

    def complete_eviction(self, key: str, now: float) -> None:
        """An evicted workload's pods are gone: release its quota and requeue it (ordered by eviction time).

        A workload evicted by a stopped queue keeps its queue position (Kueue orders it by creation time); it stays
        pending, outside the queue, until the queue restarts.
        """
        wl = self.workloads[key]
        self.evicting.discard(key)
        if wl.state != EVICTING:
            return
        self.release(key)
        wl.assignment = []
        wl.admitted_at = None
        wl.pending_checks = ()
        if wl.eviction is None or wl.eviction.reason not in QUEUE_STOP_REASONS:
            wl.ts = now
            wl.evicted_at = now
        wl.eviction = None
        self._enqueue(wl)

    def complete_evictions(self, now: float) -> list[str]:
        """Complete every eviction in progress; returns the requeued keys."""
        keys = sorted(self.evicting)
        for key in keys:
            self.complete_eviction(key, now)
        return keys

    def checks_ready(self, key: str) -> bool:
        """Mark every admission check of a quota-reserved workload Ready; True if it became admitted."""
        wl = self.workloads[key]
        if wl.state != RESERVED:
            return False
        wl.pending_checks = ()
        wl.state = ADMITTED
        return True

    def submit(self, spec: Workload) -> _Wl:
        """Add a new pending workload."""
        if spec.key in self.workloads:
            raise ValueError(f"workload {spec.key} already exists")
        return self._add(spec)

    # ------------------------------------------------------------------ fair sharing

    def weighted_shares(self) -> tuple[dict[str, int], dict[str, int]]:
        """Kueue's ``status.fairSharing.weightedShare`` of every ClusterQueue and Cohort (names sorted)."""
        queues = {name: share(self.cqs[name].node).weighted_share for name in sorted(self.cqs)}
        cohorts = {name: share(node).weighted_share for name, node in sorted(self.quota.cohorts.items())}
        return queues, cohorts

    # ------------------------------------------------------------------ export

    def workload_spec(self, wl: _Wl) -> Workload:
        """The Workload dataclass as the engine now sees it."""
        spec = wl.spec
        if wl.state in (ADMITTED, RESERVED, EVICTING):
            admission = Admission(
                cluster_queue=wl.cq or "",
                pod_sets=tuple(PodSetAdmission(a.name, a.count, dict(a.flavors), a.nodes) for a in wl.assignment),
            )
            checks = dict(spec.admission_checks)
            for name in wl.pending_checks:
                checks.setdefault(name, "Pending")
            return replace(
                spec,
                admission=admission,
                admitted_at=wl.admitted_at,
                eviction=wl.eviction,
                admission_checks=checks,
                requeued_at=wl.evicted_at,
            )
        requeued = wl.ts if wl.ts != spec.created_at else spec.requeued_at
        return replace(spec, admission=None, admitted_at=None, eviction=None, requeued_at=requeued)

    def export_state(self) -> ClusterState:
        """The current state as a ClusterState (finished workloads dropped)."""
        workloads = tuple(
            self.workload_spec(w) for w in sorted(self.workloads.values(), key=lambda w: w.key) if w.state != FINISHED
        )
        return replace(self.spec_state, workloads=workloads)
