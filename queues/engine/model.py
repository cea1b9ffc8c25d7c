"""Input dataclasses of the admission engine: the cluster as Kueue (v1beta2) and Kubernetes describe it.

Conventions (they hold for every class here):

* Quantities are ``int`` in canonical units: cpu in millicores, memory / storage in bytes, extended
  resources (``nvidia.com/gpu`` ...) and ``pods`` as counts. ``quantity.parse_quantity`` converts strings.
* Times are ``float`` seconds on one clock chosen by the caller (a POSIX timestamp is fine); the engine
  never reads the wall clock, so the same input always gives the same output.
* Names follow Kueue's: a workload's ``key`` is ``"namespace/name"``; a ``FlavorResource`` is
  ``(flavor, resource)``.
* All classes are frozen; build new instances (``dataclasses.replace``) to change a state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Quantity = int
ResourceList = Mapping[str, Quantity]
FlavorResource = tuple[str, str]

QueueingStrategy = Literal["BestEffortFIFO", "StrictFIFO"]
StopPolicy = Literal["None", "Hold", "HoldAndDrain"]
WithinClusterQueuePolicy = Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"]
ReclaimWithinCohortPolicy = Literal["Never", "LowerPriority", "Any"]
BorrowWithinCohortPolicy = Literal["Never", "LowerPriority"]
WhenCanBorrow = Literal["MayStopSearch", "TryNextFlavor"]
WhenCanPreempt = Literal["TryNextFlavor", "MayStopSearch"]
FungibilityPreference = Literal["BorrowingOverPreemption", "PreemptionOverBorrowing"]
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
AdmissionCheckState = Literal["Pending", "Ready", "Retry", "Rejected"]
FairSharingStrategy = Literal["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
RequeuingTimestamp = Literal["Eviction", "Creation"]

#: Kueue's default ``fairSharing.preemptionStrategies`` (the only order its validation accepts, or either alone).
DEFAULT_FAIR_SHARING_STRATEGIES: tuple[FairSharingStrategy, ...] = (
    "LessThanOrEqualToFinalShare",
    "LessThanInitialShare",
)

#: Node taint keys that mean "excluded for health" even when ``Node.health_reason`` is not set. The four
#: ``nvidia.com/*-error`` keys are NVSentinel's (the inventory import marks the devices of such a node unhealthy:
#: ``pools.inventory.parse.HEALTH_TAINTS``, which a test keeps a subset of this set).
HEALTH_TAINT_KEYS: frozenset[str] = frozenset(
    {
        "nvidia.com/gpu-xid-error",
        "nvidia.com/gpu-nvlink-error",
        "nvidia.com/syslog-xid-error",
        "nvidia.com/gpu-error",
        "nvidia.com/gpu-unhealthy",
        "nvidia.com/gpu-health",
        "amd.com/gpu-unhealthy",
        "portal.gpu/unhealthy",
        "portal.gpu/quarantined",
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    }
)

#: Node conditions that, when True, report a node's GPUs broken: NVSentinel's health checks (the portal's health
#: policy default, ``pools.models.health``, which a test keeps equal). A condition's message names a GPU by index
#: (``ErrorCode:79 GPU:3 …``); one that names none concerns every GPU of the node.
NODE_HEALTH_CONDITION_TYPES: tuple[str, ...] = (
    "GpuXidError",
    "GpuMemWatch",
    "GpuPcieWatch",
    "GpuInforomWatch",
    "GpuSmWatch",
    "GpuNvlinkWatch",
    "GpuMcuWatch",
    "GpuPmuWatch",
    "GpuDriverWatch",
    "SysLogsXIDError",
    "SysLogsSXIDError",
    "SysLogsGPUFallenOff",
)

#: ``Node.health_gap_by`` of a gap the device plugin made (the default for a Node as Kubernetes reports it).
DEVICE_PLUGIN = "the device plugin"
#: ``Node.health_gap_by`` of a gap the node's own reports made (a condition, a health taint, a quarantine cordon).
NODE_REPORTS = "the node's own health reports"

#: Node label the portal keeps on managed kubernetes nodes with degraded devices (value: how many cards); jobs
#: prefer nodes without it, and a scenario's Node may carry it to give the engine the same hint.
DEGRADED_DEVICES_LABEL = "gpu-pool-portal.io/degraded-devices"


# --------------------------------------------------------------------------- selectors, taints


@dataclass(frozen=True, slots=True)
class LabelSelectorRequirement:
    """One ``matchExpressions`` entry: operator is In, NotIn, Exists or DoesNotExist."""

    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A Kubernetes label selector; the empty selector matches everything."""

    match_labels: Mapping[str, str] = field(default_factory=dict)
    match_expressions: tuple[LabelSelectorRequirement, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    """One node-affinity expression: operator In, NotIn, Exists, DoesNotExist, Gt or Lt."""

    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """A required node-affinity term; expressions are ANDed, terms are ORed."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()


@dataclass(frozen=True, slots=True)
class Taint:
    """A node or flavor taint."""

    key: str
    value: str = ""
    effect: TaintEffect = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod (or flavor) toleration; operator Equal or Exists, empty effect = every effect."""

    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: str = ""


# --------------------------------------------------------------------------- Kueue configuration


@dataclass(frozen=True, slots=True)
class FairSharing:
    """Kueue's Configuration ``fairSharing`` (set = enabled): the preemption strategies, tried in this order."""

    preemption_strategies: tuple[FairSharingStrategy, ...] = DEFAULT_FAIR_SHARING_STRATEGIES


@dataclass(frozen=True, slots=True)
class WaitForPodsReady:
    """Kueue's Configuration ``waitForPodsReady`` (seconds; defaults are Kueue's v1beta2 defaults).

    An admitted workload whose pods are not all Ready ``timeout`` seconds after its admission is evicted
    (``PodsReadyTimeout``) and requeued after a backoff of ``backoff_base_seconds * 2**(n-1)`` (capped at
    ``backoff_max_seconds``) for its n-th requeue; past ``backoff_limit_count`` requeues (None = no limit) it is
    deactivated instead. ``block_admission``: no workload is admitted while an admitted one is not Ready.
    ``requeuing_timestamp``: whether a timed-out workload queues by its eviction (``Eviction``) or its creation.
    """

    timeout: float = 1800.0
    block_admission: bool = False
    recovery_timeout: float | None = None
    requeuing_timestamp: RequeuingTimestamp = "Eviction"
    backoff_limit_count: int | None = None
    backoff_base_seconds: float = 60.0
    backoff_max_seconds: float = 3600.0


@dataclass(frozen=True, slots=True)
class ResourceFlavor:
    """A Kueue ResourceFlavor: one hardware variety (nodeLabels select its nodes)."""

    name: str
    node_labels: Mapping[str, str] = field(default_factory=dict)
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    topology_name: str | None = None
    display_name: str | None = None


@dataclass(frozen=True, slots=True)
class Topology:
    """A Kueue Topology: node label keys from the highest level to the lowest (hostname last)."""

    name: str
    levels: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ResourceQuota:
    """Quota of one resource in one flavor: nominal, borrowingLimit and lendingLimit (None = unset)."""

    name: str
    nominal: Quantity = 0
    borrowing_limit: Quantity | None = None
    lending_limit: Quantity | None = None


@dataclass(frozen=True, slots=True)
class FlavorQuotas:
    """A flavor entry of a resource group with the quota of each covered resource."""

    name: str
    resources: tuple[ResourceQuota, ...] = ()


@dataclass(frozen=True, slots=True)
class ResourceGroup:
    """Resources that must share one flavor per pod set, and the flavors in preference order."""

    covered_resources: tuple[str, ...]
    flavors: tuple[FlavorQuotas, ...]


@dataclass(frozen=True, slots=True)
class UsageDecay:
    """Fairness that remembers (the portal's cohort policy; Kueue's admission fair sharing and KAI's time-aware
    fairness do the like): the ClusterQueues under the Cohort borrow, and are reclaimed from, in the order of
    their share *plus* the part of their recent usage above their nominal quota.

    Recent usage is an exponentially decayed average (Kueue's ``consumedResources``): after ``half_life`` seconds a
    unit of usage counts half. ``window`` (seconds) is how far back the portal reads history to start it and how
    the wait reasons name the period. ``sampling_interval`` sizes the entry penalty an admission adds at once (as
    Kueue's ``usageSamplingInterval`` does). See ``usage_decay``.
    """

    half_life: float
    window: float = 7 * 86400.0
    sampling_interval: float = 300.0


@dataclass(frozen=True, slots=True)
class Cohort:
    """A Kueue Cohort object: optional parent, extra shared quota and a fair-sharing weight.

    ``usage_decay`` (the portal's policy, not a Kueue field): fairness that remembers for the queues below it; the
    highest Cohort on a queue's path that has one applies (as Kueue's KEP-4136 does for admission scopes).
    """

    name: str
    parent: str | None = None
    resource_groups: tuple[ResourceGroup, ...] = ()
    fair_weight: float = 1.0
    usage_decay: UsageDecay | None = None


@dataclass(frozen=True, slots=True)
class BorrowWithinCohort:
    """ClusterQueue ``preemption.borrowWithinCohort``."""

    policy: BorrowWithinCohortPolicy = "Never"
    max_priority_threshold: int | None = None


@dataclass(frozen=True, slots=True)
class PreemptionPolicy:
    """ClusterQueue ``spec.preemption`` (Kueue defaults: Never everywhere)."""

    within_cluster_queue: WithinClusterQueuePolicy = "Never"
    reclaim_within_cohort: ReclaimWithinCohortPolicy = "Never"
    borrow_within_cohort: BorrowWithinCohort = BorrowWithinCohort()


@dataclass(frozen=True, slots=True)
class FlavorFungibility:
    """ClusterQueue ``spec.flavorFungibility`` (Kueue defaults)."""

    when_can_borrow: WhenCanBorrow = "MayStopSearch"
    when_can_preempt: WhenCanPreempt = "TryNextFlavor"
    #: Which flavor wins when every one needs borrowing, preemption or both (both policies TryNextFlavor).
    preference: FungibilityPreference = "BorrowingOverPreemption"


@dataclass(frozen=True, slots=True)
class AdmissionCheckRule:
    """An admission check a ClusterQueue requires; ``on_flavors`` empty = for every flavor."""

    name: str
    on_flavors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ClusterQueue:
    """A Kueue ClusterQueue. ``namespace_selector`` None selects no namespace, ``LabelSelector()`` all.

    ``terminating``: deleted, but kept by its finalizer while workloads it admitted still run (it admits nothing).
    """

    name: str
    cohort: str | None = None
    namespace_selector: LabelSelector | None = LabelSelector()
    queueing_strategy: QueueingStrategy = "BestEffortFIFO"
    resource_groups: tuple[ResourceGroup, ...] = ()
    preemption: PreemptionPolicy = PreemptionPolicy()
    flavor_fungibility: FlavorFungibility = FlavorFungibility()
    admission_checks: tuple[AdmissionCheckRule, ...] = ()
    stop_policy: StopPolicy = "None"
    fair_weight: float = 1.0
    #: Recent usage per resource (decayed average, canonical units) as of ``consumed_at``: Kueue's
    #: ``status.fairSharing.admissionFairSharingStatus.consumedResources`` and ``lastUpdate``. Read only under a
    #: Cohort with ``usage_decay``; ``consumed_at`` None = as of the engine's start.
    consumed: Mapping[str, float] = field(default_factory=dict)
    consumed_at: float | None = None
    terminating: bool = False


@dataclass(frozen=True, slots=True)
class LocalQueue:
    """A Kueue LocalQueue (namespaced) pointing at a ClusterQueue."""

    namespace: str
    name: str
    cluster_queue: str
    stop_policy: StopPolicy = "None"

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Namespace:
    """A Kubernetes Namespace; ``kubernetes.io/metadata.name`` is implied as Kubernetes sets it."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WorkloadPriorityClass:
    """A Kueue WorkloadPriorityClass."""

    name: str
    value: int
    description: str = ""


@dataclass(frozen=True, slots=True)
class AdmissionCheck:
    """A Kueue AdmissionCheck; an inactive check makes the ClusterQueues using it inactive."""

    name: str
    controller_name: str = ""
    active: bool = True


# --------------------------------------------------------------------------- nodes


@dataclass(frozen=True, slots=True)
class Node:
    """A Kubernetes Node as the pool sees it.

    Health: the portal excludes unhealthy devices by lowering ``allocatable`` below ``capacity``
    (for extended resources such as ``nvidia.com/gpu`` that gap counts as health-excluded) and/or by a
    health taint (``HEALTH_TAINT_KEYS``). ``health_reason`` (non-empty) marks the node as carrying a
    health exclusion and is quoted in messages; a NotReady node counts as health-excluded, and so does a
    cordoned node whose ``health_reason`` is set. ``degraded_devices`` counts usable but degraded devices:
    placement uses such nodes last (the node label ``DEGRADED_DEVICES_LABEL`` carries the count in scenarios).
    ``health_gap_by`` says who lowered allocatable below capacity, for the wait reasons: empty for a Node as
    Kubernetes reports it (the device plugin did), else the portal's own source (its device records).
    """

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    unschedulable: bool = False
    capacity: ResourceList = field(default_factory=dict)
    allocatable: ResourceList = field(default_factory=dict)
    health_reason: str = ""
    degraded_devices: int = 0
    health_gap_by: str = ""


# --------------------------------------------------------------------------- workloads


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """A pod set's topology request (node label key of a Topology level)."""

    required: str | None = None
    preferred: str | None = None
    unconstrained: bool = False

    @property
    def requested(self) -> bool:
        """True when the pod set asks for topology-aware scheduling."""
        return bool(self.required or self.preferred or self.unconstrained)


@dataclass(frozen=True, slots=True)
class PodSet:
    """A group of identical pods: ``requests`` are per pod (sum of containers)."""

    name: str = "main"
    count: int = 1
    requests: ResourceList = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    node_affinity: tuple[NodeSelectorTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    topology: TopologyRequest | None = None
    #: Kueue's ``minCount`` (partial admission): the fewest pods the pod set may be admitted with (None = all).
    min_count: int | None = None


@dataclass(frozen=True, slots=True)
class PodSetAdmission:
    """Where an admitted pod set runs: flavor per resource and one node name per pod (may be empty)."""

    name: str
    count: int
    flavors: Mapping[str, str] = field(default_factory=dict)
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Admission:
    """A workload's quota reservation (Kueue ``status.admission``)."""

    cluster_queue: str
    pod_sets: tuple[PodSetAdmission, ...] = ()


@dataclass(frozen=True, slots=True)
class Eviction:
    """An eviction that was issued but whose pods still hold their quota (the victim is terminating)."""

    reason: str
    message: str
    preemptor: str | None = None
    issued_at: float = 0.0


@dataclass(frozen=True, slots=True)
class Protection:
    """The portal's preemption protection of a workload while it runs (beyond Kueue; docs/engine.md, *Protected
    work*). Seconds, counted from the workload's admission (its run's start):

    * ``min_runtime``: not a preemption candidate before it has run that long;
    * ``finishing_window`` with ``max_runtime`` (what is left of its declared maximum runtime at this admission):
      not a candidate in the last ``finishing_window`` seconds before ``max_runtime`` (it ends by then anyway);
    * ``checkpoint_interval`` with ``checkpoint_grace``: it writes a checkpoint every ``checkpoint_interval`` seconds
      of its run and is a candidate only in the ``checkpoint_grace`` seconds after one (work lost: at most the
      grace); between those windows it is protected until its next checkpoint.

    ``by_priority``: the protection is Kueue's priority (Kubernetes mode: the portal raises the Workload's priority
    while a rule holds), so a queue whose policy for the workload is ``Any`` (``reclaimWithinCohort: Any``) may still
    preempt it, as Kueue would; otherwise no queue may while a rule holds.
    """

    min_runtime: float = 0.0
    max_runtime: float | None = None
    finishing_window: float = 0.0
    checkpoint_interval: float | None = None
    checkpoint_grace: float = 0.0
    by_priority: bool = False


@dataclass(frozen=True, slots=True)
class Workload:
    """A Kueue Workload: pending (``admission`` None) or holding quota.

    ``admission_checks`` maps check name to state; with an admission whose required checks are not all
    ``Ready`` the workload has quota reserved but is not admitted (awaiting provisioning).
    ``requeued_at`` is the eviction time of a requeued workload (Kueue orders those by it).
    ``submit_at`` and ``runtime`` are simulation facts (seconds) used by replays and ETA.
    ``reclaimable_pods`` is Kueue's ``status.reclaimablePods`` (pods of a pod set that finished for good: they
    neither need nor hold quota). ``pods_ready_after`` (a simulation fact) is how long after its admission every
    pod is Ready (None: at once; ``math.inf``: never), for ``waitForPodsReady``; ``requeue_count`` and
    ``requeue_at`` are Kueue's ``status.requeueState`` (PodsReady-timeout requeues so far, the backoff's end).
    ``admission_gated_by`` is the annotation ``kueue.x-k8s.io/admission-gated-by`` (non-empty: Kueue does not queue
    it until the gate is removed). ``protection`` (the portal's, None: none) keeps it from being preempted at times
    of its run (``Protection``).
    """

    namespace: str
    name: str
    queue_name: str
    pod_sets: tuple[PodSet, ...]
    priority: int = 0
    priority_class: str | None = None
    created_at: float = 0.0
    uid: str = ""
    job_uid: str = ""
    active: bool = True
    admission: Admission | None = None
    admitted_at: float | None = None
    admission_checks: Mapping[str, AdmissionCheckState] = field(default_factory=dict)
    eviction: Eviction | None = None
    requeued_at: float | None = None
    submit_at: float | None = None
    runtime: float | None = None
    reclaimable_pods: Mapping[str, int] = field(default_factory=dict)
    pods_ready_after: float | None = None
    requeue_count: int = 0
    requeue_at: float | None = None
    admission_gated_by: str = ""
    protection: Protection | None = None

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


# --------------------------------------------------------------------------- reservations


@dataclass(frozen=True, slots=True)
class QuotaHold:
    """Capacity reserved for one ClusterQueue over a window (the portal's reservations; a scenario's ``Reservation``).

    In force from ``start`` (inclusive) to ``end`` (exclusive): the queue's guaranteed quota of ``flavor`` /
    ``resource`` rises by ``count`` and the nominal quota of the rest of its cohort tree falls by as much
    (``queues.engine.reservations``): no capacity is invented. ``holder`` names who it is for and ``until`` its end,
    as people read them ("Speech", "17:00 UTC"); empty, the queue's name and the end in engine seconds are used.
    """

    name: str
    cluster_queue: str
    flavor: str
    resource: str
    count: Quantity
    start: float
    end: float
    holder: str = ""
    until: str = ""


# --------------------------------------------------------------------------- the whole state


@dataclass(frozen=True, slots=True)
class ClusterState:
    """Everything the engine reads: configuration, nodes and workloads. No Nodes = quota-only Kueue.

    ``fair_sharing`` is Kueue's manager Configuration ``fairSharing``: None (the default) = fair sharing off.
    ``wait_for_pods_ready`` is its ``waitForPodsReady``: None (the default) = pods count as Ready once admitted.
    ``reservations``: quota holds over windows; ``cluster_queues`` and ``cohorts`` are the quota without them, and
    the engine applies those in force at its time (an engine built, or rebuilt, at ``now``; a replay at each edge).
    """

    flavors: tuple[ResourceFlavor, ...] = ()
    topologies: tuple[Topology, ...] = ()
    cohorts: tuple[Cohort, ...] = ()
    cluster_queues: tuple[ClusterQueue, ...] = ()
    local_queues: tuple[LocalQueue, ...] = ()
    namespaces: tuple[Namespace, ...] = ()
    priority_classes: tuple[WorkloadPriorityClass, ...] = ()
    admission_checks: tuple[AdmissionCheck, ...] = ()
    nodes: tuple[Node, ...] = ()
    workloads: tuple[Workload, ...] = ()
    fair_sharing: FairSharing | None = None
    wait_for_pods_ready: WaitForPodsReady | None = None
    reservations: tuple[QuotaHold, ...] = ()
