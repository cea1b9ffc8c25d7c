"""The official client over HTTP against the emulator: retries, errors, pagination, watch, apply, validation."""

from __future__ import annotations

import threading
import time

import pytest

from clusters.backends.k8s.client import KubeClient, forget_client
from clusters.kube_sync.api import (
    CLUSTER_QUEUES,
    JOBS,
    NAMESPACES,
    NODES,
    KubeConflict,
    KubeGone,
    KubeNotFound,
    KubeRejected,
    KubeUnavailable,
    list_all,
)
from pools.models import Cluster
from tests.kube.cluster import gpu_node
from tests.kube.schemas import validate, validate_kueue

pytestmark = pytest.mark.django_db


def _cq(name: str, nominal: int = 8, **spec) -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [{"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": nominal}]}],
                }
            ],
            **spec,
        },
    }


def test_client_retries_transient_errors_with_backoff(api, emulator):
    emulator.put(gpu_node("n1"))
    fault = emulator.fail("GET", r"/api/v1/nodes", status=503, times=2)
    page = api.list_page(NODES)
    assert [n["metadata"]["name"] for n in page.items] == ["n1"]
    assert fault.hits == 2


def test_client_honours_retry_after_on_429(cluster, emulator):
    slept: list[float] = []
    client = KubeClient(cluster, sleep=slept.append)
    emulator.fail("GET", r"/api/v1/nodes", status=429, retry_after="0.01", times=1)
    client.list_page(NODES)
    assert slept == [0.01]


def test_client_gives_up_after_the_retries(api, emulator, settings):
    settings.KUBE_API_RETRIES = 2
    fault = emulator.fail("GET", r"/api/v1/nodes", status=500, times=10)
    with pytest.raises(KubeUnavailable):
        api.list_page(NODES)
    assert fault.hits == 3


def test_client_does_not_retry_client_errors(api, emulator):
    fault = emulator.fail("GET", r"/api/v1/nodes\?", status=403, times=5)
    with pytest.raises(KubeRejected) as info:
        api.list_page(NODES)
    assert info.value.status == 403
    assert fault.hits == 1
    with pytest.raises(KubeNotFound):
        api.get(NODES, name="nope")


def test_client_timeouts_are_transient(api, emulator, settings):
    settings.KUBE_API_READ_TIMEOUT = 0.3
    emulator.put(gpu_node("n1"))
    fault = emulator.fail("GET", r"/api/v1/nodes", delay=1.0, times=1)
    page = api.list_page(NODES)  # first attempt times out, the retry answers
    assert fault.hits == 1
    assert len(page.items) == 1


def test_client_unreachable_server_is_unavailable(db, tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    cluster = Cluster.objects.create(name="down", backend="kubernetes", kubeconfig_path=str(path))
    forget_client(cluster)
    with pytest.raises(KubeUnavailable):
        KubeClient(cluster, sleep=lambda s: None).list_page(NODES)


def test_client_bad_kubeconfig_is_unavailable_with_a_reason(db, tmp_path):
    cluster = Cluster.objects.create(name="nocfg", backend="kubernetes", kubeconfig_path=str(tmp_path / "missing"))
    with pytest.raises(KubeUnavailable, match="cannot load the connection settings"):
        KubeClient(cluster).list_page(NODES)


def test_client_paginates_with_continue(api, emulator):
    for i in range(7):
        emulator.put(gpu_node(f"n{i}"))
    pages = list(list_all(api, NODES, limit=3))
    assert [len(p.items) for p in pages] == [3, 3, 1]
    assert len({p.resource_version for p in pages}) == 1  # one list, one resourceVersion
    assert pages[0].items[0]["kind"] == "Node"  # list items get their kind back


def test_client_expired_continue_token_is_gone(api, emulator):
    for i in range(4):
        emulator.put(gpu_node(f"n{i}"))
    first = api.list_page(NODES, limit=2)
    emulator.compact()
    with pytest.raises(KubeGone):
        api.list_page(NODES, limit=2, continue_token=first.continue_token)


def test_watch_streams_changes_after_a_version_with_bookmarks(api, emulator):
    emulator.put(gpu_node("n1"))
    rv = api.list_page(NODES).resource_version

    def later():
        time.sleep(0.2)
        emulator.put(gpu_node("n2"))
        emulator.remove("Node", "n1")

    threading.Thread(target=later).start()
    events = [e for e in api.watch(NODES, resource_version=rv, timeout_seconds=1) if e.type != "IDLE"]
    kinds = [(e.type, e.object["metadata"].get("name")) for e in events if e.type != "BOOKMARK"]
    assert kinds == [("ADDED", "n2"), ("DELETED", "n1")]
    assert any(e.type == "BOOKMARK" for e in events)
    assert int(events[-1].resource_version) >= int(rv)


def test_watch_from_a_compacted_version_raises_gone(api, emulator):
    emulator.put(gpu_node("n1"))
    rv = api.list_page(NODES).resource_version
    emulator.put(gpu_node("n2"))
    emulator.compact()
    with pytest.raises(KubeGone):
        list(api.watch(NODES, resource_version=rv, timeout_seconds=1))


def test_watch_dropped_mid_stream_just_ends(api, emulator):
    rv = api.list_page(NODES).resource_version
    for i in range(5):
        emulator.put(gpu_node(f"n{i}"))
    emulator.fail("GET", r"watch=true", drop_after=2)
    events = [e for e in api.watch(NODES, resource_version=rv, timeout_seconds=2) if e.type == "ADDED"]
    assert 0 < len(events) <= 2  # what arrived before the drop; the caller resumes from the last version


def test_watch_label_selector(api, emulator):
    rv = api.list_page(NODES).resource_version
    emulator.put(gpu_node("a", labels={"pool": "x"}))
    emulator.put(gpu_node("b"))
    events = list(api.watch(NODES, resource_version=rv, label_selector="pool=x", timeout_seconds=1))
    assert [e.object["metadata"]["name"] for e in events if e.type == "ADDED"] == ["a"]


def test_create_conflict_and_delete_with_precondition(api, emulator):
    emulator.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}},
    }
    created = api.create(JOBS, job)
    with pytest.raises(KubeConflict) as info:
        api.create(JOBS, job)
    assert info.value.already_exists
    with pytest.raises(KubeConflict):
        api.delete(JOBS, name="j", namespace="ns", uid="not-the-uid")
    api.delete(JOBS, name="j", namespace="ns", propagation_policy="Foreground", uid=created["metadata"]["uid"])
    api.delete(JOBS, name="j", namespace="ns")  # gone already: fine
    assert emulator.deletes[-1]["policy"] == "Foreground"


