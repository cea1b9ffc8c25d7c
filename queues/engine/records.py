"""The engine's working records: workloads, ClusterQueues, queue groups, flavor assignments, cycle outcomes.

Plain mutable objects (``__slots__`` or slotted dataclasses) that ``scheduler.Engine`` keeps for its
incremental accounting, plus the constants that name Kueue's flavor modes, no-fit reasons, preemption
variants and workload states.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from . import messages as msg
from .decisions import AdmissionDecision, PodSetAssignment, Preemption
from .model import ClusterQueue, Eviction, FlavorResource, LocalQueue, PodSet, ResourceQuota, Workload
from .placement import PlacementResult, PodSetRequest
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
#: A workload deleted while it still waited or ran (a timeline's ``delete``): it left the engine's queues.
DELETED = "deleted"


class PodSetInfo:
    """A pod set's requests, per pod and in total (zero requests dropped, resources sorted).

    ``count`` is the pods it asks quota for: the spec's count less its reclaimable pods, or the count a partial
    admission tries (``count`` given). ``zero`` names the resources it requests none of (a request of 0, or any
    request of a pod set of count 0): Kueue still assigns them a flavor when the ClusterQueue covers them.
    """

    __slots__ = ("count", "flavor_checks", "name", "per_pod", "requests", "spec", "total", "zero")

    def __init__(self, spec: PodSet, count: int | None = None) -> None:
        self.spec = spec
        # ``flavor_assignment``'s flavor checks of this pod set, by (ClusterQueue, flavor).
        self.flavor_checks: dict[tuple[str, str], tuple[str, str] | None] = {}
        # ``pod_placement.podset_request``'s node requests, by (the flavors assigned, whether nodes count pods).
        self.requests: dict[tuple, tuple] = {}
        self.name = spec.name
        if count is None:
            count = spec.count
        self.count = count
        per_pod: dict[str, int] = {}
        total: dict[str, int] = {}
        zero: list[str] = []
        for r, v in sorted(spec.requests.items()):
            if v > 0:
                per_pod[r] = v
                total[r] = v * count
                if count == 0:
                    zero.append(r)
            elif v == 0:
                zero.append(r)
        self.per_pod = per_pod
        self.total = total
        self.zero = tuple(zero)


@dataclass(slots=True, init=False)
class PodSetFlavors:
    """A pod set's flavor assignment (internal)."""

    name: str
    count: int
    flavors: dict[str, str]
    modes: dict[str, int]
    reasons: list[str | tuple]
    usage: dict[str, int]
    failed: bool
    no_fit_reason: str
    group_attempts: list[list[dict]]
    placement: PlacementResult | None
    nodes: list[str]

    # Written out (also below): a compiled dataclass's generated __init__ runs as interpreted Python, 4x slower.
    def __init__(
        self,
        name: str,
        count: int,
        flavors: dict[str, str] | None = None,
        modes: dict[str, int] | None = None,
        reasons: list[str | tuple] | None = None,
        usage: dict[str, int] | None = None,
        failed: bool = False,
        no_fit_reason: str = "",
        group_attempts: list[list[dict]] | None = None,
        placement: PlacementResult | None = None,
        nodes: list[str] | None = None,
    ) -> None:
        self.name = name
        self.count = count
        self.flavors = {} if flavors is None else flavors
        self.modes = {} if modes is None else modes
        self.reasons = [] if reasons is None else reasons
        self.usage = {} if usage is None else usage
        self.failed = failed
        self.no_fit_reason = no_fit_reason
        self.group_attempts = [] if group_attempts is None else group_attempts
        self.placement = placement
        self.nodes = [] if nodes is None else nodes

    @property
    def mode(self) -> int:
        """Kueue's representative mode of the pod set."""
        if self.failed:
            return PS_NOFIT
        modes = self.modes
        worst = min(modes.values()) if modes else PS_FIT
        if worst == PS_FIT and not self.reasons:
            return PS_FIT
        if not self.flavors:
            return PS_NOFIT
        return worst


