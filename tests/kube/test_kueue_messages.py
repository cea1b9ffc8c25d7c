"""Every Kueue message of the reference catalogue translates to a wait-reason code, with its numbers."""

from __future__ import annotations

import re

import pytest
import yaml

from kernel.quantity import parse_quantity
from queues import kueue_messages as km
from tests.fixtures import REFERENCE

CATALOGUE = REFERENCE / "kueue" / "messages.yaml"


def _entries() -> list[dict]:
    return yaml.safe_load(CATALOGUE.read_text())["messages"]


def _examples() -> list[tuple[str, str, str, dict]]:
    """(id, example key, text, entry) per example of the catalogue; never empty, so no parametrized group is."""
    out = []
    for entry in _entries():
        for key in ("example", "example_from_tests"):
            if key in entry:
                out.append((entry["id"], key, entry[key], entry))
    assert out, f"no example in {CATALOGUE}"
    return out


#: The code each catalogue example gets without any pool view ("" = informational, not a wait).
EXPECTED = {
    "podset_flavor_assignment_failed": km.QUOTA_EXHAUSTED,
    "podset_flavor_assignment_error": km.MISCONFIGURED,
    "insufficient_unused_quota": km.QUOTA_EXHAUSTED,
    "max_capacity_exceeded": km.EXCEEDS_MAXIMUM,
    "max_capacity_exceeded_legacy": km.EXCEEDS_MAXIMUM,
    "resource_not_in_clusterqueue": km.NO_MATCHING_FLAVOR,
    "untolerated_taint": km.NO_MATCHING_FLAVOR,
    "node_affinity_mismatch": km.NO_MATCHING_FLAVOR,
    "flavor_not_found": km.MISCONFIGURED,
    "flavor_considered_missing_resource": km.NO_MATCHING_FLAVOR,
    "tas_flavor_not_tas": km.NO_MATCHING_FLAVOR,
    "tas_flavor_only_tas": km.NO_MATCHING_FLAVOR,
    "tas_level_missing": km.NO_MATCHING_FLAVOR,
    "tas_cache_missing": km.MISCONFIGURED,
    "tas_fits_only_some": km.TOPOLOGY_FRAGMENTED,
    "tas_fits_none": km.CLASS_EXHAUSTED,
    "tas_exclusion_stats": km.TOPOLOGY_FRAGMENTED,
    "tas_multilayer_no_fit": km.TOPOLOGY_FRAGMENTED,
    "tas_no_requested_level": km.NO_MATCHING_FLAVOR,
    "pending_preemption_suffix": km.PREEMPTION_IN_PROGRESS,
    "preemption_failed_suffix": km.PREEMPTION_IN_PROGRESS,
    "no_longer_fits": km.HIGHER_PRIORITY_AHEAD,
    "overlapping_preemption_targets": km.PREEMPTION_IN_PROGRESS,
    "overlapping_preemption_targets_deferred": km.PREEMPTION_IN_PROGRESS,
    "waiting_for_pods_ready_block": km.HIGHER_PRIORITY_AHEAD,
    "failed_admission_checks_pending": km.AWAITING_PROVISIONING,
    "preemption_gated": km.PREEMPTION_IN_PROGRESS,
    "local_queue_missing": km.MISCONFIGURED,
    "local_queue_inactive": km.MISCONFIGURED,
    "cluster_queue_missing": km.MISCONFIGURED,
    "cluster_queue_inactive": km.MISCONFIGURED,
    "namespace_selector_mismatch": km.MISCONFIGURED,
    "resources_validation_failed": km.EXCEEDS_MAXIMUM,
    "limitrange_violation": km.EXCEEDS_MAXIMUM,
    "admission_gated": km.AWAITING_PROVISIONING,
    "pending_evaluation": km.HIGHER_PRIORITY_AHEAD,
    "deactivated": km.MISCONFIGURED,
    "deactivation_target": km.MISCONFIGURED,
    "preempted": km.HIGHER_PRIORITY_AHEAD,
    "pods_ready_timeout": km.CLASS_EXHAUSTED,
    "admission_check_retry_eviction": km.AWAITING_PROVISIONING,
    "queue_stopped_eviction": km.MISCONFIGURED,
    "tas_no_node_replacement": km.HEALTH_BLOCKED,
    "tas_multiple_node_failures": km.HEALTH_BLOCKED,
    "requeued_messages": km.HIGHER_PRIORITY_AHEAD,
    "pods_ready_messages": "starting",
    "admitted_condition_messages": km.AWAITING_PROVISIONING,
    "quota_reserved_true": "admitted",
    "admission_check_state_messages": km.AWAITING_PROVISIONING,
    "cluster_queue_active_condition": km.MISCONFIGURED,
    "job_events": "",
    "on_hold": km.MISCONFIGURED,
}


def _reason(entry: dict) -> str:
    condition = entry.get("condition") or {}
    reason = str(condition.get("reason") or "") if isinstance(condition, dict) else ""
    return reason.split(" ")[0]


def test_catalogue_every_entry_has_an_expected_code():
    ids = [e["id"] for e in _entries()]
    assert len(ids) == 52
    assert set(ids) == set(EXPECTED)


