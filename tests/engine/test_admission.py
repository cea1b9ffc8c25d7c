"""Admission prerequisites: namespaceSelector, queues missing or stopped, admission checks."""

from __future__ import annotations

from dataclasses import replace

from queues.engine import (
    Admission,
    AdmissionCheck,
    AdmissionCheckRule,
    LabelSelector,
    LabelSelectorRequirement,
    LocalQueue,
    Namespace,
    PodSetAdmission,
    schedule,
    settle,
)

from .builders import GPU, cq, state, wl


def pending(s):
    return settle(s, 0).pending


def test_namespace_selector_match_labels_and_expressions():
    sel = LabelSelector({"team": "ml"}, (LabelSelectorRequirement("tier", "In", ("gold", "silver")),))
    queue = cq("a", {"f": {GPU: 8}}, selector=sel)
    lqs = [LocalQueue("ns1", "main", "a"), LocalQueue("ns2", "main", "a")]
    nss = [Namespace("ns1", {"team": "ml", "tier": "gold"}), Namespace("ns2", {"team": "ml", "tier": "bronze"})]
    s = state([queue], [wl("ns1/ok", 1), wl("ns2/no", 1)], local_queues=lqs, namespaces=nss)
    final = settle(s, 0)
    assert {w.key for w in final.state.workloads if w.admission} == {"ns1/ok"}
    reason = final.pending["ns2/no"]
    assert reason.code == "misconfigured"
    assert reason.kueue_message == "workload namespace doesn't match ClusterQueue selector"


def test_namespace_selector_empty_selects_all_and_none_selects_nothing():
    assert pending(state([cq("a", {"f": {GPU: 8}}, selector=LabelSelector())], [wl("a/j", 1)])) == {}
    reason = pending(state([cq("a", {"f": {GPU: 8}}, selector=None)], [wl("a/j", 1)]))["a/j"]
    assert reason.code == "misconfigured"


def test_namespace_selector_implicit_metadata_name_label():
    sel = LabelSelector({"kubernetes.io/metadata.name": "a"})
    assert pending(state([cq("a", {"f": {GPU: 8}}, selector=sel)], [wl("a/j", 1)])) == {}


def test_local_queue_missing():
    reason = pending(state([cq("a", {"f": {GPU: 8}})], [wl("a/j", 1, queue="nope")]))["a/j"]
    assert reason.code == "misconfigured"
    assert reason.kueue_message == "LocalQueue nope doesn't exist"
    assert reason.kueue_reason == "Misconfigured"


def test_cluster_queue_missing():
    s = state([cq("a", {"f": {GPU: 8}})], [wl("a/j", 1)], local_queues=[LocalQueue("a", "main", "ghost")])
    reason = pending(s)["a/j"]
    assert reason.kueue_message == "ClusterQueue ghost doesn't exist"
    assert reason.code == "misconfigured"


def test_cluster_queue_stopped_and_local_queue_stopped():
    reason = pending(state([cq("a", {"f": {GPU: 8}}, stop="Hold")], [wl("a/j", 1)]))["a/j"]
    assert reason.kueue_message == "ClusterQueue a is stopped"
    assert reason.code == "misconfigured"
    s = state(
        [cq("a", {"f": {GPU: 8}})], [wl("a/j", 1)], local_queues=[LocalQueue("a", "main", "a", stop_policy="Hold")]
    )
    assert pending(s)["a/j"].kueue_message == "LocalQueue main is inactive"


def test_cluster_queue_with_missing_flavor_is_inactive():
    s = state([cq("a", {"ghost": {GPU: 8}})], [wl("a/j", 1)], flavors=[])
    reason = pending(s)["a/j"]
    assert reason.kueue_message == "ClusterQueue a is inactive"
    assert "references missing ResourceFlavor(s): ghost" in reason.message


def test_inactive_admission_check_makes_queue_inactive():
    s = state(
        [cq("a", {"f": {GPU: 8}}, checks=[AdmissionCheckRule("prov")])],
        [wl("a/j", 1)],
        checks=[AdmissionCheck("prov", "kueue.x-k8s.io/provisioning-request", active=False)],
    )
    reason = pending(s)["a/j"]
    assert reason.code == "misconfigured"
    assert "inactive AdmissionCheck(s): prov" in reason.message


def test_admission_checks_reserve_quota_then_admit():
    queue = cq("a", {"f": {GPU: 8}}, checks=[AdmissionCheckRule("prov")])
    checks = [AdmissionCheck("prov", "kueue.x-k8s.io/provisioning-request")]
    s = state([queue], [wl("a/j", 4)], checks=checks)
    result = schedule(s, 0)
    decision = result.admitted[0]
    assert decision.pending_checks == ("prov",)
    assert not decision.admitted
    reason = result.pending["a/j"]
    assert reason.code == "awaiting_provisioning"
    assert reason.kueue_message == "The workload has not all checks ready"
    # The reservation holds quota: another workload waits.
    reserved = replace(s.workloads[0], admission=Admission("a", (PodSetAdmission("main", 1, {GPU: "f"}),)))
    s2 = state([queue], [reserved, wl("a/k", 6, created=1)], checks=checks)
    after = settle(s2, 1).pending
    assert after["a/j"].code == "awaiting_provisioning"
    assert after["a/k"].code == "quota_exhausted"
    ready = replace(reserved, admission_checks={"prov": "Ready"})
    assert "a/j" not in settle(state([queue], [ready], checks=checks), 1).pending


def test_admission_check_on_other_flavor_does_not_apply():
    queue = cq("a", {"f": {GPU: 8}}, checks=[AdmissionCheckRule("prov", on_flavors=("other",))])
    s = state([queue], [wl("a/j", 4)], checks=[AdmissionCheck("prov")])
    assert schedule(s, 0).admitted[0].admitted


def test_failed_admission_check_is_not_scheduled():
    s = state([cq("a", {"f": {GPU: 8}})], [wl("a/j", 1, checks={"prov": "Retry"})])
    reason = pending(s)["a/j"]
    assert reason.kueue_message == "The workload has failed admission checks"


def test_deactivated_workload_is_not_scheduled():
    s = state([cq("a", {"f": {GPU: 8}})], [replace(wl("a/j", 1), active=False)])
    reason = pending(s)["a/j"]
    assert reason.kueue_message == "The workload is deactivated"
    assert reason.code == "misconfigured"
