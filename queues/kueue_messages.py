"""Kueue's own words → the portal's wait-reason codes, with the numbers parsed out of them.

Kueue explains a pending or evicted Workload in its condition messages (catalogue:
``tests/fixtures/reference/kueue/messages.yaml``, 52 entries, old and new wordings). This module recognises every one of
them, parses their figures (missing quota, maximum capacity, pods that fit, excluded nodes…) and turns them into
one code of the closed set of DESIGN.md, combined with what the portal knows of the pool (quota use of the team's
ClusterQueue and its cohort, free and health-excluded devices) where the message alone cannot decide:

* ``insufficient unused quota`` → ``quota_exhausted`` (the team is over its nominal quota and cannot borrow),
  ``borrow_limit`` (the cohort has idle quota but the team's borrowing limit is reached), ``class_exhausted``
  (the whole cohort's quota of that flavor is in use) or ``higher_priority_ahead`` (the team is within its own
  quota: capacity it is owed is held by others ahead of it);
* TAS placement failures → ``health_blocked`` (health-excluded nodes hold the missing room),
  ``topology_fragmented`` (enough free devices in total, not together) or ``class_exhausted`` (not enough free);
* an admitted workload whose pods the kube-scheduler cannot place → the same three, from the scheduler's message.

Text that matches nothing yields the code :data:`UNRECOGNISED` with the raw message — never silence, and never a
code of the closed set: the sync stores it on the job as ``wait_reason=""`` with the raw text in ``wait_message``
and ``{"unrecognised": true}`` in the details. The reason (granular or legacy ``Pending``/``Inadmissible``/
``Waiting``) is a hint only, kept in the details.

Pure Python: no Django, no ``kubernetes``; the explain command and the sync services share it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kernel.quantity import format_quantity, is_device_resource, parse_quantity
from queues.engine.model import HEALTH_TAINT_KEYS

UNRECOGNISED = "unrecognised"

# Codes of the closed set (queues.models.WaitReason), repeated here so the module needs no Django.
QUOTA_EXHAUSTED = "quota_exhausted"
BORROW_LIMIT = "borrow_limit"
NO_MATCHING_FLAVOR = "no_matching_flavor"
CLASS_EXHAUSTED = "class_exhausted"
TOPOLOGY_FRAGMENTED = "topology_fragmented"
HEALTH_BLOCKED = "health_blocked"
HIGHER_PRIORITY_AHEAD = "higher_priority_ahead"
AWAITING_PROVISIONING = "awaiting_provisioning"
PREEMPTION_IN_PROGRESS = "preemption_in_progress"
EXCEEDS_MAXIMUM = "exceeds_maximum"
MISCONFIGURED = "misconfigured"
CLUSTER_UNREACHABLE = "cluster_unreachable"
WAIT_CODES = (
    QUOTA_EXHAUSTED,
    BORROW_LIMIT,
    NO_MATCHING_FLAVOR,
    CLASS_EXHAUSTED,
    TOPOLOGY_FRAGMENTED,
    HEALTH_BLOCKED,
    HIGHER_PRIORITY_AHEAD,
    AWAITING_PROVISIONING,
    PREEMPTION_IN_PROGRESS,
    EXCEEDS_MAXIMUM,
    MISCONFIGURED,
    CLUSTER_UNREACHABLE,
)
#: Codes that say "waiting will help" — a flavor with one of these wins over flavors that can never fit.
WAITABLE = (
    QUOTA_EXHAUSTED,
    BORROW_LIMIT,
    CLASS_EXHAUSTED,
    TOPOLOGY_FRAGMENTED,
    HEALTH_BLOCKED,
    HIGHER_PRIORITY_AHEAD,
    PREEMPTION_IN_PROGRESS,
)
#: How serious a never-fits code is when no flavor can wait (Kueue's own severity order).
NEVER_ORDER = (MISCONFIGURED, EXCEEDS_MAXIMUM, NO_MATCHING_FLAVOR)

#: Granular and legacy QuotaReserved=False reasons → the code they suggest (a hint only).
REASON_HINTS = {
    "NoMatchingFlavor": NO_MATCHING_FLAVOR,
    "ExceedsMaxQuota": EXCEEDS_MAXIMUM,
    "WaitingForQuota": QUOTA_EXHAUSTED,
    "TopologyPlacementFailed": TOPOLOGY_FRAGMENTED,
    "WaitingForPreemptedWorkloads": PREEMPTION_IN_PROGRESS,
    "WaitingForPodsReady": HIGHER_PRIORITY_AHEAD,
    "Misconfigured": MISCONFIGURED,
    "Suspended": MISCONFIGURED,
    "AdmissionGated": AWAITING_PROVISIONING,
    "Deactivated": MISCONFIGURED,
    "OnHold": MISCONFIGURED,
    "PendingEvaluation": HIGHER_PRIORITY_AHEAD,
    "Inadmissible": MISCONFIGURED,
    "Waiting": HIGHER_PRIORITY_AHEAD,
}


# --- the pool view ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QuotaFigures:
    """One (ClusterQueue, flavor, resource): its quota and what is reserved, and its cohort's totals."""

    nominal: int
    used: int
    borrowing_limit: int | None = None
    in_cohort: bool = False
    cohort_capacity: int | None = None
    cohort_used: int | None = None


@dataclass(frozen=True)
class PoolFigures:
    """One (flavor, resource) of the pool: present units, free usable units, units excluded for health."""

    total: int
    free: int
    health_excluded: int = 0
    max_free_per_node: int = 0


@dataclass
class MessageContext:
    """What the portal knows beyond Kueue's text; every part is optional (empty means "unknown")."""

    cluster_queue: str = ""
    quotas: dict[tuple[str, str, str], QuotaFigures] = field(default_factory=dict)
    pool: dict[tuple[str, str], PoolFigures] = field(default_factory=dict)
    flavor_labels: dict[str, str] = field(default_factory=dict)
    topology_flavors: dict[str, list[str]] = field(default_factory=dict)
    class_flavors: tuple[str, ...] = ()
    #: Total request of the workload per resource, and per pod.
    request: dict[str, int] = field(default_factory=dict)
    per_pod: dict[str, int] = field(default_factory=dict)
    health_taint_keys: frozenset[str] = HEALTH_TAINT_KEYS

    def quota(self, flavor: str, resource: str) -> QuotaFigures | None:
        """Figures of the workload's ClusterQueue for a flavor/resource."""
        return self.quotas.get((self.cluster_queue, flavor, resource))

    def label(self, flavor: str) -> str:
        """A flavor's display name."""
        return self.flavor_labels.get(flavor) or flavor

    def device_resource(self) -> str:
        """The device resource the workload asks for (first extended resource), or ""."""
        for name in (*self.per_pod, *self.request):
            if is_device_resource(name):
                return name
        return ""