@pytest.mark.parametrize(
    ("message_id", "which", "text", "entry"), _examples(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_translate_catalogue_example(message_id, which, text, entry):
    t = km.translate(text, reason=_reason(entry))
    assert t.recognised, f"{message_id} {which}: {text!r}"
    assert message_id in t.ids or (message_id == "podset_flavor_assignment_failed" and t.ids[0] == message_id)
    assert t.code == EXPECTED[message_id]
    assert t.kueue_message == text
    assert t.message
    if entry.get("regex"):
        assert re.search(entry["regex"], text), "the catalogue's own regex matches its example"
    hinted = set(re.findall(r"\b(" + "|".join(km.WAIT_CODES) + r")\b", entry.get("portal_wait_reason_hint") or ""))
    if hinted and t.code in km.WAIT_CODES:
        assert t.code in hinted, f"{message_id}: {t.code} not among the catalogue's hints {hinted}"


@pytest.mark.parametrize(
    ("message_id", "which", "text", "entry"), _examples(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_translate_numbers_agree_with_the_catalogue_regex(message_id, which, text, entry):
    """Every numeric group the catalogue's regex captures is parsed out with the same value."""
    if not entry.get("regex"):
        return
    m = re.search(entry["regex"], text)
    t = km.translate(text, reason=_reason(entry))
    flat = dict(t.details)
    for ps in t.details.get("podSets", []):
        for reason in ps["reasons"]:
            flat.update(reason)
    for key, value in m.groupdict().items():
        if value is None or not value.isdigit() or key not in flat:
            continue
        if key in ("missing", "request", "previous", "max") and flat.get("resource"):
            assert parse_quantity(value, flat["resource"]) == flat[key], (key, flat)  # canonical units (cpu: m)
        else:
            assert int(value) == flat[key], (key, flat)


def test_translate_quantities_are_canonical_integers():
    t = km.translate(
        "couldn't assign flavors to pod set main: insufficient unused quota for memory in flavor h100, 5Gi more needed"
    )
    assert t.details["missing"] == 5 * 1024**3
    t = km.translate(
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor a, 500m more needed"
    )
    assert t.details["missing"] == 500


def test_translate_unknown_text_is_visible_never_silent():
    t = km.translate("Something Kueue v0.30 says that nobody has seen", reason="WaitingForQuota")
    assert t.code == km.UNRECOGNISED
    assert not t.recognised
    assert t.message == "Something Kueue v0.30 says that nobody has seen"
    assert t.details["unrecognised"] is True
    assert t.details["reasonHint"] == km.QUOTA_EXHAUSTED
    assert km.UNRECOGNISED not in km.WAIT_CODES


def test_translate_partly_unknown_flavor_list_keeps_what_it_knows():
    t = km.translate(
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, 4 more "
        "needed, flavor b200 is on fire"
    )
    assert t.code == km.QUOTA_EXHAUSTED
    assert t.details["unrecognisedParts"] == ["flavor b200 is on fire"]
    assert t.details["unrecognised"] is True


def test_translate_legacy_and_old_wordings():
    assert km.translate("Preempted to accommodate a higher priority Workload").code == km.HIGHER_PRIORITY_AHEAD
    old = km.translate("Preempted to accommodate a workload (UID: abc) due to prioritization in the ClusterQueue")
    assert old.code == km.HIGHER_PRIORITY_AHEAD
    assert old.details["why"] == "prioritization in the ClusterQueue"
    assert (
        km.translate(
            "couldn't assign flavors to pod set main: insufficient unused quota in cohort for cpu in flavor a, 2 more needed"
        ).code
        == km.QUOTA_EXHAUSTED
    )
    assert (
        km.translate(
            "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor a in ClusterQueue"
        ).code
        == km.EXCEEDS_MAXIMUM
    )
    assert km.translate("LocalQueue q is terminating or missing", reason="Inadmissible").code == km.MISCONFIGURED
    assert km.translate("ClusterQueue cq is stopped", reason="Inadmissible").code == km.MISCONFIGURED
    assert km.translate("Bypassed scheduling evaluation because an equivalent workload recently failed").recognised
    truncated = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h, 2 more needed ..."
    assert km.translate(truncated).code == km.QUOTA_EXHAUSTED


def test_translate_preemptor_identity_is_parsed():
    t = km.translate(
        "Preempted to accommodate a workload (UID: wl-1, JobUID: job-9) due to reclamation within the cohort; "
        "preemptor path: /org/b; preemptee path: /org/a"
    )
    assert t.details["preemptorJobUid"] == "job-9"
    assert t.details["preemptor_path"] == "/org/b"


def test_translate_several_pod_sets_and_tas_statistics_with_commas():
    text = (
        "couldn't assign flavors to pod set main: flavor a100 doesn't match node affinity, insufficient unused quota "
        'for nvidia.com/gpu in flavor h100, 4 more needed; couldn\'t assign flavors to pod set workers: topology "t" '
        'allows to fit only 1 out of 2 pod(s). Total nodes: 4; excluded: resource "nvidia.com/gpu": 2, taint '
        '"nvidia.com/gpu-xid-error=true:NoSchedule": 1, untolerated taint {k v NoSchedule <nil>} in flavor spot'
    )
    t = km.translate(text)
    assert [ps["name"] for ps in t.details["podSets"]] == ["main", "workers"]
    workers = t.details["podSets"][1]["reasons"]
    assert [r["id"] for r in workers] == ["tas_fits_only_some", "untolerated_taint"]
    assert workers[0]["code"] == km.HEALTH_BLOCKED  # a health taint excluded a node the pods needed
    assert workers[0]["excluded"]["resources"] == {"nvidia.com/gpu": 2}


# --- with the pool view -------------------------------------------------------------------------------------------

QUOTA_TEXT = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, 4 more needed"


def _ctx(**figures) -> km.MessageContext:
    return km.MessageContext(
        cluster_queue="vision",
        quotas={("vision", "h100", "nvidia.com/gpu"): km.QuotaFigures(**figures)},
        flavor_labels={"h100": "H100"},
        request={"nvidia.com/gpu": 8},
        per_pod={"nvidia.com/gpu": 8},
        class_flavors=("h100",),
    )


def test_quota_exhausted_when_over_nominal_without_cohort():
    t = km.translate(QUOTA_TEXT, context=_ctx(nominal=16, used=12))
    assert t.code == km.QUOTA_EXHAUSTED
    assert "16 GPUs on H100" in t.message
    assert "4 more GPUs needed" in t.message


def test_borrow_limit_when_cohort_has_room_but_limit_reached():
    t = km.translate(
        QUOTA_TEXT,
        context=_ctx(nominal=16, used=20, borrowing_limit=4, in_cohort=True, cohort_capacity=64, cohort_used=30),
    )
    assert t.code == km.BORROW_LIMIT
    assert "borrowing limit (4 above its quota of 16)" in t.message


def test_class_exhausted_when_the_whole_cohort_is_used():
    t = km.translate(QUOTA_TEXT, context=_ctx(nominal=16, used=16, in_cohort=True, cohort_capacity=64, cohort_used=62))
    assert t.code == km.CLASS_EXHAUSTED


def test_higher_priority_ahead_when_within_own_quota():
    t = km.translate(QUOTA_TEXT, context=_ctx(nominal=16, used=4, in_cohort=True, cohort_capacity=64, cohort_used=64))
    assert t.code == km.HIGHER_PRIORITY_AHEAD


def test_quota_lent_out_when_within_own_quota_and_borrowers_hold_the_rest():
    # Issue 32: vision uses 4 of its 16 and asks 8; nlp holds 10 above its own 16, speech 2 above its 8.
    lab = {"in_cohort": True, "cohort_capacity": 40, "cohort_used": 40, "cohort": "lab"}
    ctx = _ctx(nominal=16, used=4, reclaim="Never", **lab)
    ctx.quotas[("nlp", "h100", "nvidia.com/gpu")] = km.QuotaFigures(nominal=16, used=26, **lab)
    ctx.quotas[("speech", "h100", "nvidia.com/gpu")] = km.QuotaFigures(nominal=8, used=10, **lab)
    ctx.quotas[("other", "h100", "nvidia.com/gpu")] = km.QuotaFigures(nominal=0, used=5, in_cohort=True, cohort="x")
    t = km.translate(QUOTA_TEXT, context=ctx)
    assert t.code == km.QUOTA_LENT_OUT
    assert t.details["lent"] == 12
    assert t.details["lentTo"] == [{"clusterQueue": "nlp", "units": 10}, {"clusterQueue": "speech", "units": 2}]
    assert t.details["reclaim"] == "Never"
    assert t.message.startswith("Your team uses 4 of its 16 GPUs on H100 and this job needs 8.")
    assert (
        "12 GPUs of its unused quota are lent out, in use by queues that borrowed them (nlp 10, speech 2 above their "
        "own quota); 4 must come back for this job to start." in t.message
    )
    assert "does not reclaim lent quota (reclaimWithinCohort: Never)" in t.message
    # Nobody in its cohort borrows: capacity it is owed is held by other work ahead of it, as before.
    alone = _ctx(nominal=16, used=4, reclaim="Never", **lab)
    assert km.translate(QUOTA_TEXT, context=alone).code == km.HIGHER_PRIORITY_AHEAD


def test_class_flavor_preference_ignores_other_flavors():
    text = (
        "couldn't assign flavors to pod set main: flavor a100 doesn't match node affinity, insufficient unused quota "
        "for nvidia.com/gpu in flavor h100, 4 more needed"
    )
    ctx = km.MessageContext(class_flavors=("h100",))
    assert km.translate(text, context=ctx).details["flavor"] == "h100"
    only_never = (
        "couldn't assign flavors to pod set main: flavor a100 doesn't match node affinity, flavor h100 not found"
    )
    assert km.translate(only_never).code == km.MISCONFIGURED  # the most severe of the never-fits


def test_the_device_speaks_when_kueue_lists_cpu_and_memory_too():
    """Kueue v0.19 lists every resource a flavor is short of, in name order: cpu and memory before the GPUs
    (this text is what it wrote on the testbed, tests/realcluster/test_wait_reasons.py). The sentence is about the
    class's device, not the CPU that comes with it."""
    text = (
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor h100, 64 more needed, "
        "insufficient unused quota for memory in flavor h100, 512Gi more needed, insufficient unused quota for "
        "nvidia.com/gpu in flavor h100, 8 more needed"
    )
    t = km.translate(text, context=_ctx(nominal=16, used=16))
    assert (t.code, t.details["resource"]) == (km.QUOTA_EXHAUSTED, "nvidia.com/gpu")
    assert "16 GPUs on H100" in t.message
    assert "8 more GPUs needed" in t.message
    assert [r["resource"] for r in t.details["podSets"][0]["reasons"]] == ["cpu", "memory", "nvidia.com/gpu"]


def test_tas_decision_uses_the_pool():
    text = 'couldn\'t assign flavors to pod set main: topology "gpu" allows to fit only 1 out of 2 pod(s)'
    ctx = km.MessageContext(
        topology_flavors={"gpu": ["h100"]},
        request={"nvidia.com/gpu": 16},
        per_pod={"nvidia.com/gpu": 8},
        pool={("h100", "nvidia.com/gpu"): km.PoolFigures(total=32, free=20, health_excluded=0, max_free_per_node=6)},
    )
    assert km.translate(text, context=ctx).code == km.TOPOLOGY_FRAGMENTED
    ctx.pool = {("h100", "nvidia.com/gpu"): km.PoolFigures(total=32, free=8, health_excluded=16)}
    assert km.translate(text, context=ctx).code == km.HEALTH_BLOCKED
    ctx.pool = {("h100", "nvidia.com/gpu"): km.PoolFigures(total=32, free=8, health_excluded=0)}
    assert km.translate(text, context=ctx).code == km.CLASS_EXHAUSTED


# --- pods the scheduler cannot place -------------------------------------------------------------------------------


def test_pods_unschedulable_for_health():
    t = km.pods_unschedulable(
        [
            "0/16 nodes are available: 2 node(s) had untolerated taint {nvidia.com/gpu-xid-error: 79}, 14 node(s) "
            "didn't match Pod's node affinity/selector. preemption: 0/16 nodes are available: 16 Preemption is not helpful."
        ]
    )
    assert t.code == km.HEALTH_BLOCKED
    assert t.details["healthExcludedNodes"] == 2
    assert t.details["nodes"] == 16


def test_pods_unschedulable_for_fragmentation_with_the_pool_view():
    ctx = km.MessageContext(
        class_flavors=("h100",),
        request={"nvidia.com/gpu": 16},
        per_pod={"nvidia.com/gpu": 8},
        pool={("h100", "nvidia.com/gpu"): km.PoolFigures(total=32, free=18, max_free_per_node=6)},
    )
    t = km.pods_unschedulable(["0/4 nodes are available: 4 Insufficient nvidia.com/gpu."], context=ctx)
    assert t.code == km.TOPOLOGY_FRAGMENTED
    assert t.details["insufficient"] == {"nvidia.com/gpu": 4}


def test_pods_unschedulable_cordoned_nodes_are_health():
    t = km.pods_unschedulable(["0/3 nodes are available: 3 node(s) were unschedulable."])
    assert t.code == km.HEALTH_BLOCKED


def _sick_ctx(**kw) -> km.MessageContext:
    """16 GPUs needed, 8 free on healthy nodes, 16 out for health on two nodes (one NVSentinel, one DCGM)."""
    return km.MessageContext(
        class_flavors=("h100",),
        flavor_labels={"h100": "H100"},
        request={"nvidia.com/gpu": 16},
        per_pod={"nvidia.com/gpu": 8},
        pool={("h100", "nvidia.com/gpu"): km.PoolFigures(total=32, free=8, health_excluded=16, max_free_per_node=8)},
        health_nodes={
            ("h100", "nvidia.com/gpu"): (
                km.HealthNode(
                    node="node-17",
                    units=8,
                    causes=(
                        "tainted nvidia.com/gpu-xid-error=true:NoSchedule by NVSentinel's fault quarantine",
                        "condition GpuXidError=True: ErrorCode:79 GPU:3 Recommended Action=RESTART_BM",
                    ),
                ),
                km.HealthNode(node="node-18", units=8, causes=("XID 48 (double-bit ECC)",)),
            )
        },
        **kw,
    )


def test_pods_unschedulable_for_health_names_the_nodes_and_why():
    text = (
        "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint "
        "{nvidia.com/gpu-xid-error: true}, 1 node(s) were unschedulable."
    )
    t = km.pods_unschedulable([text], context=_sick_ctx())
    assert t.code == km.HEALTH_BLOCKED
    assert t.message == (
        "Admitted, but the pods cannot start: the free capacity sits on nodes excluded for health: 8 H100 GPUs on "
        "node-17 (tainted nvidia.com/gpu-xid-error=true:NoSchedule by NVSentinel's fault quarantine; condition "
        "GpuXidError=True: ErrorCode:79 GPU:3 Recommended Action=RESTART_BM); 8 H100 GPUs on node-18 (XID 48 "
        "(double-bit ECC))."
    )
    assert t.details["unhealthyNodes"] == ["node-17", "node-18"]
    assert t.details["healthExcludedNodes"] == 1  # the scheduler's count of tainted nodes stays
    # the same text without the free capacity on sick nodes is not health_blocked, whatever the nodes say
    full = _sick_ctx()
    full.pool = {("h100", "nvidia.com/gpu"): km.PoolFigures(total=32, free=0, health_excluded=8)}
    assert km.pods_unschedulable([text], context=full).code == km.CLASS_EXHAUSTED


def test_tas_health_blocked_names_the_nodes():
    text = 'couldn\'t assign flavors to pod set main: topology "gpu" allows to fit only 1 out of 2 pod(s)'
    ctx = _sick_ctx(topology_flavors={"gpu": ["h100"]})
    t = km.translate(text, context=ctx)
    assert t.code == km.HEALTH_BLOCKED
    assert "nodes excluded for health hold the missing room: 8 H100 GPUs on node-17 (tainted " in t.message
    assert t.details["unhealthyNodes"] == ["node-17", "node-18"]


def test_more_than_five_sick_nodes_are_counted_not_named():
    ctx = _sick_ctx()
    ctx.health_nodes = {
        ("h100", "nvidia.com/gpu"): tuple(km.HealthNode(node=f"n{i}", units=2, causes=("cordoned",)) for i in range(7))
    }
    t = km.pods_unschedulable(["0/7 nodes are available: 7 node(s) were unschedulable."], context=ctx)
    assert t.message.endswith("2 H100 GPUs on n4 (cordoned); and 2 more node(s).")


def test_pods_unschedulable_unknown_text():
    assert km.pods_unschedulable(["the scheduler is sad"]).code == km.UNRECOGNISED
    assert km.pods_unschedulable([]) is None


# --- whole workloads ------------------------------------------------------------------------------------------------


def _wl(*conditions, **status) -> dict:
    return {
        "metadata": {"name": "w", "namespace": "ns", "creationTimestamp": "2026-09-01T08:00:00Z"},
        "spec": {"queueName": "main"},
        "status": {
            "conditions": [
                {"type": t, "status": s, "reason": r, "message": m, "lastTransitionTime": "2026-09-01T08:01:00Z"}
                for t, s, r, m in conditions
            ],
            **status,
        },
    }


def test_workload_verdict_states():
    assert km.workload_verdict(_wl()).state == "pending"
    assert km.workload_verdict(_wl()).details["notEvaluated"]
    pending = km.workload_verdict(_wl(("QuotaReserved", "False", "Pending", QUOTA_TEXT)))
    assert (pending.state, pending.code) == ("pending", km.QUOTA_EXHAUSTED)
    assert pending.since == "2026-09-01T08:01:00Z"
    admitted = km.workload_verdict(
        _wl(
            ("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
            ("Admitted", "True", "Admitted", "The workload is admitted"),
            admission={"clusterQueue": "cq"},
        )
    )
    assert admitted.state == "admitted"
    reserved = km.workload_verdict(
        _wl(
            ("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
            ("Admitted", "False", "UnsatisfiedAdmissionChecks", "The workload has not all checks ready"),
            admission={"clusterQueue": "cq"},
            admissionChecks=[{"name": "prov", "state": "Pending", "message": "Waiting for capacity"}],
        )
    )
    assert (reserved.state, reserved.code) == ("reserved", km.AWAITING_PROVISIONING)
    finished = km.workload_verdict(_wl(("Finished", "True", "Succeeded", "Job finished successfully")))
    assert (finished.state, finished.code) == ("finished", "succeeded")


def test_workload_verdict_backoff_after_pods_ready_timeout():
    wl = _wl(
        ("Evicted", "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout ns/w"),
        ("Requeued", "False", "PodsReadyTimeout", "Exceeded the PodsReady timeout ns/w"),
        ("QuotaReserved", "False", "PendingEvaluation", "Exceeded the PodsReady timeout ns/w"),
        requeueState={"count": 2, "requeueAt": "2026-09-01T09:00:00Z"},
    )
    verdict = km.workload_verdict(wl)
    assert verdict.code == km.CLASS_EXHAUSTED
    assert verdict.details["requeueAt"] == "2026-09-01T09:00:00Z"
    assert "2026-09-01T09:00:00Z" in verdict.message
    unhealthy = km.workload_verdict(
        wl, pod_messages=["0/2 nodes are available: 2 node(s) had untolerated taint {nvidia.com/gpu-xid-error: 48}."]
    )
    assert unhealthy.code == km.HEALTH_BLOCKED


@pytest.mark.parametrize("kind", ["ClusterQueue", "LocalQueue"])
def test_workload_verdict_hold_and_drain_eviction_then_wait_for_restart(kind):
    text = f"The {kind} is stopped"
    draining = km.workload_verdict(
        _wl(
            ("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
            ("Admitted", "True", "Admitted", "The workload is admitted"),
            ("Evicted", "True", f"{kind}Stopped", text),
            admission={"clusterQueue": "cq"},
        )
    )
    assert (draining.state, draining.code) == ("evicted", km.MISCONFIGURED)
    assert draining.details["evictedReason"] == f"{kind}Stopped"
    assert draining.ids == ("queue_stopped_eviction",)
    assert f"The {kind} was stopped by an admin" in draining.message
    waiting = km.workload_verdict(
        _wl(
            ("Evicted", "True", f"{kind}Stopped", text),
            ("Requeued", "False", f"{kind}Stopped", text),
            ("QuotaReserved", "False", "Pending", text),
        )
    )
    assert (waiting.state, waiting.code) == ("pending", km.MISCONFIGURED)
    assert waiting.kueue_message == text


def test_workload_verdict_deactivated_and_admitted_but_blocked():
    wl = _wl(
        (
            "Evicted",
            "True",
            "DeactivatedDueToRequeuingLimitExceeded",
            "The workload is deactivated due to exceeding the maximum number of re-queuing retries",
        )
    )
    wl["spec"]["active"] = False
    verdict = km.workload_verdict(wl)
    assert (verdict.state, verdict.code) == ("deactivated", km.MISCONFIGURED)
    admitted = _wl(
        ("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
        ("Admitted", "True", "Admitted", "The workload is admitted"),
        admission={"clusterQueue": "cq"},
    )
    blocked = km.workload_verdict(admitted, pod_messages=["0/8 nodes are available: 8 node(s) were unschedulable."])
    assert (blocked.state, blocked.code) == ("admitted", km.HEALTH_BLOCKED)


# --- every reason a catalogue entry can carry, granular and legacy -----------------------------------------------

_REASON_WORD = re.compile(r"\b[A-Z][A-Za-z]+\b")
_NOT_REASONS = {"Workload", "ClusterQueue", "LocalQueue", "Admitted", "True", "False", "LEAST", "NOT"}


def _reasons(entry: dict) -> list[str]:
    """Every condition reason an entry may appear with: its granular reasons and its legacy ones."""
    condition = entry.get("condition") if isinstance(entry.get("condition"), dict) else {}
    texts = [str(condition.get("reason") or ""), str(entry.get("legacy_reason") or "")]
    out = []
    for text in texts:
        text = re.sub(r"\([^)]*\)", "", text)  # "(most severe across pod sets)", "(same)", ...
        for word in _REASON_WORD.findall(text):
            if word not in _NOT_REASONS and word not in out:
                out.append(word)
    return out


def _examples_with_reasons() -> list[tuple[str, str, str]]:
    out = []
    for message_id, _which, text, entry in _examples():
        for reason in _reasons(entry) or [""]:
            out.append((message_id, reason, text))
    assert out, f"no example in {CATALOGUE}"
    return out


def test_catalogue_reasons_are_parsed():
    by_id = {e["id"]: e for e in _entries()}
    assert _reasons(by_id["podset_flavor_assignment_failed"]) == [
        "NoMatchingFlavor",
        "ExceedsMaxQuota",
        "WaitingForQuota",
        "TopologyPlacementFailed",
        "WaitingForPreemptedWorkloads",
        "Pending",
    ]
    assert _reasons(by_id["cluster_queue_missing"]) == ["Misconfigured", "Inadmissible", "Pending"]
    assert "Waiting" in _reasons(by_id["waiting_for_pods_ready_block"])
    legacy = {r for e in _entries() for r in _reasons(e)}
    assert {"Pending", "Inadmissible", "Waiting", "AdmissionGated"} <= legacy


@pytest.mark.parametrize(("message_id", "reason", "text"), _examples_with_reasons())
def test_translate_catalogue_example_under_every_reason(message_id, reason, text):
    """The message decides, the reason is only a hint: granular and legacy reasons give the same code."""
    t = km.translate(text, reason=reason)
    assert t.recognised, (message_id, reason)
    assert t.code == EXPECTED[message_id], (message_id, reason, t.code)
    if reason:
        assert t.details.get("reason") == reason


def test_every_granular_and_legacy_reason_has_a_hint_or_is_informational():
    """No reason of the catalogue is unknown to the hint table, except those of informational conditions."""
    informational = {
        "Admitted",
        "NoReservation",
        "UnsatisfiedAdmissionChecks",
        "PendingDelayedTopologyRequests",
        "UnsatisfiedChecks",
        "NoReservationUnsatisfiedChecks",
        "QuotaReserved",
        "WaitForStart",
        "WaitForRecovery",
        "Started",
        "Recovered",
        "PodsReady",
        "Reactivated",
        "BackoffFinished",
        "LocalQueueRestarted",
        "ClusterQueueRestarted",
        "Stopped",
        "FlavorNotFound",
        "AdmissionCheckNotFound",
        "AdmissionCheckInactive",
        "TopologyNotFound",
        "MultipleMultiKueueAdmissionChecks",
        "MultiKueueAdmissionCheckAppliedPerFlavor",
        "MultiKueueWithProvisioningRequest",
        "Terminating",
        "Unknown",
        # Evicted / DeactivationTarget reasons: the whole-message patterns decide, the sync maps the reason
        "Deactivated",
        "DeactivatedDueToRequeuingLimitExceeded",
        "DeactivatedDueToAdmissionCheck",
        "DeactivatedDueToMaximumExecutionTimeExceeded",
        "RequeuingLimitExceeded",
        "AdmissionCheck",
        "MaximumExecutionTimeExceeded",
        "Preempted",
        "PodsReadyTimeout",
        "ClusterQueueStopped",
        "LocalQueueStopped",
        "NodeFailures",
    }
    quota_reserved = set()
    for entry in _entries():
        condition = entry.get("condition") if isinstance(entry.get("condition"), dict) else {}
        if condition.get("type") == "QuotaReserved" and condition.get("status") == "False":
            quota_reserved |= set(_reasons(entry))
    unknown = quota_reserved - set(km.REASON_HINTS) - informational - {"Pending"}
    assert unknown == set(), "QuotaReserved=False reasons with no hint"


# --- old and new wordings beyond the catalogue's examples (its formats and version notes) --------------------------

P = "couldn't assign flavors to pod set main: "

#: (catalogue id, text, code, numbers/fields the translation must carry)
WORDINGS: list[tuple[str, str, str, dict]] = [
    # podset_flavor_assignment_error: the known error texts after the colon (notes)
    (
        "podset_flavor_assignment_error",
        "failed to assign flavors to pod set main: more than one TAS flavor assigned: [a b]",
        km.MISCONFIGURED,
        {"podset": "main", "error": "more than one TAS flavor assigned: [a b]"},
    ),
    (
        "podset_flavor_assignment_error",
        "failed to assign flavors to pod set w: no TAS flavor assigned",
        km.MISCONFIGURED,
        {},
    ),
    (
        "podset_flavor_assignment_error",
        "failed to assign flavors to pod set w: workload requires Topology, but there is no TAS cache information",
        km.MISCONFIGURED,
        {},
    ),
    (
        "podset_flavor_assignment_error",
        "failed to assign flavors to pod set w: preferred topology is not supported with ElasticJobsViaWorkloadSlices",
        km.MISCONFIGURED,
        {},
    ),
    # quota: per-resource quantity formats (notes), v0.9's "in cohort" form
    (
        "insufficient_unused_quota",
        P + "insufficient unused quota for cpu in flavor a, 500m more needed",
        km.QUOTA_EXHAUSTED,
        {"resource": "cpu", "missing": 500},
    ),
    (
        "insufficient_unused_quota",
        P + "insufficient unused quota for memory in flavor a, 5Gi more needed",
        km.QUOTA_EXHAUSTED,
        {"resource": "memory", "missing": 5 * 1024**3},
    ),
    (
        "insufficient_unused_quota",
        P + "insufficient unused quota in cohort for nvidia.com/gpu in flavor h100, 3 more needed",
        km.QUOTA_EXHAUSTED,
        {"missing": 3, "flavor": "h100"},
    ),
    # maximum capacity: new form, "<unlimited>" overflow, v0.10-v0.14.1 form, v0.9 form
    (
        "max_capacity_exceeded",
        P + "insufficient quota for nvidia.com/gpu in flavor h100, previously considered podsets requests (8) + "
        "current podset request (32) > maximum capacity (16)",
        km.EXCEEDS_MAXIMUM,
        {"previous": 8, "request": 32, "max": 16},
    ),
    (
        "max_capacity_exceeded",
        P + "insufficient quota for nvidia.com/gpu in flavor h100, previously considered podsets requests (0) + "
        "current podset request (32) > maximum capacity (<unlimited>)",
        km.EXCEEDS_MAXIMUM,
        {"request": 32, "max": "<unlimited>"},
    ),
    (
        "max_capacity_exceeded_legacy",
        P + "insufficient quota for cpu in flavor a, request > maximum capacity (24 > 16)",
        km.EXCEEDS_MAXIMUM,
        {"request": 24000, "max": 16000},
    ),
    (
        "max_capacity_exceeded_legacy",
        P + "insufficient quota for nvidia.com/gpu in flavor h100 in ClusterQueue",
        km.EXCEEDS_MAXIMUM,
        {"flavor": "h100"},
    ),
    # flavor matching: a taint with an empty value prints two spaces (notes)
    (
        "untolerated_taint",
        P + "untolerated taint {dedicated  NoSchedule <nil>} in flavor spot",
        km.NO_MATCHING_FLAVOR,
        {"key": "dedicated", "value": "", "effect": "NoSchedule", "flavor": "spot"},
    ),
    # TAS: before v0.16 no exclusion statistics; multi-layer form; the three "no level" forms
    (
        "tas_fits_only_some",
        P + 'topology "gpu" allows to fit only 3 out of 4 pod(s)',
        km.TOPOLOGY_FRAGMENTED,
        {"fit": 3, "total": 4},
    ),
    (  # v0.16+: the exclusion statistics follow the TAS reason and decide health vs fragmentation
        "tas_fits_only_some",
        P + 'topology "gpu" allows to fit only 1 out of 2 slice(s). Total nodes: 12; excluded: affinity: 1, '
        'nodeSelector: 2, resource "nvidia.com/gpu": 4, taint "nvidia.com/gpu-xid-error=79:NoSchedule": 3',
        km.HEALTH_BLOCKED,
        {"fit": 1, "total": 2, "total_nodes": 12, "healthExcludedNodes": 3},
    ),
    (
        "tas_fits_none",
        P + 'topology "gpu" doesn\'t allow to fit any of 2 pod(s)',
        km.TOPOLOGY_FRAGMENTED,  # before v0.16, and without the pool view: nothing says the devices are taken
        {"total": 2},
    ),
    (
        "tas_fits_none",
        P + 'topology "gpu" doesn\'t allow to fit any of 2 pod(s). Total nodes: 4; excluded: resource '
        '"nvidia.com/gpu": 4',
        km.CLASS_EXHAUSTED,  # every node lacks free devices
        {"total": 2, "total_nodes": 4},
    ),
    (
        "tas_multilayer_no_fit",
        P + 'topology "gpu" doesn\'t allow to fit; 1/2 slice(s) fit on level rack; 0/2 slice(s) fit on level block',
        km.TOPOLOGY_FRAGMENTED,
        {"layers": "1/2 slice(s) fit on level rack; 0/2 slice(s) fit on level block"},
    ),
    (
        "tas_no_requested_level",
        P + "no requested topology level for slices: cloud.com/rack",
        km.NO_MATCHING_FLAVOR,
        {"level": "cloud.com/rack"},
    ),
    (
        "tas_no_requested_level",
        P + "podset slice topology cloud.com/host is above the podset topology cloud.com/rack",
        km.NO_MATCHING_FLAVOR,
        {"podset_level": "cloud.com/rack"},
    ),
    (
        "tas_no_requested_level",
        P + "no topology domains at level: cloud.com/block",
        km.NO_MATCHING_FLAVOR,
        {"domain_level": "cloud.com/block"},
    ),
    # preemption suffixes, with their counts; an event truncated at 1 KiB
    (
        "pending_preemption_suffix",
        P + "insufficient unused quota for nvidia.com/gpu in flavor h100, 8 more needed. Pending the preemption of 2 "
        "workload(s)",
        km.PREEMPTION_IN_PROGRESS,
        {"preempting": 2, "missing": 8},
    ),
    (
        "preemption_failed_suffix",
        P + "insufficient unused quota for nvidia.com/gpu in flavor h100, 8 more needed. Preempting 3 workload(s) "
        "failed, will retry.",
        km.PREEMPTION_IN_PROGRESS,
        {"preemptionsFailed": 3},
    ),
    (
        "insufficient_unused_quota",
        P + "insufficient unused quota for nvidia.com/gpu in flavor h100, 8 more needed ...",
        km.QUOTA_EXHAUSTED,
        {"missing": 8},
    ),
    # queues: the controller's variants (notes)
    ("local_queue_missing", "LocalQueue main is terminating or missing", km.MISCONFIGURED, {"localqueue": "main"}),
    ("local_queue_inactive", "LocalQueue main is stopped", km.MISCONFIGURED, {"localqueue": "main"}),
    ("cluster_queue_inactive", "ClusterQueue cq is stopped", km.MISCONFIGURED, {"clusterqueue": "cq"}),
    (
        "namespace_selector_mismatch",
        'workload namespace "team-x" does not exist: namespaces "team-x" not found',
        km.MISCONFIGURED,
        {"namespace": "team-x"},
    ),
    (
        "pending_evaluation",
        "Bypassed scheduling evaluation because an equivalent workload recently failed",
        km.HIGHER_PRIORITY_AHEAD,
        {},
    ),
    # deactivation: the plain and the "due to" forms; the three DeactivationTarget texts
    ("deactivated", "The workload is deactivated", km.MISCONFIGURED, {}),
    (
        "deactivated",
        "The workload is deactivated due to exceeding the maximum execution time",
        km.MISCONFIGURED,
        {"cause": "exceeding the maximum execution time"},
    ),
    ("deactivation_target", "exceeding the maximum number of re-queuing retries", km.MISCONFIGURED, {}),
    ("deactivation_target", "exceeding the maximum execution time", km.MISCONFIGURED, {}),
    (
        "deactivation_target",
        'AdmissionCheck in Rejected state: "prov" (no capacity)',
        km.MISCONFIGURED,
        {"state": "Rejected"},
    ),
    # preemption: v0.15+ with paths and the event's priorities, v0.11-v0.14, v0.8-v0.10, v0.7, v0.6
    (
        "preempted",
        "Preempted to accommodate a workload (UID: a-1, JobUID: j-2) due to reclamation within the cohort; preemptor "
        "path: /org/b; preemptee path: /org/a; preemptor effective priority: 100 (base: 100, boost: 0); preemptee "
        "effective priority: 10 (base: 10, boost: 0)",
        km.HIGHER_PRIORITY_AHEAD,
        {"preemptorJobUid": "j-2", "preemptor_path": "/org/b", "preemptee_path": "/org/a"},
    ),
    (
        "preempted",
        "Preempted to accommodate a workload (UID: a-1, JobUID: j-2) due to prioritization in the ClusterQueue",
        km.HIGHER_PRIORITY_AHEAD,
        {"why": "prioritization in the ClusterQueue", "preemptorJobUid": "j-2"},
    ),
    (
        "preempted",
        "Preempted to accommodate a workload (UID: a-1) due to reclamation within the cohort",
        km.HIGHER_PRIORITY_AHEAD,
        {"why": "reclamation within the cohort"},
    ),
    (
        "preempted",
        "Preempted to accommodate a workload (UID: a-1) in the ClusterQueue",
        km.HIGHER_PRIORITY_AHEAD,
        {"why_v07": "ClusterQueue"},
    ),
    ("preempted", "Preempted to accommodate a higher priority Workload", km.HIGHER_PRIORITY_AHEAD, {}),
    # evictions
    (
        "admission_check_retry_eviction",
        'Evicted due to AdmissionCheck in Retry state: "prov" (retry)',
        km.AWAITING_PROVISIONING,
        {"state": "Retry"},
    ),
    ("queue_stopped_eviction", "The ClusterQueue is stopped", km.MISCONFIGURED, {"kind": "ClusterQueue"}),
    ("queue_stopped_eviction", "The LocalQueue is stopped", km.MISCONFIGURED, {"kind": "LocalQueue"}),
    (
        "tas_multiple_node_failures",
        "Workload eviction triggered due to multiple TAS assigned node failures, including: n1, n2",
        km.HEALTH_BLOCKED,
        {"nodes": ["n1", "n2"]},
    ),
    # informational conditions: every literal alternative of their formats
    ("requeued_messages", "The workload was reactivated", km.HIGHER_PRIORITY_AHEAD, {}),
    ("requeued_messages", "The workload backoff was finished", km.HIGHER_PRIORITY_AHEAD, {}),
    ("requeued_messages", "The LocalQueue was restarted after being stopped", km.HIGHER_PRIORITY_AHEAD, {}),
    ("requeued_messages", "The ClusterQueue was restarted after being stopped", km.HIGHER_PRIORITY_AHEAD, {}),
    ("pods_ready_messages", "Not all pods are ready or succeeded", "starting", {}),
    ("pods_ready_messages", "At least one pod has failed, waiting for recovery", "starting", {}),
    ("pods_ready_messages", "All pods reached readiness and the workload is running", "running", {}),
    ("admitted_condition_messages", "The workload is admitted", "admitted", {}),
    ("admitted_condition_messages", "The workload has no reservation", km.HIGHER_PRIORITY_AHEAD, {}),
    (
        "admitted_condition_messages",
        "The workload has no reservation and not all checks ready",
        km.HIGHER_PRIORITY_AHEAD,
        {},
    ),
    ("admitted_condition_messages", "The workload has not all checks ready", km.AWAITING_PROVISIONING, {}),
    ("admitted_condition_messages", "There are pending delayed topology requests", km.AWAITING_PROVISIONING, {}),
    ("quota_reserved_true", "Quota reserved in ClusterQueue cq", "admitted", {"clusterqueue": "cq"}),
    (
        "quota_reserved_true",
        "Quota reserved in ClusterQueue cq, wait time since queued was 42s; Flavors considered: main: h100(Fit)",
        "admitted",
        {"clusterqueue": "cq", "wait_s": 42},
    ),
    (
        "quota_reserved_true",
        "Admitted by ClusterQueue cq, wait time since reservation was 3s",
        "admitted",
        {"reservation_wait_s": 3},
    ),
    (
        "admission_check_state_messages",
        "Retrying after failure: quota",
        km.AWAITING_PROVISIONING,
        {"detail": "quota"},
    ),
    ("admission_check_state_messages", "Retrying after booking expired: gone", km.AWAITING_PROVISIONING, {}),
    ("admission_check_state_messages", "the check is not active", km.AWAITING_PROVISIONING, {}),
    ("admission_check_state_messages", "the provisioning request is not needed", km.AWAITING_PROVISIONING, {}),
    (
        "admission_check_state_messages",
        "Reset to Pending after eviction. Previously: Ready",
        km.AWAITING_PROVISIONING,
        {"prev": "Ready"},
    ),
    (
        "cluster_queue_active_condition",
        'Can\'t admit new workloads: references missing ResourceFlavor(s): [h200], there is no Topology "t" for '
        'TAS flavor "f".',
        km.MISCONFIGURED,
        {"causes": 'references missing ResourceFlavor(s): [h200], there is no Topology "t" for TAS flavor "f"'},
    ),
    ("cluster_queue_active_condition", "Can't admit new workloads; clusterQueue is terminating", km.MISCONFIGURED, {}),
    ("cluster_queue_active_condition", "Can admit new workloads", "", {}),
    ("job_events", "Created Workload: team-a/job-train-1a2b3", "", {"workload": "team-a/job-train-1a2b3"}),
    ("job_events", "Admitted by clusterQueue vision", "", {"clusterqueue": "vision"}),
    ("job_events", 'WorkloadPriorityClass "urgent" not found', km.MISCONFIGURED, {"wpc": "urgent"}),
    ("job_events", "Kueue managed child job suspended", "", {}),
    ("on_hold", "Job is on hold", km.MISCONFIGURED, {}),
]


def _flat(t: km.Translation) -> dict:
    flat = dict(t.details)
    for ps in t.details.get("podSets", []):
        for reason in ps["reasons"]:
            flat.update(reason)
    return flat


@pytest.mark.parametrize(("message_id", "text", "code", "numbers"), WORDINGS, ids=[w[1][:60] for w in WORDINGS])
def test_translate_old_and_new_wordings(message_id, text, code, numbers):
    t = km.translate(text)
    assert t.recognised, text
    assert message_id in t.ids, (message_id, t.ids)
    assert t.code == code
    assert t.message
    flat = _flat(t)
    for key, value in numbers.items():
        assert flat.get(key) == value, (key, flat)


def test_wordings_cover_every_catalogue_entry_with_alternatives():
    """Each entry whose format lists alternatives ("A | B") has every alternative among the wordings tested."""
    tested = {w[1] for w in WORDINGS}
    for entry in _entries():
        fmt = entry["format"].split("   (")[0]
        if " | " not in fmt:
            continue
        for alternative in fmt.split(" | "):
            literal = alternative.strip().split("%")[0].rstrip(": ")
            assert any(literal in text for text in tested), (entry["id"], alternative)


def test_no_reservation_is_not_read_as_reserved():
    t = km.translate("The workload has no reservation and not all checks ready", reason="WaitingForQuota")
    assert t.code == km.QUOTA_EXHAUSTED  # the reason hints; quota is *not* reserved
    assert "no quota is reserved" in t.message
