"""``manage.py explain FILE [--json]``: Workloads from a kubectl dump → the portal's wait-reason codes."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from queues import kueue_messages as km
from queues.explain import ExplainError, explain_text
from tests.kube.schemas import validate
from tests.kube.test_kueue_messages import EXPECTED, _examples, _reason

REPO = Path(__file__).resolve().parents[2]
QUOTA = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, 8 more needed"


def workload(name, *conditions, gpus=8, count=1, namespace="team-a", queue="main", job="", **status) -> dict:
    """A Workload as kubectl prints it (valid against Kueue's CRD)."""
    meta = {"name": name, "namespace": namespace, "creationTimestamp": "2026-09-01T07:59:00Z"}
    if job:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": f"uid-{job}"}]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": meta,
        "spec": {
            "queueName": queue,
            "podSets": [
                {
                    "name": "main",
                    "count": count,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "train",
                                    "image": "train:1",
                                    "resources": {"requests": {"nvidia.com/gpu": str(gpus), "cpu": "8"}},
                                }
                            ],
                        }
                    },
                }
            ],
        },
        "status": {
            "conditions": [
                {
                    "type": t,
                    "status": s,
                    "reason": r,
                    "message": m,
                    "lastTransitionTime": "2026-09-01T08:00:00Z",
                    "observedGeneration": 1,
                }
                for t, s, r, m in conditions
            ],
            **status,
        },
    }


def cluster_queue(name, *, nominal="16", used="16", cohort="", borrowing=None) -> dict:
    """A ClusterQueue with its status as Kueue reports it."""
    res = {"name": "nvidia.com/gpu", "nominalQuota": nominal}
    if borrowing is not None:
        res["borrowingLimit"] = borrowing
    spec = {
        "namespaceSelector": {},
        "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "h100", "resources": [res]}]}],
    }
    if cohort:
        spec["cohortName"] = cohort
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": spec,
        "status": {
            "flavorsReservation": [{"name": "h100", "resources": [{"name": "nvidia.com/gpu", "total": used}]}],
        },
    }