# --- results ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlavorReason:
    """One per-flavor reason found inside a flavor-assignment message."""

    id: str
    text: str
    code: str
    flavor: str = ""
    resource: str = ""
    numbers: dict[str, Any] = field(default_factory=dict)
    plain: str = ""


@dataclass(frozen=True)
class Translation:
    """The portal's reading of one Kueue text."""

    code: str
    message: str
    kueue_message: str
    ids: tuple[str, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def recognised(self) -> bool:
        """Whether every part of the text was understood."""
        return self.code != UNRECOGNISED


def _q(value: str, resource: str) -> int | None:
    """A quantity from a message as an int in canonical units (None when it does not parse)."""
    try:
        return parse_quantity(value, resource)
    except ValueError:
        return None


def _fmt(value: int | None, resource: str) -> str:
    return "?" if value is None else format_quantity(value, resource)


def _res_label(resource: str) -> str:
    """How a resource reads in a sentence."""
    if resource in ("nvidia.com/gpu", "amd.com/gpu"):
        return "GPUs"
    if resource.startswith("nvidia.com/mig-"):
        return f"MIG {resource.removeprefix('nvidia.com/mig-')} slices"
    return resource


# --- per-flavor reasons ----------------------------------------------------------------------------------------

_Q = r"\S+"
_EXCLUSION_ITEM = (
    r'(?:nodeSelector|affinity|topologyDomain|schedulerLibraryNoFit): \d+|taint "[^"]*": \d+|resource "[^"]*": \d+'
)
_EXCLUSION_LIST = rf"(?:{_EXCLUSION_ITEM})(?:, (?:{_EXCLUSION_ITEM}))*"
_EXCLUSIONS = rf"(?:\. Total nodes: (?P<total_nodes>\d+); excluded: (?P<exclusions>{_EXCLUSION_LIST}))?"

#: (id, pattern anchored where the scan stands, default code). Order matters where texts share a prefix.
FLAVOR_PATTERNS: tuple[tuple[str, re.Pattern, str], ...] = tuple(
    (i, re.compile(p), c)
    for i, p, c in (
        (
            "insufficient_unused_quota",
            rf"insufficient unused quota for (?P<resource>\S+) in flavor (?P<flavor>\S+), "
            rf"(?P<missing>{_Q}) more needed",
            QUOTA_EXHAUSTED,
        ),
        (  # Kueue v0.9 and earlier
            "insufficient_unused_quota",
            rf"insufficient unused quota in cohort for (?P<resource>\S+) in flavor (?P<flavor>\S+), "
            rf"(?P<missing>{_Q}) more needed",
            QUOTA_EXHAUSTED,
        ),
        (
            "max_capacity_exceeded",
            r"insufficient quota for (?P<resource>\S+) in flavor (?P<flavor>\S+), previously considered podsets "
            r"requests \((?P<previous>[^)]*)\) \+ current podset request \((?P<request>[^)]*)\) > maximum capacity "
            r"\((?P<max>[^)]*)\)",
            EXCEEDS_MAXIMUM,
        ),
        (
            "max_capacity_exceeded_legacy",
            r"insufficient quota for (?P<resource>\S+) in flavor (?P<flavor>\S+), request > maximum capacity "
            r"\((?P<request>\S+) > (?P<max>[^)\s]+)\)",
            EXCEEDS_MAXIMUM,
        ),
        (  # Kueue v0.9 and earlier
            "max_capacity_exceeded_legacy",
            r"insufficient quota for (?P<resource>\S+) in flavor (?P<flavor>\S+) in ClusterQueue",
            EXCEEDS_MAXIMUM,
        ),
        ("resource_not_in_clusterqueue", r"resource (?P<resource>\S+) unavailable in ClusterQueue", NO_MATCHING_FLAVOR),
        (
            "untolerated_taint",
            r"untolerated taint \{(?P<key>\S*) (?P<value>\S*) (?P<effect>\S+) [^}]*\} in flavor (?P<flavor>[^\s,]+)",
            NO_MATCHING_FLAVOR,
        ),
        ("node_affinity_mismatch", r"flavor (?P<flavor>\S+) doesn't match node affinity", NO_MATCHING_FLAVOR),
        ("flavor_not_found", r"flavor (?P<flavor>\S+) not found", MISCONFIGURED),
        (
            "flavor_considered_missing_resource",
            r"flavor (?P<flavor>\S+) does not provide resource (?P<resource>[^\s,;)]+)",
            NO_MATCHING_FLAVOR,
        ),
        (
            "tas_flavor_not_tas",
            r'Flavor "(?P<flavor>[^"]+)" does not support TopologyAwareScheduling',
            NO_MATCHING_FLAVOR,
        ),
        (
            "tas_flavor_only_tas",
            r'Flavor "(?P<flavor>[^"]+)" supports only TopologyAwareScheduling',
            NO_MATCHING_FLAVOR,
        ),
        ("tas_level_missing", r'Flavor "(?P<flavor>[^"]+)" does not contain the requested level', NO_MATCHING_FLAVOR),
        ("tas_cache_missing", r'Flavor "(?P<flavor>[^"]+)" information missing in TAS cache', MISCONFIGURED),
        (
            "tas_fits_only_some",
            rf'topology "(?P<topology>[^"]+)" allows to fit only (?P<fit>\d+) out of (?P<total>\d+) '
            rf"(?P<unit>pod|slice)\(s\){_EXCLUSIONS}",
            TOPOLOGY_FRAGMENTED,
        ),
        (
            "tas_fits_none",
            rf'topology "(?P<topology>[^"]+)" doesn\'t allow to fit any of (?P<total>\d+) (?P<unit>pod|slice)\(s\)'
            rf"{_EXCLUSIONS}",
            TOPOLOGY_FRAGMENTED,
        ),
        (
            "tas_multilayer_no_fit",
            r'topology "(?P<topology>[^"]+)" doesn\'t allow to fit'
            r"(?:; (?P<layers>\d+/\d+ slice\(s\) fit on level [^\s;,]+"
            r"(?:; \d+/\d+ slice\(s\) fit on level [^\s;,]+)*))?",
            TOPOLOGY_FRAGMENTED,
        ),
        (
            "tas_no_requested_level",
            r"(?:no requested topology level(?: for slices)?: (?P<level>[^\s,;]+)|podset slice topology "
            r"(?P<slice>\S+) is above the podset topology (?P<podset_level>[^\s,;]+)|no topology domains at level: "
            r"(?P<domain_level>[^\s,;]+))",
            NO_MATCHING_FLAVOR,
        ),
        (  # the exclusion statistics on their own (they normally follow a TAS reason)
            "tas_exclusion_stats",
            rf"\. Total nodes: (?P<total_nodes>\d+); excluded: (?P<exclusions>{_EXCLUSION_LIST})",
            TOPOLOGY_FRAGMENTED,
        ),
    )
)

_EXCLUSION_RE = re.compile(
    r"(?:(?P<plain>nodeSelector|affinity|topologyDomain|schedulerLibraryNoFit)|"
    r'(?P<what>taint|resource) "(?P<name>[^"]*)"): (?P<n>\d+)'
)


def _exclusions(text: str | None) -> dict[str, Any]:
    """``nodeSelector: 2, resource "cpu": 1, taint "k=v:NoSchedule": 1`` → structured counts."""
    out: dict[str, Any] = {"taints": {}, "resources": {}}
    for m in _EXCLUSION_RE.finditer(text or ""):
        n = int(m.group("n"))
        if m.group("plain"):
            out[m.group("plain")] = n
        elif m.group("what") == "taint":
            out["taints"][m.group("name")] = n
        else:
            out["resources"][m.group("name")] = n
    return out


def _scan_reasons(text: str) -> tuple[list[FlavorReason], list[str]]:
    """Per-flavor reasons of a ``, ``-joined list (commas inside TAS statistics are not separators)."""
    found: list[FlavorReason] = []
    unknown: list[str] = []
    pos = 0
    while pos < len(text):
        for reason_id, pattern, code in FLAVOR_PATTERNS:
            m = pattern.match(text, pos)
            if m and (m.end() == len(text) or text.startswith(", ", m.end()) or text.startswith(". ", m.end())):
                groups = {k: v for k, v in m.groupdict().items() if v is not None}
                found.append(
                    FlavorReason(
                        id=reason_id,
                        text=m.group(0),
                        code=code,
                        flavor=groups.pop("flavor", ""),
                        resource=groups.pop("resource", ""),
                        numbers=groups,
                    )
                )
                pos = m.end()
                break
        else:
            nxt = text.find(", ", pos)
            end = len(text) if nxt < 0 else nxt
            unknown.append(text[pos:end])
            pos = end
        if text.startswith(", ", pos):
            pos += 2
    return found, unknown


# --- whole-message patterns -------------------------------------------------------------------------------------

#: (id, full-match pattern, default code). Codes of None are decided in :func:`_whole`.
WHOLE_PATTERNS: tuple[tuple[str, re.Pattern, str | None], ...] = tuple(
    (i, re.compile(p), c)
    for i, p, c in (
        (
            "podset_flavor_assignment_error",
            r"failed to assign flavors to pod set (?P<podset>[^:]+): (?P<error>.+)",
            MISCONFIGURED,
        ),
        ("no_longer_fits", r"Workload no longer fits after processing another workload", HIGHER_PRIORITY_AHEAD),
        (
            "overlapping_preemption_targets_deferred",
            r"Workload has overlapping preemption targets with another workload, but will fit after these "
            r"preemptions complete",
            PREEMPTION_IN_PROGRESS,
        ),
        (
            "overlapping_preemption_targets",
            r"Workload has overlapping preemption targets with another workload",
            PREEMPTION_IN_PROGRESS,
        ),
        (
            "waiting_for_pods_ready_block",
            r"waiting for all admitted workloads to be in PodsReady condition",
            HIGHER_PRIORITY_AHEAD,
        ),
        ("failed_admission_checks_pending", r"The workload has failed admission checks", AWAITING_PROVISIONING),
        ("preemption_gated", r"Workload requires preemption, but it's gated", PREEMPTION_IN_PROGRESS),
        (
            "local_queue_missing",
            r"LocalQueue (?P<localqueue>\S+) (?:doesn't exist|is terminating or missing)",
            MISCONFIGURED,
        ),
        ("local_queue_inactive", r"LocalQueue (?P<localqueue>\S+) is (?:inactive|stopped)", MISCONFIGURED),
        (
            "cluster_queue_missing",
            r"ClusterQueue (?P<clusterqueue>\S+) (?:doesn't exist|not found|is terminating or missing)",
            MISCONFIGURED,
        ),
        ("cluster_queue_inactive", r"ClusterQueue (?P<clusterqueue>\S+) is (?:inactive|stopped)", MISCONFIGURED),
        (
            "namespace_selector_mismatch",
            r"workload namespace (?:doesn't match ClusterQueue selector|\"(?P<namespace>[^\"]+)\" does not exist(?::"
            r" (?P<detail>.+))?)",
            MISCONFIGURED,
        ),
        ("resources_validation_failed", r"resources validation failed: (?P<detail>.+)", EXCEEDS_MAXIMUM),
        ("limitrange_violation", r"resources didn't satisfy LimitRange constraints: (?P<detail>.+)", EXCEEDS_MAXIMUM),
        (
            "admission_gated",
            r"(?:Admission is gated by: (?P<gates>.+)|Workload admission is gated by: (?P<event_gates>.+)|"
            r"AdmissionGatedBy cleared, waiting for quota reservation)",
            AWAITING_PROVISIONING,
        ),
        (
            "pending_evaluation",
            r"(?:Workload is pending evaluation in the scheduling queue|Bypassed scheduling evaluation because an "
            r"equivalent workload recently failed)",
            HIGHER_PRIORITY_AHEAD,
        ),
        ("deactivated", r"The workload is deactivated(?: due to (?P<cause>.+))?", MISCONFIGURED),
        (
            "deactivation_target",
            r"(?:exceeding the maximum number of re-queuing retries|exceeding the maximum execution time|"
            r"AdmissionChecks? in (?P<state>Rejected|Retry) state: (?P<checks>.+))",
            MISCONFIGURED,
        ),
        (
            "preempted",
            r"Preempted to accommodate (?:a workload \(UID: (?P<uid>[^,)]+)(?:, JobUID: (?P<job_uid>[^)]+))?\)"
            r"(?: due to (?P<why>.+?)| in the (?P<why_v07>.+?))(?:; preemptor path: (?P<preemptor_path>\S+); "
            r"preemptee path: (?P<preemptee_path>\S+))?(?P<priorities>; preemptor effective priority: .*)?"
            r"|a higher priority Workload)",
            HIGHER_PRIORITY_AHEAD,
        ),
        ("pods_ready_timeout", r"Exceeded the PodsReady timeout (?P<workload>\S+)", CLASS_EXHAUSTED),
        (
            "admission_check_retry_eviction",
            r"Evicted due to AdmissionChecks? in (?P<state>Retry) state: (?P<checks>.+)",
            AWAITING_PROVISIONING,
        ),
        ("queue_stopped_eviction", r"The (?P<kind>ClusterQueue|LocalQueue) is stopped", MISCONFIGURED),
        (
            "tas_no_node_replacement",
            r"Workload was evicted as there was no replacement for unhealthy node\(s\): (?P<nodes>.+)",
            HEALTH_BLOCKED,
        ),
        (
            "tas_multiple_node_failures",
            r"Workload eviction triggered due to multiple TAS assigned node failures, including: (?P<nodes>.+)",
            HEALTH_BLOCKED,
        ),
        (
            "requeued_messages",
            r"The (?:workload was reactivated|workload backoff was finished|LocalQueue was restarted after being "
            r"stopped|ClusterQueue was restarted after being stopped)",
            HIGHER_PRIORITY_AHEAD,
        ),
        (
            "pods_ready_messages",
            r"(?P<pods>Not all pods are ready or succeeded|At least one pod has failed, waiting for recovery|All pods "
            r"reached readiness and the workload is running)",
            None,
        ),
        (
            "admitted_condition_messages",
            r"(?P<admitted>The workload is admitted|The workload has no reservation(?: and not all checks ready)?|"
            r"The workload has not all checks ready|There are pending delayed topology requests)",
            None,
        ),
        (
            "quota_reserved_true",
            r"(?:Quota reserved in ClusterQueue (?P<clusterqueue>\S+?)(?:, wait time since queued was "
            r"(?P<wait_s>\d+)s)?(?:; Flavors considered: (?P<considered>.+))?|Admitted by ClusterQueue "
            r"(?P<admitted_by>\S+?)(?:, wait time since reservation was (?P<reservation_wait_s>\d+)s)?)",
            None,
        ),
        (
            "admission_check_state_messages",
            r"(?:Retrying after (?:failure|booking expired): (?P<detail>.+)|the check is not active|the provisioning "
            r"request is not needed|Reset to Pending after eviction\. Previously: (?P<prev>\w+)|Admission check "
            r"(?P<check>\S+) updated state from (?P<from>\w+) to (?P<to>\w+)(?: with message: (?P<message>.+))?)",
            AWAITING_PROVISIONING,
        ),
        (
            "cluster_queue_active_condition",
            r"(?:Can't admit new workloads(?:: (?P<causes>.+)\.|\.|; clusterQueue is terminating)|Can admit new "
            r"workloads|Can submit new workloads to localQueue|Can't submit new workloads to clusterQueue|"
            r"LocalQueue is stopped)",
            None,
        ),
        (
            "job_events",
            r"(?:Created Workload: (?P<workload>\S+)|Admitted by clusterQueue (?P<clusterqueue>\S+)|"
            r"WorkloadPriorityClass \"(?P<wpc>[^\"]+)\" not found|Kueue managed child job suspended)",
            None,
        ),
        ("on_hold", r"Job is on hold", MISCONFIGURED),
    )
)

_PODSET_PREFIX = "couldn't assign flavors to pod set "
_SUFFIX_RE = re.compile(
    r"(?:\. Pending the preemption of (?P<preempting>\d+) workload\(s\))?"
    r"(?:\. Preempting (?P<failed>\d+) workload\(s\) failed, will retry\.)?$"
)


# --- deciding with the pool view -------------------------------------------------------------------------------


def _quota_code(reason: FlavorReason, ctx: MessageContext | None) -> tuple[str, str]:
    """quota_exhausted | borrow_limit | class_exhausted | higher_priority_ahead, and the sentence that says why."""
    resource, flavor = reason.resource, reason.flavor
    missing = _q(str(reason.numbers.get("missing", "")), resource)
    label = ctx.label(flavor) if ctx else flavor
    what = f"{_fmt(missing, resource)} more {_res_label(resource)} needed"
    figures = ctx.quota(flavor, resource) if ctx else None
    if figures is None or missing is None:
        return QUOTA_EXHAUSTED, f"Your team's quota of {_res_label(resource)} on {label} is in use: {what}."
    request = ctx.request.get(resource) if ctx else None
    nominal = figures.nominal
    if request is not None and figures.used + request <= nominal:
        return (
            HIGHER_PRIORITY_AHEAD,
            f"Your team is within its quota of {_fmt(nominal, resource)} {_res_label(resource)} on {label}, but that "
            f"capacity is held by other work ahead of this job (lent to the cohort or reserved for an earlier "
            f"job): {what}.",
        )
    if not figures.in_cohort:
        return (
            QUOTA_EXHAUSTED,
            f"Your team's quota of {_fmt(nominal, resource)} {_res_label(resource)} on {label} is in use "
            f"({_fmt(figures.used, resource)} reserved) and it cannot borrow: {what}.",
        )
    cohort_free = None
    if figures.cohort_capacity is not None and figures.cohort_used is not None:
        cohort_free = figures.cohort_capacity - figures.cohort_used
    if figures.borrowing_limit is not None and request is not None:
        ceiling = nominal + figures.borrowing_limit
        if figures.used + request > ceiling and (cohort_free is None or cohort_free >= missing):
            return (
                BORROW_LIMIT,
                f"The cohort has idle {_res_label(resource)} on {label}, but your team reached its borrowing limit "
                f"({_fmt(figures.borrowing_limit, resource)} above its quota of {_fmt(nominal, resource)}): {what}.",
            )
    if cohort_free is not None and cohort_free < missing:
        return (
            CLASS_EXHAUSTED,
            f"Every {label} device the cohort shares is in use ({_fmt(figures.cohort_used, resource)} of "
            f"{_fmt(figures.cohort_capacity, resource)} reserved): {what}.",
        )
    return (
        QUOTA_EXHAUSTED,
        f"Your team's quota of {_fmt(nominal, resource)} {_res_label(resource)} on {label} is in use and the cohort "
        f"cannot lend more now: {what}.",
    )


def _placement_code(
    *, flavors: Sequence[str], ctx: MessageContext | None, health_excluded_nodes: int, full_nodes: int, fit_none: bool
) -> tuple[str, dict[str, Any]]:
    """health_blocked | topology_fragmented | class_exhausted for "the pods do not fit the nodes"."""
    resource = ctx.device_resource() if ctx else ""
    needed = ctx.request.get(resource) if ctx and resource else None
    figures = [ctx.pool[(f, resource)] for f in flavors if ctx and (f, resource) in ctx.pool] if ctx else []
    if figures and needed is not None:
        free = sum(p.free for p in figures)
        excluded = sum(p.health_excluded for p in figures)
        evidence = {"free": free, "healthExcluded": excluded, "needed": needed, "resource": resource}
        if free >= needed:
            return TOPOLOGY_FRAGMENTED, evidence
        if free + excluded >= needed:
            return HEALTH_BLOCKED, evidence
        return CLASS_EXHAUSTED, evidence
    if health_excluded_nodes:
        return HEALTH_BLOCKED, {"healthExcludedNodes": health_excluded_nodes}
    if fit_none and full_nodes:
        return CLASS_EXHAUSTED, {"fullNodes": full_nodes}
    return TOPOLOGY_FRAGMENTED, {}


def _is_health_taint(text: str, ctx: MessageContext | None) -> bool:
    """Whether a printed taint (``key=value:Effect`` or ``{key value Effect}``) is a health exclusion."""
    keys = ctx.health_taint_keys if ctx else HEALTH_TAINT_KEYS
    key = re.split(r"[=:\s{}]", text.strip("{} "), maxsplit=1)[0]
    return key in keys


def _decide(reason: FlavorReason, ctx: MessageContext | None) -> FlavorReason:
    """A per-flavor reason with its final code and sentence."""
    n = reason.numbers
    label = ctx.label(reason.flavor) if ctx and reason.flavor else reason.flavor
    res = _res_label(reason.resource) if reason.resource else ""
    if reason.id == "insufficient_unused_quota":
        code, plain = _quota_code(reason, ctx)
        return replace(reason, code=code, plain=plain)
    if reason.id == "max_capacity_exceeded":
        request = _q(n["request"], reason.resource)
        previous = _q(n["previous"], reason.resource) or 0
        maximum = n["max"]
        total = (request or 0) + previous
        if maximum == "<unlimited>":  # Kueue's overflow edge case: the sum does not fit its counters
            plain = (
                f"This job asks for {_fmt(total, reason.resource)} {res} on {label}, more than Kueue can count for "
                "your team's queue (it reports the maximum as unlimited): it cannot run as submitted."
            )
        else:
            plain = (
                f"This job asks for {_fmt(total, reason.resource)} {res} on {label}, more than your team's queue can "
                f"ever give ({maximum}): it cannot run as submitted."
            )
        return replace(reason, plain=plain)
    if reason.id == "max_capacity_exceeded_legacy":
        if "request" in n:
            plain = (
                f"This job asks for {n['request']} {res} on {label}, more than your team's queue can ever give "
                f"({n['max']}): it cannot run as submitted."
            )
        else:
            plain = f"This job asks for more {res} on {label} than your team's queue can ever give."
        return replace(reason, plain=plain)
    if reason.id == "resource_not_in_clusterqueue":
        return replace(reason, plain=f"Your team's queue offers no {res} at all.")
    if reason.id == "untolerated_taint":
        taint = f"{n.get('key')}={n.get('value')}:{n.get('effect')}"
        return replace(reason, plain=f"{label} nodes carry taint {taint}, which this job does not tolerate.")
    if reason.id == "node_affinity_mismatch":
        return replace(reason, plain=f"{label} does not match this job's hardware requirements.")
    if reason.id == "flavor_not_found":
        return replace(reason, plain=f"The queue names flavor {reason.flavor}, which does not exist in the cluster.")
    if reason.id == "flavor_considered_missing_resource":
        return replace(reason, plain=f"{label} has no quota for {res}.")
    if reason.id in ("tas_flavor_not_tas", "tas_flavor_only_tas", "tas_level_missing"):
        why = {
            "tas_flavor_not_tas": "cannot place pods by topology",
            "tas_flavor_only_tas": "only takes jobs that ask for a topology",
            "tas_level_missing": "has no such topology level",
        }[reason.id]
        return replace(reason, plain=f"{label} {why}.")
    if reason.id == "tas_cache_missing":
        return replace(reason, plain=f"Kueue does not know the topology of {label} yet (just created?).")
    if reason.id == "tas_no_requested_level":
        level = n.get("level") or n.get("domain_level") or n.get("podset_level") or ""
        return replace(reason, plain=f"The requested topology level {level} does not exist.")
    if reason.id in ("tas_fits_only_some", "tas_fits_none", "tas_exclusion_stats", "tas_multilayer_no_fit"):
        stats = _exclusions(n.get("exclusions"))
        health_nodes = sum(v for k, v in stats["taints"].items() if _is_health_taint(k, ctx))
        full_nodes = sum(stats["resources"].values())
        topology = n.get("topology", "")
        flavors = (ctx.topology_flavors.get(topology) if ctx else None) or ([reason.flavor] if reason.flavor else [])
        fit_none = reason.id == "tas_fits_none"
        code, evidence = _placement_code(
            flavors=flavors, ctx=ctx, health_excluded_nodes=health_nodes, full_nodes=full_nodes, fit_none=fit_none
        )
        numbers = {**n, "excluded": stats, **evidence}
        unit = n.get("unit", "pod")
        if reason.id == "tas_fits_only_some":
            head = f"Only {n['fit']} of {n['total']} {unit}s fit together in one topology domain"
        elif fit_none:
            head = f"None of the {n['total']} {unit}s fit in a topology domain"
        elif reason.id == "tas_multilayer_no_fit":
            head = "The slices do not fit the requested topology layers"
        else:
            head = "Some nodes cannot take the pods"
        tail = {
            HEALTH_BLOCKED: "nodes excluded for health hold the missing room",
            TOPOLOGY_FRAGMENTED: "there are enough free devices, but not together",
            CLASS_EXHAUSTED: "the devices are in use",
        }[code]
        if n.get("total_nodes"):
            tail += f" ({n['total_nodes']} nodes, {health_nodes} excluded for health, {full_nodes} full)"
        return replace(reason, code=code, numbers=numbers, plain=f"{head}: {tail}.")
    return replace(reason, plain=reason.text)


def _pick(reasons: Sequence[FlavorReason], ctx: MessageContext | None) -> FlavorReason:
    """The reason that speaks for the pod set: the class's preferred flavor that can wait, else the most severe.

    Flavors outside the class are noise ("doesn't match node affinity" is how the portal confines a class).
    """
    class_flavors = list(ctx.class_flavors) if ctx else []
    relevant = [r for r in reasons if not class_flavors or not r.flavor or r.flavor in class_flavors]
    if class_flavors:
        # a TAS reason names a topology, not a flavor: keep it with the flavor it belongs to
        relevant = relevant or list(reasons)
    pool = relevant or list(reasons)

    def order(r: FlavorReason) -> int:
        return class_flavors.index(r.flavor) if r.flavor in class_flavors else len(class_flavors)

    waitable = sorted((r for r in pool if r.code in WAITABLE), key=order)
    if waitable:
        return waitable[0]
    return sorted(pool, key=lambda r: (NEVER_ORDER.index(r.code) if r.code in NEVER_ORDER else 9, order(r)))[0]


def _wrapper(message: str, ctx: MessageContext | None) -> Translation | None:
    """``couldn't assign flavors to pod set …`` (several pod sets, optional preemption suffixes)."""
    if not message.startswith(_PODSET_PREFIX):
        return None
    suffix = _SUFFIX_RE.search(message)
    body = message[: suffix.start()] if suffix else message
    preempting = int(suffix.group("preempting")) if suffix and suffix.group("preempting") else 0
    failed = int(suffix.group("failed")) if suffix and suffix.group("failed") else 0
    pod_sets: list[dict[str, Any]] = []
    picked: list[FlavorReason] = []
    unknown: list[str] = []
    for chunk in body[len(_PODSET_PREFIX) :].split("; " + _PODSET_PREFIX):
        name, sep, reasons_text = chunk.partition(": ")
        if not sep:
            unknown.append(chunk)
            continue
        found, rest = _scan_reasons(reasons_text)
        unknown += rest
        decided = [_decide(r, ctx) for r in found]
        if decided:
            picked.append(_pick(decided, ctx))
        pod_sets.append(
            {
                "name": name,
                "reasons": [
                    {"id": r.id, "code": r.code, "flavor": r.flavor, "resource": r.resource, **_plain_numbers(r)}
                    for r in decided
                ],
            }
        )
    ids = ["podset_flavor_assignment_failed", *sorted({r["id"] for ps in pod_sets for r in ps["reasons"]})]
    details: dict[str, Any] = {"podSets": pod_sets}
    if preempting:
        ids.append("pending_preemption_suffix")
        details["preempting"] = preempting
    if failed:
        ids.append("preemption_failed_suffix")
        details["preemptionsFailed"] = failed
    if unknown:
        details["unrecognisedParts"] = unknown
    if not picked:
        return Translation(UNRECOGNISED, message, message, tuple(ids), {**details, "unrecognised": True})
    main = _pick(picked, ctx) if len(picked) > 1 else picked[0]
    code, plain = main.code, main.plain
    if preempting:
        code = PREEMPTION_IN_PROGRESS
        plain = f"Room is being made: {preempting} lower-priority job(s) are being preempted. ({main.plain})"
    elif failed:
        code = PREEMPTION_IN_PROGRESS
        plain = f"Preempting {failed} job(s) to make room failed; Kueue retries. ({main.plain})"
    if unknown:
        details["unrecognised"] = True
    details.update({"flavor": main.flavor, "resource": main.resource, **_plain_numbers(main)})
    return Translation(code, plain, message, tuple(ids), details)


def _plain_numbers(reason: FlavorReason) -> dict[str, Any]:
    """The figures of a reason, quantities converted to canonical integers where they parse."""
    out: dict[str, Any] = {}
    for key, value in reason.numbers.items():
        if isinstance(value, str) and key in ("missing", "request", "previous", "max") and reason.resource:
            parsed = _q(value, reason.resource)
            out[key] = parsed if parsed is not None else value
        elif isinstance(value, str) and value.isdigit():
            out[key] = int(value)
        else:
            out[key] = value
    return out


def _whole(message: str, reason: str, ctx: MessageContext | None) -> Translation | None:
    """A message that is one known sentence."""
    for message_id, pattern, code in WHOLE_PATTERNS:
        m = pattern.fullmatch(message)
        if not m:
            continue
        groups = {k: v for k, v in m.groupdict().items() if v is not None}
        return _sentence(message_id, code, groups, message, reason, ctx)
    return None


def _sentence(
    message_id: str, code: str | None, g: dict[str, str], message: str, reason: str, ctx: MessageContext | None
) -> Translation:
    """Code and plain sentence of a whole-message match."""
    details: dict[str, Any] = {k: int(v) if v.isdigit() else v for k, v in g.items()}
    plain = message
    if message_id == "podset_flavor_assignment_error":
        plain = f"Kueue could not assign hardware to pod set {g['podset']}: {g['error']}. An admin must fix the setup."
    elif message_id == "no_longer_fits":
        plain = "Another job took the capacity this one needed in the same scheduling round; it is next in line."
    elif message_id in ("overlapping_preemption_targets", "overlapping_preemption_targets_deferred"):
        plain = "Room is being made for another job first; this one fits once those preemptions finish."
    elif message_id == "waiting_for_pods_ready_block":
        plain = "Kueue admits one job at a time until the admitted jobs' pods are ready."
    elif message_id == "failed_admission_checks_pending":
        plain = "An admission check failed; Kueue retries or gives up on this job."
    elif message_id == "preemption_gated":
        plain = "This job needs to preempt others, but preemption is held by a gate."
    elif message_id in ("local_queue_missing", "local_queue_inactive"):
        state = "does not exist" if message_id == "local_queue_missing" else "is stopped"
        plain = f"Your team's queue {g.get('localqueue', '')} {state} in the cluster: an admin must fix it."
    elif message_id in ("cluster_queue_missing", "cluster_queue_inactive"):
        state = "does not exist" if message_id == "cluster_queue_missing" else "is inactive or stopped"
        plain = f"Your team's ClusterQueue {g.get('clusterqueue', '')} {state}: an admin must fix it."
    elif message_id == "namespace_selector_mismatch":
        plain = "Your team's namespace is not served by its ClusterQueue: an admin must fix the queue setup."
    elif message_id in ("resources_validation_failed", "limitrange_violation"):
        plain = f"The job's resource requests are not allowed: {g.get('detail', '')}. Fix the job and resubmit."
    elif message_id == "admission_gated":
        gates = g.get("gates") or g.get("event_gates") or ""
        plain = f"Admission waits for an external approval ({gates})." if gates else "Admission gate cleared."
    elif message_id == "pending_evaluation":
        plain = "Queued; Kueue has not evaluated this job yet (jobs ahead of it are considered first)."
    elif message_id == "deactivated":
        cause = g.get("cause")
        plain = f"Kueue stopped this job ({cause})." if cause else "This job was stopped in the cluster (deactivated)."
        plain += " It does not run again unless it is reactivated."
    elif message_id == "deactivation_target":
        plain = f"Kueue is stopping this job: {message}."
    elif message_id == "preempted":
        why = g.get("why") or g.get("why_v07") or "a higher-priority job"
        plain = f"Preempted to make room for another job ({why}); back in the queue."
        details["preemptorJobUid"] = g.get("job_uid", "")
    elif message_id == "pods_ready_timeout":
        plain = "The pods did not all start in time, so Kueue released the job and requeued it (with a backoff)."
    elif message_id == "admission_check_retry_eviction":
        plain = f"Capacity provisioning failed and is retried: {g.get('checks', '')}."
    elif message_id == "queue_stopped_eviction":
        plain = f"The {g['kind']} was stopped by an admin; the job waits until it restarts."
    elif message_id in ("tas_no_node_replacement", "tas_multiple_node_failures"):
        plain = f"Evicted because node(s) failed: {g['nodes']}; requeued."
        details["nodes"] = [n.strip() for n in g["nodes"].split(",")]
    elif message_id == "requeued_messages":
        plain = "Back in the queue; Kueue evaluates it again."
    elif message_id == "pods_ready_messages":
        pods = g["pods"]
        if pods.startswith("All pods"):
            code, plain = "running", "All pods are running."
        else:
            code = "starting"
            plain = (
                "Admitted; pods are starting." if pods.startswith("Not all") else "A pod failed; waiting for recovery."
            )
    elif message_id == "admitted_condition_messages":
        text = g["admitted"]
        if text == "The workload is admitted":
            code, plain = "admitted", "Admitted."
        elif text.startswith("The workload has no reservation"):
            # no quota yet: the QuotaReserved=False message beside it says why; this one only says "not yet"
            code = reason_hint(reason) or HIGHER_PRIORITY_AHEAD
            plain = "Not admitted yet: no quota is reserved" + (
                " and its admission checks are not ready." if "checks" in text else "."
            )
        else:
            code, plain = AWAITING_PROVISIONING, "Quota is reserved; waiting for capacity to be provisioned."
    elif message_id == "quota_reserved_true":
        code, plain = "admitted", f"Quota reserved in {g.get('clusterqueue') or g.get('admitted_by')}."
    elif message_id == "admission_check_state_messages":
        plain = "Waiting for capacity to be provisioned" + (f": {g['detail']}." if g.get("detail") else ".")
    elif message_id == "cluster_queue_active_condition":
        if message.startswith(("Can admit", "Can submit")):
            code, plain = "", "The queue is active."
        else:
            code = MISCONFIGURED
            plain = "The queue cannot admit jobs" + (f": {g['causes']}." if g.get("causes") else ".")
    elif message_id == "job_events":
        if g.get("wpc"):
            code = MISCONFIGURED
            plain = f"The priority class {g['wpc']} does not exist in the cluster: an admin must create it."
        else:
            code, plain = "", message
    elif message_id == "on_hold":
        plain = "The job is on hold (scaled to zero)."
    return Translation(code if code is not None else "", plain, message, (message_id,), details)


def reason_hint(reason: str) -> str:
    """The code a condition reason suggests ("" when unknown)."""
    return REASON_HINTS.get(reason, "")


def translate(message: str, *, reason: str = "", context: MessageContext | None = None) -> Translation:
    """The portal's reading of a Kueue condition or event message (see the module docstring)."""
    text = (message or "").strip()
    if text.endswith(" ..."):  # events are truncated at 1 KiB
        text = text[:-4]
    result = _wrapper(text, context) or _whole(text, reason, context)
    if result is None and text:
        found, unknown = _scan_reasons(text)
        if found and not unknown:
            decided = [_decide(r, context) for r in found]
            main = _pick(decided, context)
            result = Translation(
                main.code,
                main.plain,
                text,
                tuple(sorted({r.id for r in decided})),
                {"flavor": main.flavor, "resource": main.resource, **_plain_numbers(main)},
            )
    if result is None:
        hint = reason_hint(reason)
        details = {"unrecognised": True, "reason": reason}
        if hint:
            details["reasonHint"] = hint
        return Translation(UNRECOGNISED, text or "(no message)", text, (), details)
    if reason:
        result.details.setdefault("reason", reason)
    return result


# --- the kube-scheduler's view of pods of an admitted workload ----------------------------------------------------

_SCHED_INSUFFICIENT = re.compile(r"(?P<n>\d+) Insufficient (?P<resource>\S+?)[.,]?(?=\s|$)")
_SCHED_TAINT = re.compile(r"(?P<n>\d+) node\(s\) had untolerated taint\(?s?\)? \{(?P<taint>[^}]*)\}")
_SCHED_CORDONED = re.compile(r"(?P<n>\d+) node\(s\) were unschedulable")
_SCHED_AFFINITY = re.compile(r"(?P<n>\d+) node\(s\) didn't match Pod's node affinity/selector")
_SCHED_TOTAL = re.compile(r"^0/(?P<total>\d+) nodes are available")


def pods_unschedulable(messages: Iterable[str], *, context: MessageContext | None = None) -> Translation | None:
    """Why the pods of an admitted workload do not get nodes, from the scheduler's ``FailedScheduling`` texts."""
    texts = [m for m in messages if m]
    if not texts:
        return None
    text = texts[0]
    main = text.split(" preemption:", 1)[0]
    health = sum(int(m.group("n")) for m in _SCHED_TAINT.finditer(main) if _is_health_taint(m.group("taint"), context))
    cordoned = sum(int(m.group("n")) for m in _SCHED_CORDONED.finditer(main))
    insufficient = {m.group("resource"): int(m.group("n")) for m in _SCHED_INSUFFICIENT.finditer(main)}
    total = _SCHED_TOTAL.search(main)
    if not (health or cordoned or insufficient or _SCHED_AFFINITY.search(main)):
        return Translation(UNRECOGNISED, text, text, (), {"unrecognised": True, "source": "kube-scheduler"})
    flavors = list(context.class_flavors) if context else []
    code, evidence = _placement_code(
        flavors=flavors,
        ctx=context,
        health_excluded_nodes=health + cordoned,
        full_nodes=sum(insufficient.values()),
        fit_none=True,
    )
    if not (health or cordoned or insufficient):
        code = NO_MATCHING_FLAVOR
    details = {
        "source": "kube-scheduler",
        "nodes": int(total.group("total")) if total else None,
        "insufficient": insufficient,
        "healthExcludedNodes": health,
        "cordonedNodes": cordoned,
        **evidence,
    }
    plain = {
        HEALTH_BLOCKED: "Admitted, but the pods cannot start: the free capacity sits on nodes excluded for health "
        "(tainted or cordoned).",
        TOPOLOGY_FRAGMENTED: "Admitted, but the pods cannot start: enough devices are free in total, not on the "
        "same nodes.",
        CLASS_EXHAUSTED: "Admitted, but the pods cannot start: the nodes' devices are in use.",
        NO_MATCHING_FLAVOR: "Admitted, but no node matches the pods' requirements.",
    }[code]
    return Translation(code, plain, text, ("kube_scheduler_unschedulable",), details)


# --- reading a whole Workload -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """A Workload's state as the portal reads it, and its wait reason when it waits."""

    state: str  # pending | reserved | admitted | running | evicted | finished | deactivated
    code: str
    message: str
    kueue_message: str = ""
    since: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    ids: tuple[str, ...] = ()


def conditions_of(workload: Mapping) -> dict[str, dict]:
    """Conditions by type."""
    return {c.get("type", ""): c for c in ((workload.get("status") or {}).get("conditions") or [])}


def _true(conditions: Mapping[str, dict], kind: str) -> bool:
    return (conditions.get(kind) or {}).get("status") == "True"


def workload_verdict(
    workload: Mapping,
    *,
    context: MessageContext | None = None,
    pod_messages: Sequence[str] = (),
) -> Verdict:
    """Derive a Workload's state from all its conditions (SEMANTICS.md §7), never from one alone."""
    conditions = conditions_of(workload)
    spec = workload.get("spec") or {}
    status = workload.get("status") or {}
    finished = conditions.get("Finished")
    if _true(conditions, "Finished"):
        succeeded = finished.get("reason") == "Succeeded"
        return Verdict(
            "finished",
            "succeeded" if succeeded else "failed",
            finished.get("message") or finished.get("reason", ""),
            since=finished.get("lastTransitionTime", ""),
        )
    evicted = conditions.get("Evicted") or {}
    if spec.get("active") is False:
        text = evicted.get("message") or (conditions.get("DeactivationTarget") or {}).get("message", "")
        t = translate(text or "The workload is deactivated", reason=evicted.get("reason", ""), context=context)
        code = t.code if t.code in (MISCONFIGURED, UNRECOGNISED) else MISCONFIGURED
        return Verdict(
            "deactivated",
            code,
            t.message,
            t.kueue_message,
            evicted.get("lastTransitionTime", ""),
            {**t.details, "evictedReason": evicted.get("reason", "")},
            t.ids,
        )
    if _true(conditions, "Evicted") and status.get("admission"):
        t = translate(evicted.get("message", ""), reason=evicted.get("reason", ""), context=context)
        return Verdict(
            "evicted",
            PREEMPTION_IN_PROGRESS if evicted.get("reason") == "Preempted" else t.code,
            t.message,
            t.kueue_message,
            evicted.get("lastTransitionTime", ""),
            {**t.details, "evictedReason": evicted.get("reason", "")},
            t.ids,
        )
    if _true(conditions, "Admitted"):
        admitted = conditions["Admitted"]
        pods_ready = conditions.get("PodsReady") or {}
        if pods_ready.get("status") == "True":
            return Verdict(
                "running", "running", "All pods are running.", since=pods_ready.get("lastTransitionTime", "")
            )
        blocked = pods_unschedulable(pod_messages, context=context)
        if blocked is not None:
            return Verdict(
                "admitted",
                blocked.code,
                blocked.message,
                blocked.kueue_message,
                admitted.get("lastTransitionTime", ""),
                blocked.details,
                blocked.ids,
            )
        return Verdict(
            "admitted", "admitted", "Admitted; pods are starting.", since=admitted.get("lastTransitionTime", "")
        )
    if _true(conditions, "QuotaReserved"):
        checks = status.get("admissionChecks") or []
        waiting = [c for c in checks if c.get("state") != "Ready"]
        text = "; ".join(f"{c.get('name')}: {c.get('message', '')}" for c in waiting) or (
            conditions.get("Admitted") or {}
        ).get("message", "")
        return Verdict(
            "reserved",
            AWAITING_PROVISIONING,
            "Quota is reserved; waiting for capacity to be provisioned"
            + (f" ({', '.join(str(c.get('name')) for c in waiting)})." if waiting else "."),
            text,
            conditions["QuotaReserved"].get("lastTransitionTime", ""),
            {"admissionChecks": [{k: c.get(k) for k in ("name", "state", "message")} for c in checks]},
            ("admission_check_state_messages",),
        )
    quota = conditions.get("QuotaReserved")
    requeue = status.get("requeueState") or {}
    if quota is not None and quota.get("status") == "False":
        t = translate(quota.get("message", ""), reason=quota.get("reason", ""), context=context)
        if t.ids and t.ids[0] in ("pods_ready_timeout",) and pod_messages:
            blocked = pods_unschedulable(pod_messages, context=context)
            t = blocked or t
        details = dict(t.details)
        if requeue.get("requeueAt"):
            details["requeueAt"] = requeue["requeueAt"]
            details["requeueCount"] = requeue.get("count")
        message = t.message
        if requeue.get("requeueAt") and t.recognised:
            message += f" Kueue retries it after {requeue['requeueAt']}."
        return Verdict("pending", t.code, message, t.kueue_message, quota.get("lastTransitionTime", ""), details, t.ids)
    if _true(conditions, "Evicted") or (conditions.get("Requeued") or {}).get("status") == "False":
        source = evicted if evicted else conditions["Requeued"]
        t = translate(source.get("message", ""), reason=source.get("reason", ""), context=context)
        details = {**t.details, "evictedReason": source.get("reason", "")}
        if requeue.get("requeueAt"):
            details["requeueAt"] = requeue["requeueAt"]
        return Verdict(
            "pending", t.code, t.message, t.kueue_message, source.get("lastTransitionTime", ""), details, t.ids
        )
    queue = spec.get("queueName", "")
    return Verdict(
        "pending",
        HIGHER_PRIORITY_AHEAD,
        f"Queued in {queue or 'its queue'}; Kueue has not evaluated it yet.",
        "",
        (workload.get("metadata") or {}).get("creationTimestamp", ""),
        {"notEvaluated": True},
        ("pending_evaluation",),
    )