@dataclass(slots=True, init=False)
class FlavorAssignment:
    """Kueue's flavor assignment of a workload: every pod set's flavors, the total usage, the borrowing height."""

    pod_sets: list[PodSetFlavors]
    usage: dict[FlavorResource, int]
    borrow: int
    #: Which node state the placement step read: "" none, "empty" only the node set, "usage" current usage.
    placement_read: str
    #: The pods fit the nodes as they are, but where was not worked out (``pod_placement.placement_stage``
    #: with ``defer``): the pod sets' ``nodes`` are empty until placed.
    nodes_deferred: bool
    #: With ``nodes_deferred``: the single pod set's node request it was found to fit with.
    deferred_request: PodSetRequest | None = field(compare=False)

    def __init__(
        self,
        pod_sets: list[PodSetFlavors],
        usage: dict[FlavorResource, int],
        borrow: int = 0,
        placement_read: str = "",
        nodes_deferred: bool = False,
        deferred_request: PodSetRequest | None = None,
    ) -> None:
        self.pod_sets = pod_sets
        self.usage = usage
        self.borrow = borrow
        self.placement_read = placement_read
        self.nodes_deferred = nodes_deferred
        self.deferred_request = deferred_request

    @property
    def mode(self) -> int:
        """The worst pod-set mode."""
        pod_sets = self.pod_sets
        if not pod_sets:
            return PS_NOFIT
        if len(pod_sets) == 1:
            return pod_sets[0].mode
        return min(ps.mode for ps in pod_sets)

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


#: Every attribute of a ``WorkloadInfo`` (its slots; ``__copy__`` copies them one by one).
_WORKLOAD_FIELDS = (
    "admitted_at",
    "assignment",
    "borrowing",
    "cq",
    "created",
    "deactivated",
    "evicted_at",
    "eviction",
    "full_pod_sets",
    "group",
    "key",
    "lq",
    "note",
    "pending_checks",
    "pod_sets",
    "pods",
    "pods_ready_at",
    "preempted_by",
    "priority",
    "reducible",
    "requeue_at",
    "requeue_count",
    "shape",
    "share_memo",
    "spec",
    "state",
    "ts",
    "usage",
)


class WorkloadInfo:
    """The engine's working record of one workload: queue, state, assignment, usage and pods."""

    __slots__ = _WORKLOAD_FIELDS

    def __init__(self, spec: Workload) -> None:
        self.spec = spec
        self.key = spec.key
        self.priority = spec.priority
        self.created = spec.created_at
        self.ts = spec.requeued_at if spec.requeued_at is not None else spec.created_at
        reclaimable = spec.reclaimable_pods
        self.pod_sets = (
            [PodSetInfo(ps, max(0, ps.count - reclaimable.get(ps.name, 0))) for ps in spec.pod_sets]
            if reclaimable
            else [PodSetInfo(ps) for ps in spec.pod_sets]
        )
        #: The pod sets as the spec asks (``pod_sets`` holds fewer pods while partially admitted).
        self.full_pod_sets = self.pod_sets
        #: Whether a pod set declares a ``minCount`` below its count (Kueue's CanBePartiallyAdmitted).
        self.reducible = False
        for ps in spec.pod_sets:
            if ps.min_count is not None and ps.count > ps.min_count:
                self.reducible = True
        #: When its pods are all Ready (waitForPodsReady; None: not admitted, or not tracked).
        self.pods_ready_at: float | None = None
        #: Kueue's ``requeueState``: PodsReady-timeout requeues, and when the backoff ends (None: not held).
        self.requeue_count = spec.requeue_count
        self.requeue_at = spec.requeue_at
        #: Why the workload is inactive when Kueue deactivated it (empty: active, or deactivated by a user).
        self.deactivated = ""
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
        self.group: ShapeGroup | None = None
        self.shape: tuple = ()
        self.note: dict | None = None
        #: ``fair_sharing``'s shares of this workload as a head, with what they were computed from.
        self.share_memo: tuple | None = None

    def __copy__(self) -> WorkloadInfo:
        """A shallow copy, attribute by attribute (a compiled record has no generic copy)."""
        twin = WorkloadInfo(self.spec)
        for name in _WORKLOAD_FIELDS:
            setattr(twin, name, getattr(self, name))
        return twin

    def sort_key(self) -> tuple:
        """Queue order: priority, then queue time, then key."""
        return (-self.priority, self.ts, self.key)


