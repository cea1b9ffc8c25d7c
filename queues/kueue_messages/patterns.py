"""Kueue's wordings as patterns: per-flavor reasons (scanned out of a list) and whole-message sentences."""

from __future__ import annotations

import re
from typing import Any

from queues.engine.wait_codes import (
    AWAITING_PROVISIONING,
    BORROW_LIMIT,
    CLASS_EXHAUSTED,
    CLUSTER_UNREACHABLE,
    EXCEEDS_MAXIMUM,
    HEALTH_BLOCKED,
    HIGHER_PRIORITY_AHEAD,
    MISCONFIGURED,
    NO_MATCHING_FLAVOR,
    PREEMPTION_IN_PROGRESS,
    QUOTA_EXHAUSTED,
    TOPOLOGY_FRAGMENTED,
)

from .context import FlavorReason

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
        (  # zero-count pod sets probe one pod per pod set (main, 2026)
            "zero_count_probe_exceeded",
            r"insufficient quota for (?P<resource>\S+) in flavor (?P<flavor>\S+), one pod per zero-count podset "
            r"request \((?P<request>[^)]*)\) > maximum capacity \((?P<max>[^)]*)\)",
            EXCEEDS_MAXIMUM,
        ),
        (  # before v0.10: the ClusterQueue's borrowingLimit, checked before the cohort's unused quota
            "borrowing_limit_exceeded",
            r"borrowing limit for (?P<resource>\S+) in flavor (?P<flavor>\S+) exceeded",
            BORROW_LIMIT,
        ),
        ("resource_not_in_clusterqueue", r"resource (?P<resource>\S+) unavailable in ClusterQueue", NO_MATCHING_FLAVOR),
        (  # recomputation within a cycle keeps the nominated flavor: the others are skipped (never the cause)
            "nomination_mapping_skip",
            r"skipping flavor (?P<flavor>\S+) as it is not found in the nomination mapping for resource "
            r"(?P<resource>[^\s,]+)",
            HIGHER_PRIORITY_AHEAD,
        ),
        (  # ConcurrentAdmission: a variant may use one flavor only
            "variant_flavor_skip",
            r"skipping flavor (?P<flavor>\S+) due to WorkloadAllowedResourceFlavorAnnotation annotation",
            NO_MATCHING_FLAVOR,
        ),
        (  # ElasticJobsViaWorkloadSlices: a scale-up slice keeps the flavor of the slice it replaces
            "slice_flavor_mismatch",
            r"could not assign (?P<flavor>\S+) flavor since the original workload is assigned: (?P<original>[^\s,]+)",
            NO_MATCHING_FLAVOR,
        ),
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

#: Per-flavor reasons that only say a flavor was skipped: another reason of the pod set speaks when there is one.
SKIP_REASON_IDS = frozenset({"nomination_mapping_skip", "variant_flavor_skip"})

_EXCLUSION_RE = re.compile(
    r"(?:(?P<plain>nodeSelector|affinity|topologyDomain|schedulerLibraryNoFit)|"
    r'(?P<what>taint|resource) "(?P<name>[^"]*)"): (?P<n>\d+)'
)


def exclusion_counts(text: str | None) -> dict[str, Any]:
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


def scan_reasons(text: str) -> tuple[list[FlavorReason], list[str]]:
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

#: (id, full-match pattern, default code). Codes of None are decided in :mod:`.sentences`.
WHOLE_PATTERNS: tuple[tuple[str, re.Pattern, str | None], ...] = tuple(
    (i, re.compile(p), c)
    for i, p, c in (
        (
            "podset_flavor_assignment_error",
            r"failed to assign flavors to pod set (?P<podset>[^:]+): (?P<error>.+)",
            MISCONFIGURED,
        ),
        ("no_longer_fits", r"Workload no longer fits after processing another workload", HIGHER_PRIORITY_AHEAD),
        (  # the scheduler's older "skipped this cycle" wordings (before v0.9)
            "cohort_prioritized",
            r"(?P<text>other workloads in the cohort were prioritized|workloads in the cohort that don't require "
            r"borrowing were prioritized and admitted first|cohort used in this cycle)",
            HIGHER_PRIORITY_AHEAD,
        ),
        ("more_favorable_variant", r"A more favorable variant is already admitted", HIGHER_PRIORITY_AHEAD),
        ("below_last_acceptable_flavor", r"Target flavor is below LastAcceptableFlavorName", NO_MATCHING_FLAVOR),
        ("admit_failed", r"Failed to admit workload: (?P<error>.+)", CLUSTER_UNREACHABLE),
        ("admission_check_false", r"At least one admission check is false", AWAITING_PROVISIONING),
        (
            "admission_check_rejected_event",
            r"Deactivating workload because AdmissionCheck for (?P<check>\S+) was Rejected: (?P<detail>.*)",
            MISCONFIGURED,
        ),
        (
            "flavor_migration_eviction",
            r"Evicted to accommodate a workload \(UID: (?P<uid>[^)]+)\) due to migration to more favorable "
            r"resource flavor",
            HIGHER_PRIORITY_AHEAD,
        ),
        (
            "workload_slice_replaced",
            r"Replaced to accommodate a workload \(UID: (?P<uid>[^,)]+), JobUID: (?P<job_uid>[^)]+)\) due to "
            r"workload slice aggregation",
            None,
        ),
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
            r"(?P<check>\S+) updated state from (?P<from>\w+) to (?P<to>\w+)(?: with message:? (?P<message>.+))?)",
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

PODSET_PREFIX = "couldn't assign flavors to pod set "
PREEMPTION_SUFFIX_RE = re.compile(
    r"(?:\. Pending the preemption of (?P<preempting>\d+) workload\(s\))?"
    r"(?:\. Pending the migration of (?P<migrating>\d+) workload\(s\))?"
    r"(?:\. Preempting (?P<failed>\d+) workload\(s\) failed, will retry\.)?$"
)