def node(name, *, gpus=8, taints=None, ready=True, pool="a") -> dict:
    """A GPU node."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "pool": pool}},
        "spec": {"taints": taints} if taints else {},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "127"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


FLAVOR = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "ResourceFlavor",
    "metadata": {"name": "h100"},
    "spec": {"nodeLabels": {"pool": "a"}, "topologyName": "gpu"},
}


def pod(name, node_name, gpus, job="other", *, unschedulable="") -> dict:
    """A Pod bound to a node (or pending with the scheduler's message)."""
    status = {"phase": "Running" if node_name else "Pending"}
    if unschedulable:
        status["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unschedulable}
        ]
    spec = {
        "containers": [{"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}],
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "labels": {"batch.kubernetes.io/job-name": job}},
        "spec": spec,
        "status": status,
    }


def as_list(*items) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": list(items)})


def run(text: str, *args: str) -> str:
    out = io.StringIO()
    call_command("explain", "-", *args, stdin=io.StringIO(text), stdout=out)
    return out.getvalue()


def run_file(tmp_path, text: str, *args: str) -> str:
    path = tmp_path / "dump.yaml"
    path.write_text(text)
    out = io.StringIO()
    call_command("explain", str(path), *args, stdout=out)
    return out.getvalue()


# --- the fixtures are real objects --------------------------------------------------------------------------------


def test_explain_fixture_workloads_are_valid_against_the_crd():
    assert validate(workload("w", ("QuotaReserved", "False", "Pending", QUOTA), job="a")) == []
    assert validate(cluster_queue("cq")) == []
    assert validate(FLAVOR) == []


# --- output ------------------------------------------------------------------------------------------------------


def test_explain_json_prints_name_code_message_per_workload(tmp_path):
    text = as_list(
        workload("job-a-1", ("QuotaReserved", "False", "Pending", QUOTA)),
        workload(
            "job-b-1",
            ("QuotaReserved", "False", "Inadmissible", "LocalQueue main doesn't exist"),
        ),
    )
    records = json.loads(run_file(tmp_path, text, "--json"))
    assert [(r["name"], r["code"]) for r in records] == [("job-a-1", "quota_exhausted"), ("job-b-1", "misconfigured")]
    assert all({"name", "code", "message"} <= set(r) for r in records)
    assert "8 more GPUs needed" in records[0]["message"]
    assert records[0]["kueue_message"] == QUOTA


def test_explain_table_output(tmp_path):
    out = run_file(tmp_path, as_list(workload("job-a-1", ("QuotaReserved", "False", "Pending", QUOTA))))
    assert "team-a/job-a-1  [quota_exhausted]  pending" in out
    assert "Kueue: " + QUOTA in out


def test_explain_reads_multi_document_yaml_and_json_lists():
    wl = workload("w1", ("QuotaReserved", "False", "Pending", QUOTA))
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ignored"}}
    multi = yaml.safe_dump_all([other, wl])
    assert json.loads(run(multi, "--json"))[0]["code"] == km.QUOTA_EXHAUSTED
    as_json = json.dumps({"apiVersion": "v1", "kind": "List", "items": [wl, other]})
    assert json.loads(run(as_json, "--json"))[0]["name"] == "w1"
    assert json.loads(run(json.dumps([wl]), "--json"))[0]["name"] == "w1"
    assert json.loads(run(json.dumps({"kind": "WorkloadList", "apiVersion": "v1", "items": [wl]}), "--json"))


def test_explain_unknown_text_is_a_visible_unrecognised_reason():
    text = "Kueue v0.31 invented a brand new reason"
    records = json.loads(run(as_list(workload("w", ("QuotaReserved", "False", "Pending", text))), "--json"))
    assert records[0]["code"] == "unrecognised"
    assert text in records[0]["message"]
    assert records[0]["message"].startswith("Unrecognised")


def test_explain_states_of_other_workloads():
    admitted = workload(
        "running",
        ("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
        ("Admitted", "True", "Admitted", "The workload is admitted"),
        ("PodsReady", "True", "Started", "All pods reached readiness and the workload is running"),
        admission={"clusterQueue": "cq", "podSetAssignments": []},
    )
    fresh = workload("fresh")
    records = {r["name"]: r for r in json.loads(run(as_list(admitted, fresh), "--json"))}
    assert records["running"]["code"] == "running"
    assert records["fresh"]["code"] == km.HIGHER_PRIORITY_AHEAD
    assert "not evaluated" in records["fresh"]["message"]


# --- with the pool view ------------------------------------------------------------------------------------------


def test_explain_quota_decided_with_cluster_queues():
    wl = workload("w", ("QuotaReserved", "False", "Pending", QUOTA), queue="q-a")
    lq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "q-a", "namespace": "team-a"},
        "spec": {"clusterQueue": "a"},
    }
    # team a used its 16 and borrowed its limit of 4; the cohort (a + b = 48) has 20 idle
    own = cluster_queue("a", nominal="16", used="20", cohort="org", borrowing="4")
    other = cluster_queue("b", nominal="32", used="8", cohort="org")
    records = json.loads(run(as_list(wl, lq, own, other), "--json"))
    assert records[0]["code"] == km.BORROW_LIMIT
    # the whole cohort is in use: capacity, not the team's limit
    other = cluster_queue("b", nominal="32", used="32", cohort="org")
    own = cluster_queue("a", nominal="16", used="16", cohort="org", borrowing="40")
    assert json.loads(run(as_list(wl, lq, own, other), "--json"))[0]["code"] == km.CLASS_EXHAUSTED
    # no cohort: the team's own quota
    assert json.loads(run(as_list(wl, lq, cluster_queue("a")), "--json"))[0]["code"] == km.QUOTA_EXHAUSTED


def test_explain_topology_failure_with_nodes_health_vs_fragmentation():
    tas = 'couldn\'t assign flavors to pod set main: topology "gpu" allows to fit only 1 out of 2 pod(s)'
    wl = workload("w", ("QuotaReserved", "False", "TopologyPlacementFailed", tas), count=2)
    # 2 pods of 8 wanted; 4 nodes with 4 GPUs used on each → 16 free in total, at most 4 together: fragmentation
    nodes = [node(f"n{i}") for i in range(4)]
    pods = [pod(f"p{i}", f"n{i}", 4) for i in range(4)]
    out = json.loads(run(as_list(wl, FLAVOR, *nodes, *pods), "--json"))[0]
    assert out["code"] == km.TOPOLOGY_FRAGMENTED
    # two nodes tainted for GPU errors hold the room the job needs: health
    sick = [{"key": "nvidia.com/gpu-xid-error", "value": "79", "effect": "NoSchedule"}]
    nodes = [node("n1"), node("n2", taints=sick), node("n3", ready=False)]
    out = json.loads(run(as_list(wl, FLAVOR, *nodes, pod("p1", "n1", 8)), "--json"))[0]
    assert out["code"] == km.HEALTH_BLOCKED
    # everything healthy and busy: the class is exhausted
    nodes = [node("n1"), node("n2")]
    out = json.loads(run(as_list(wl, FLAVOR, *nodes, pod("p1", "n1", 8), pod("p2", "n2", 6)), "--json"))[0]
    assert out["code"] == km.CLASS_EXHAUSTED


def test_explain_flavor_without_node_labels_holds_every_node():
    """Kueue's meaning: a ResourceFlavor with no nodeLabels matches every node, so its pool figures count them all."""
    tas = 'couldn\'t assign flavors to pod set main: topology "gpu" allows to fit only 1 out of 2 pod(s)'
    wl = workload("w", ("QuotaReserved", "False", "TopologyPlacementFailed", tas), count=2)
    catch_all = {**FLAVOR, "spec": {"topologyName": "gpu"}}
    nodes = [node("n1"), node("n2")]
    out = json.loads(run(as_list(wl, catch_all, *nodes, pod("p1", "n1", 8), pod("p2", "n2", 6)), "--json"))[0]
    assert out["code"] == km.CLASS_EXHAUSTED  # 2 GPUs free of 16 on the flavor's nodes: not fragmentation


def test_explain_admitted_workload_whose_pods_cannot_be_placed():
    wl = workload(
        "w",
        ("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
        ("Admitted", "True", "Admitted", "The workload is admitted"),
        job="train",
        admission={"clusterQueue": "cq", "podSetAssignments": []},
    )
    msg = "0/4 nodes are available: 4 node(s) had untolerated taint {nvidia.com/gpu-xid-error: 79}."
    out = json.loads(run(as_list(wl, pod("train-0", "", 8, job="train", unschedulable=msg)), "--json"))[0]
    assert (out["state"], out["code"]) == ("admitted", km.HEALTH_BLOCKED)
    assert out["kueue_message"] == msg


# --- the whole catalogue through the command ------------------------------------------------------------------------


def test_explain_every_catalogue_example_as_a_pending_workload():
    """Each example of messages.yaml, written as a Workload's QuotaReserved=False condition, gets its code."""
    items, expected = [], {}
    for i, (message_id, _which, text, entry) in enumerate(_examples()):
        name = f"w{i}-{message_id.replace('_', '-')}"[:63]
        items.append(workload(name, ("QuotaReserved", "False", _reason(entry) or "Pending", text)))
        expected[name] = (message_id, EXPECTED[message_id], text)
    records = json.loads(run(as_list(*items), "--json"))
    assert len(records) == len(items)
    for r in records:
        message_id, code, text = expected[r["name"]]
        if code in ("admitted", "starting", "running", ""):
            continue  # informational texts: the verdict comes from the other conditions, not this message
        assert r["code"] == code, (message_id, r)
        assert r["kueue_message"] == text.removesuffix(" ...")


# --- bad input ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "empty"),
        ("{not json", "cannot parse"),
        ("- 1\n- 2\n", "expected an object"),
        ("apiVersion: v1\nmetadata: {name: x}\n", "kind: missing"),
        ("apiVersion: v1\nkind: List\nitems: 3\n", "items: must be a list"),
        ("apiVersion: v1\nkind: Node\nmetadata: {name: n}\n", "no Workload objects (found: Node)"),
        ("apiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {}\n", "metadata.name: missing"),
        (
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {name: w}\nstatus: {conditions: 3}\n",
            "Workload/w: status.conditions: must be a list",
        ),
        (
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {name: w}\n"
            "spec: {podSets: [{name: m, count: -1}]}\n",
            "spec.podSets[0].count",
        ),
        (
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {name: w}\n"
            "spec: {podSets: [{name: m, count: 1, template: {spec: {containers: [{resources: {requests: "
            "{cpu: lots}}}]}}}]}\n",
            "'lots' is not a Kubernetes quantity",
        ),
    ],
)
def test_explain_bad_input_exits_2_naming_the_field(text, needle):
    with pytest.raises(CommandError) as err:
        run(text)
    assert err.value.returncode == 2
    assert needle in str(err.value)


def test_explain_missing_file_exits_2(tmp_path):
    with pytest.raises(CommandError) as err:
        call_command("explain", str(tmp_path / "nope.yaml"))
    assert err.value.returncode == 2
    assert "cannot read" in str(err.value)


def test_explain_exit_status_of_the_process(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Node\nmetadata: {name: n}\n")
    proc = subprocess.run(
        [sys.executable, "manage.py", "explain", str(bad)], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 2
    assert "no Workload objects" in proc.stderr
    assert proc.stdout == ""


def test_explain_text_is_all_or_nothing():
    good = workload("good", ("QuotaReserved", "False", "Pending", QUOTA))
    bad = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "bad"}, "status": []}
    with pytest.raises(ExplainError, match="Workload/bad: status: must be an object"):
        explain_text(as_list(good, bad))