class ShapeGroup:
    """Pending workloads of one ClusterQueue with the same shape (requests, priority, constraints)."""

    __slots__ = (
        "active",
        "assign_memo",
        "cq",
        "fit_memo",
        "fit_plan",
        "items",
        "quota_blocked",
        "quota_plan",
        "quota_wait",
        "shape",
        "version",
    )

    def __init__(self, cq: ClusterQueueInfo, shape: tuple) -> None:
        self.cq = cq
        self.shape = shape
        self.items: list[tuple[int, float, str, WorkloadInfo]] = []
        self.active = True
        self.version = 0
        # ``queueing.may_fit``'s precomputed check for this shape, and whether it last failed on quota.
        self.fit_plan: tuple | None = None
        self.quota_blocked = False
        # When blocked on quota: per flavor, the (flavor, resource) short and the released total it needs.
        self.quota_wait: tuple[tuple[tuple[str, str], int], ...] | None = None
        # The last ``may_fit`` answer with the quota and node versions it was given at.
        self.fit_memo: tuple | None = None
        # ``cycle``'s last flavor assignment for this shape that did not fit, with the versions it holds for.
        self.assign_memo: tuple | None = None
        # ``flavor_assignment.quota_fit_plan`` for this shape (``(None,)``: none), once computed.
        self.quota_plan: tuple | None = None

    def prune(self) -> list[tuple[int, float, str, WorkloadInfo]]:
        """Drop, from the top of the heap, workloads no longer pending in this group; returns the heap."""
        items = self.items
        while items:
            wl = items[0][3]
            if wl.state == PENDING and wl.group is self:
                break
            heapq.heappop(items)
        return items


@dataclass(slots=True)
class ResourceGroupInfo:
    """A ClusterQueue's resource group: the resources it covers and its flavors, in order."""

    covered: tuple[str, ...]
    flavors: tuple[str, ...]


class ClusterQueueInfo:
    """The engine's working record of one ClusterQueue: compiled quotas, queue heaps, admitted workloads."""

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
        "outside_cqs",
        "parked",
        "path",
        "preempts",
        "quotas",
        "rg_of",
        "rgs",
        "root",
        "spec",
        "stopped",
        "strict",
        "tas_only",
        "wake_memo",
    )

    def __init__(self, spec: ClusterQueue, node: QuotaNode) -> None:
        self.spec = spec
        self.name = spec.name
        self.node = node
        #: The root of its cohort tree (itself without a cohort): the tree does not change.
        self.root = node.root()
        self.rgs = [
            ResourceGroupInfo(tuple(g.covered_resources), tuple(f.name for f in g.flavors))
            for g in spec.resource_groups
        ]
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
        self.groups: dict[tuple, ShapeGroup] = {}
        self.heap: list[tuple] = []
        self.parked: list[ShapeGroup] = []
        # ``queueing._may_wake``'s answer while the parked groups are unchanged (None: to compute).
        self.wake_memo: bool | None = None
        self.blocked = False
        self.admitted: dict[str, WorkloadInfo] = {}
        self.cohort_cqs: list[ClusterQueueInfo] = []
        #: Every other ClusterQueue (not in its cohort tree), in name order.
        self.outside_cqs: list[ClusterQueueInfo] = []

    def single_pod_set_requests(self, wl: WorkloadInfo) -> tuple[PodSetInfo, dict[str, int]] | None:
        """A one-pod-set workload's pod set and its total requests as this queue counts them (with ``pods`` when
        the queue has a pods quota); None with several pod sets."""
        if len(wl.pod_sets) != 1:
            return None
        ps = wl.pod_sets[0]
        requests = dict(ps.total)
        if "pods" in self.rg_of:
            requests["pods"] = ps.count
        return ps, requests


@dataclass(slots=True, init=False)
class CycleEntry:
    """A head nominated in a scheduling cycle: its assignment and preemption targets."""

    wl: WorkloadInfo
    cq: ClusterQueueInfo
    assignment: FlavorAssignment
    targets: list[tuple[WorkloadInfo, str]]
    nominated: bool
    #: A head known inadmissible without its full assignment (``assignment`` has its flavors, usage and
    #: borrowing only, all that fair sharing's order reads): it holds no capacity back.
    quick: bool

    def __init__(
        self,
        wl: WorkloadInfo,
        cq: ClusterQueueInfo,
        assignment: FlavorAssignment,
        targets: list[tuple[WorkloadInfo, str]],
        nominated: bool,
        quick: bool = False,
    ) -> None:
        self.wl = wl
        self.cq = cq
        self.assignment = assignment
        self.targets = targets
        self.nominated = nominated
        self.quick = quick


@dataclass(slots=True, init=False)
class CycleOutcome:
    """What one cycle did (engine-internal form; the public API converts it)."""

    admitted: list[AdmissionDecision]
    preemptions: list[Preemption]
    parked: list[str]

    def __init__(
        self,
        admitted: list[AdmissionDecision] | None = None,
        preemptions: list[Preemption] | None = None,
        parked: list[str] | None = None,
    ) -> None:
        self.admitted = [] if admitted is None else admitted
        self.preemptions = [] if preemptions is None else preemptions
        self.parked = [] if parked is None else parked

    @property
    def changed(self) -> bool:
        """True when the cycle admitted or preempted anything."""
        return bool(self.admitted or self.preemptions)