def test_server_side_apply_ownership_and_conflicts(api, emulator):
    api.apply(CLUSTER_QUEUES, _cq("cq", 8))
    assert emulator.get_obj("ClusterQueue", "cq")["metadata"]["managedFields"][0]["manager"] == "gpu-pool-portal"
    emulator.edit("ClusterQueue", "cq", spec={"stopPolicy": "Hold"})  # another manager's field
    emulator.edit("ClusterQueue", "cq", manager="admin", spec={"queueingStrategy": "StrictFIFO"})
    api.apply(CLUSTER_QUEUES, _cq("cq", 10))  # no conflict: other managers' fields are untouched
    assert emulator.get_obj("ClusterQueue", "cq")["spec"]["stopPolicy"] == "Hold"
    with pytest.raises(KubeConflict) as info:
        api.apply(CLUSTER_QUEUES, _cq("cq", 10, queueingStrategy="BestEffortFIFO"))
    assert info.value.field_conflicts == [
        {
            "field": ".spec.queueingStrategy",
            "manager": "admin",
            "message": 'conflict with "admin" using kueue.x-k8s.io/v1beta2',
        }
    ]
    api.apply(CLUSTER_QUEUES, _cq("cq", 10, queueingStrategy="BestEffortFIFO"), force=True)
    assert emulator.get_obj("ClusterQueue", "cq")["spec"]["queueingStrategy"] == "BestEffortFIFO"


def test_apply_removes_fields_the_manager_stops_applying(api, emulator):
    api.apply(CLUSTER_QUEUES, _cq("cq", 8, stopPolicy="Hold"))
    api.apply(CLUSTER_QUEUES, _cq("cq", 8))
    assert "stopPolicy" not in emulator.get_obj("ClusterQueue", "cq")["spec"]


def test_invalid_objects_are_rejected_with_422(api, emulator):
    bad = _cq("cq")
    bad["spec"]["cohort"] = "v1beta1-name"  # renamed to cohortName in v1beta2
    with pytest.raises(KubeRejected) as info:
        api.apply(CLUSTER_QUEUES, bad)
    assert info.value.status == 422
    assert "cohort" in emulator.rejected[0]
    emulator.rejected.clear()


def test_serves_discovers_group_versions(api, emulator):
    assert api.serves("kueue.x-k8s.io/v1beta2")
    assert api.serves("jobset.x-k8s.io/v1alpha2")  # the workload kinds' CRDs are installed in the emulator
    assert not api.serves("trainer.kubeflow.org/v1alpha1")
    assert api.server_version().startswith("v1.34")
    with pytest.raises(KubeRejected):
        api.apply(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "Bad_Name"}})
    emulator.rejected.clear()


# --- the validators themselves ----------------------------------------------------------------------------------


def test_validator_translates_go_regexes_and_rejects_unknown_fields():
    from tests.kube.schemas import crd_schemas

    patterns = []

    def walk(node):
        if isinstance(node, dict):
            if "pattern" in node:
                patterns.append(node["pattern"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(crd_schemas())
    assert any(p.startswith("(?i)^") for p in patterns)  # Go's ^(?i)… moved for Python
    assert validate_kueue(_cq("cq")) == []
    bad = _cq("cq")
    bad["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "eight"
    assert validate_kueue(bad)


def test_validator_honours_cel_rules_and_list_types():
    no_cohort_borrowing = _cq("cq")
    no_cohort_borrowing["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"] = 2
    assert any("CEL rule failed" in e for e in validate_kueue(no_cohort_borrowing))
    duplicate = _cq("cq")
    duplicate["spec"]["resourceGroups"][0]["flavors"].append(dict(duplicate["spec"]["resourceGroups"][0]["flavors"][0]))
    assert any("duplicate" in e for e in validate_kueue(duplicate))
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}},
    }
    assert validate(job) == []
    job["spec"]["suspended"] = True  # a typo: strict schemas reject it
    assert validate(job)


def test_emulator_answers_an_injected_403_as_the_api_server_does(api, emulator):
    emulator.fail("GET", r"/api/v1/nodes/gpu-x\?", status=403, message='nodes "gpu-x" is forbidden')
    with pytest.raises(KubeRejected) as info:
        api.get(NODES, name="gpu-x")
    assert (info.value.status, info.value.reason) == (403, "Forbidden")
    assert 'nodes "gpu-x" is forbidden' in info.value.message
