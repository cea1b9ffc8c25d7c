"""Kueue's exact message texts (catalogue: tests/fixtures/reference/kueue/messages.yaml) and plain-language helpers."""

from __future__ import annotations

from kernel.quantity import format_quantity, is_device_resource

PREEMPTION_REASON_TEXT = {
    "InClusterQueue": "prioritization in the ClusterQueue",
    "InCohortReclamation": "reclamation within the cohort",
    "InCohortFairSharing": "Fair Sharing within the cohort",
    "InCohortReclaimWhileBorrowing": "reclamation within the cohort while borrowing",
}

NO_LONGER_FITS = "Workload no longer fits after processing another workload"
OVERLAPPING_TARGETS = "Workload has overlapping preemption targets with another workload"
NAMESPACE_MISMATCH = "workload namespace doesn't match ClusterQueue selector"
FAILED_CHECKS = "The workload has failed admission checks"
NOT_ALL_CHECKS_READY = "The workload has not all checks ready"
DEACTIVATED = "The workload is deactivated"
CLUSTER_QUEUE_STOPPED = "The ClusterQueue is stopped"
LOCAL_QUEUE_STOPPED = "The LocalQueue is stopped"


def insufficient_unused_quota(resource: str, flavor: str, missing: int) -> str:
    """``insufficient unused quota for R in flavor F, N more needed``."""
    return (
        f"insufficient unused quota for {resource} in flavor {flavor}, {format_quantity(missing, resource)} more needed"
    )


def max_capacity_exceeded(resource: str, flavor: str, previous: int, request: int, maximum: int) -> str:
    """Kueue's ExceedsMaxQuota per-flavor reason."""
    return (
        f"insufficient quota for {resource} in flavor {flavor}, previously considered podsets requests "
        f"({format_quantity(previous, resource)}) + current podset request ({format_quantity(request, resource)}) "
        f"> maximum capacity ({format_quantity(maximum, resource)})"
    )


def resource_unavailable(resource: str) -> str:
    """``resource R unavailable in ClusterQueue``."""
    return f"resource {resource} unavailable in ClusterQueue"


def untolerated_taint(taint_struct: str, flavor: str) -> str:
    """``untolerated taint {k v E <nil>} in flavor F``."""
    return f"untolerated taint {taint_struct} in flavor {flavor}"


def affinity_mismatch(flavor: str) -> str:
    """``flavor F doesn't match node affinity``."""
    return f"flavor {flavor} doesn't match node affinity"


def flavor_not_found(flavor: str) -> str:
    """``flavor F not found``."""
    return f"flavor {flavor} not found"


def tas_not_supported(flavor: str) -> str:
    """``Flavor "F" does not support TopologyAwareScheduling``."""
    return f'Flavor "{flavor}" does not support TopologyAwareScheduling'


def tas_only(flavor: str) -> str:
    """``Flavor "F" supports only TopologyAwareScheduling``."""
    return f'Flavor "{flavor}" supports only TopologyAwareScheduling'


def tas_level_missing(flavor: str) -> str:
    """``Flavor "F" does not contain the requested level``."""
    return f'Flavor "{flavor}" does not contain the requested level'


def tas_cache_missing(flavor: str) -> str:
    """``Flavor "F" information missing in TAS cache`` (its Topology does not exist)."""
    return f'Flavor "{flavor}" information missing in TAS cache'


def tas_not_fit(topology: str, fit: int, total: int, suffix: str) -> str:
    """Kueue's TAS placement failure: fits only N out of M, or none, plus exclusion stats."""
    if fit <= 0:
        return f'topology "{topology}" doesn\'t allow to fit any of {total} pod(s){suffix}'
    return f'topology "{topology}" allows to fit only {fit} out of {total} pod(s){suffix}'


def podset_failed(podset: str, reasons: list[str]) -> str:
    """``couldn't assign flavors to pod set P: r1, r2`` with reasons sorted as strings."""
    return f"couldn't assign flavors to pod set {podset}: {', '.join(sorted(reasons))}"


def pending_preemption_suffix(count: int) -> str:
    """``. Pending the preemption of N workload(s)``."""
    return f". Pending the preemption of {count} workload(s)"


def preempted(uid: str, job_uid: str, reason: str, preemptor_path: str, preemptee_path: str) -> str:
    """The victim's Evicted/Preempted condition message."""
    return (
        f"Preempted to accommodate a workload (UID: {uid or 'UNKNOWN'}, JobUID: {job_uid or 'UNKNOWN'}) "
        f"due to {PREEMPTION_REASON_TEXT[reason]}; preemptor path: {preemptor_path}; preemptee path: {preemptee_path}"
    )


def quota_reserved(cluster_queue: str) -> str:
    """``Quota reserved in ClusterQueue X``."""
    return f"Quota reserved in ClusterQueue {cluster_queue}"


def admission_gated(gates: str) -> str:
    """Kueue's QuotaReserved=False message of a workload with ``kueue.x-k8s.io/admission-gated-by``."""
    return f"Admission is gated by: {gates}"


def local_queue_missing(name: str) -> str:
    """``LocalQueue X doesn't exist``."""
    return f"LocalQueue {name} doesn't exist"


def local_queue_inactive(name: str) -> str:
    """``LocalQueue X is inactive``."""
    return f"LocalQueue {name} is inactive"


def local_queue_stopped(name: str) -> str:
    """``LocalQueue X is stopped``: a quota reservation released because the LocalQueue has a stopPolicy."""
    return f"LocalQueue {name} is stopped"


def cluster_queue_missing(name: str) -> str:
    """``ClusterQueue X doesn't exist``."""
    return f"ClusterQueue {name} doesn't exist"


def cluster_queue_inactive(name: str, stopped: bool) -> str:
    """``ClusterQueue X is stopped`` (stopPolicy) or ``is inactive`` (missing flavor, check, topology)."""
    return f"ClusterQueue {name} is {'stopped' if stopped else 'inactive'}"


# ------------------------------------------------------------------ plain language


def noun(resource: str, amount: int, flavor_label: str = "") -> str:
    """``8 h100 GPUs``, ``3 CPUs``, ``5Gi of memory``, ``2 nvidia.com/mig-1g.10gb``."""
    text = format_quantity(amount, resource)
    label = f"{flavor_label} " if flavor_label else ""
    if resource.endswith("/gpu"):
        return f"{text} {label}GPU{'' if amount == 1 else 's'}"
    if resource == "cpu":
        return f"{text} {label}CPU{'' if amount == 1000 else 's'}"
    if resource in ("memory", "ephemeral-storage"):
        return f"{text} of {label}{resource}"
    if is_device_resource(resource):
        return f"{text} {label}{resource}"
    return f"{text} {label}{resource}"


def qty(resource: str, amount: int) -> str:
    """A quantity as Kueue prints it."""
    return format_quantity(amount, resource)
