"""The scenario timeline: its format, how it is checked (a clear error naming the event and the field), what the
document says about it, and the modes it applies in."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from queues.engine.scenario import ScenarioError, loads_scenario, run_scenario

from .timeline_builders import (
    World,
    cluster_queue,
    flavor,
    flavor_quotas,
    history,
    local_queue,
    pod_set,
    row,
    state,
    workload,
)


def base() -> World:
    return World(
        flavor("on-demand"),
        cluster_queue("cq", flavor_quotas("on-demand", cpu="4"), cohort="c"),
        local_queue("lq", "cq"),
    )


def error(world: World) -> str:
    with pytest.raises(ScenarioError) as info:
        loads_scenario(world.text())
    return str(info.value)


# ------------------------------------------------------------------------------------------------ checking


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ({"at": "1s", "create": {"kind": "Job"}, "color": "red"}, "Timeline/t: events[0].color: unknown field"),
        (
            {"at": "1s"},
            "Timeline/t: events[0]: needs exactly one of create, patch, delete, finish, stop, resume, got none",
        ),
        (
            {"at": "1s", "finish": "Workload/ns/a", "delete": "Workload/ns/a"},
            "Timeline/t: events[0]: needs exactly one of create, patch, delete, finish, stop, resume, got delete, finish",
        ),
        ({"finish": "Workload/ns/a"}, "Timeline/t: events[0].at: required field is missing"),
        ({"at": "soon", "finish": "Workload/ns/a"}, "Timeline/t: events[0].at: invalid duration 'soon'"),
        (
            {"at": "1s", "finish": "Workload/a"},
            "Timeline/t: events[0].finish: Workload is namespaced: write Workload/namespace/name",
        ),
        ({"at": "1s", "delete": "Gadget/a"}, "Timeline/t: events[0].delete: unknown kind 'Gadget'"),
        (
            {"at": "1s", "delete": "ClusterQueue/nope"},
            "Timeline/t: events[0].delete: delete ClusterQueue/nope: no ClusterQueue/nope at this time",
        ),
        (
            {"at": "1s", "finish": "ClusterQueue/cq"},
            "Timeline/t: events[0].finish: finish ClusterQueue/cq: only a Workload finishes",
        ),
        ({"at": "1s", "stop": "Cohort/c"}, "Timeline/t: events[0].stop: stop Cohort/c: no Cohort/c at this time"),
        (
            {"at": "1s", "stop": "ResourceFlavor/on-demand"},
            "Timeline/t: events[0].stop: stop ResourceFlavor/on-demand: only a ClusterQueue or LocalQueue can be stopped",
        ),
        (
            {"at": "1s", "patch": "ClusterQueue/cq"},
            "Timeline/t: events[0].with: patch ClusterQueue/cq: required: the merge patch",
        ),
        (
            {"at": "1s", "patch": "ClusterQueue/cq", "with": {"status": {"pendingWorkloads": 1}}},
            "Timeline/t: events[0].with.status: patch ClusterQueue/cq: status is a subresource: patch it with subresource: status",
        ),
        (
            {"at": "1s", "patch": "ClusterQueue/cq", "with": {"metadata": {"name": "other"}}},
            "Timeline/t: events[0].with.metadata.name: patch ClusterQueue/cq: is immutable",
        ),
        (
            {"at": "1s", "create": flavor("on-demand")},
            "Timeline/t: events[0].create: create ResourceFlavor/on-demand: ResourceFlavor/on-demand already exists at this time",
        ),
        (
            {
                "at": "1s",
                "create": {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "x"}},
            },
            "Timeline/t: events[0].create.metadata.namespace: required field is missing",
        ),
        (
            {"at": "1s", "patch": "Configuration", "with": {"waitForPodsReady": {"timeout": "forever"}}},
            "Timeline/t: events[0]: patch Configuration: Configuration: waitForPodsReady.timeout: invalid duration 'forever'",
        ),
    ],
)
def test_bad_event_names_the_event_and_the_field(event, message):
    world = base()
    world.events.append(event)
    assert error(world).startswith(message)


def test_patched_object_is_checked_like_a_manifest():
    """A patch whose result is not a valid object fails with the object's own field path, inside the event's."""
    world = base()
    bad = {
        "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [flavor_quotas("on-demand", cpu="8GB")]}]}
    }
    world.at("10s", "grow", patch="ClusterQueue/cq", with_=bad)
    assert error(world).startswith(
        "Timeline/t: events[0]: patch ClusterQueue/cq: ClusterQueue/cq: "
        "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: invalid quantity '8GB'"
    )


def test_reference_to_a_flavor_that_never_exists_is_an_error_but_a_later_one_is_not():
    """A ClusterQueue may name a flavor the timeline creates later (Kueue: inactive until then); a name that exists
    at no time is a typo."""
    world = World(cluster_queue("cq", flavor_quotas("later", cpu="1")), local_queue("lq", "cq"))
    world.at("5s", create=flavor("later"))
    loads_scenario(world.text())
    typo = World(cluster_queue("cq", flavor_quotas("latter", cpu="1")), local_queue("lq", "cq"))
    typo.at("5s", create=flavor("later"))
    assert error(typo) == ("ClusterQueue/cq: spec.resourceGroups[0].flavors[0].name: ResourceFlavor 'latter' not found")


def test_workload_patches_are_checked_as_kueue_webhook_checks_them():
    world = base()
    world.at("0s", create=workload("a", "lq", "1", count=3))
    world.at("1s", patch="Workload/ns/a", with_={"spec": {"podSets": []}})
    assert error(world).startswith("Timeline/t: events[1].with.spec.podSets: patch Workload/ns/a: is immutable")

    world = base()
    world.at("0s", create=workload("a", "lq", "1", count=3))
    reclaim = {"status": {"reclaimablePods": [{"name": "main", "count": 2}]}}
    world.at("1s", patch="Workload/ns/a", subresource="status", with_=reclaim)
    fewer = {"status": {"reclaimablePods": [{"name": "main", "count": 1}]}}
    world.at("2s", patch="Workload/ns/a", subresource="status", with_=fewer)
    assert "events[2].with.status.reclaimablePods" in error(world)
    assert "main: cannot be less than 2" in error(world)

    world = base()
    world.at("0s", create=workload("a", "lq", "1", count=3))
    world.at(
        "1s",
        patch="Workload/ns/a",
        subresource="status",
        with_={"status": {"reclaimablePods": [{"name": "x", "count": 1}]}},
    )
    assert "Workload/ns/a: status.reclaimablePods[0].name: no pod set named 'x'" in error(world)

    world = base()
    world.at("0s", create=workload("a", "lq", "1"))
    world.at("1s", patch="Workload/ns/a", subresource="status", with_={"status": {"admission": {"clusterQueue": "cq"}}})
    assert error(world).startswith(
        "Timeline/t: events[1].with.status.admission: patch Workload/ns/a: only reclaimablePods and the PodsReady "
        "condition can change"
    )


def test_created_workload_is_pending_and_created_at_the_event_time():
    world = base()
    admitted = workload("a", "lq", "1")
    admitted["status"] = {"admission": {"clusterQueue": "cq"}}
    world.at("1s", create=admitted)
    assert error(world).startswith(
        "Timeline/t: events[0].create.status.admission: create Workload/ns/a: a workload the timeline creates is pending"
    )


def test_timeline_api_version_and_duplicate_names():
    text = base().text() + "---\napiVersion: sim.portal/v2\nkind: Timeline\nmetadata: {name: t}\nevents: []\n"
    with pytest.raises(ScenarioError, match=r"^Timeline/t: apiVersion: expected sim.portal/v1, got 'sim.portal/v2'$"):
        loads_scenario(text)
    world = base()
    world.at("1s", "same", create=workload("a", "lq", "1"))
    world.at("2s", "same", finish="Workload/ns/a")
    assert error(world) == "Timeline/t: events[1].name: duplicate event name 'same'"


def test_event_before_the_start_is_refused():
    world = base()
    world.add(
        {
            **workload("old", "lq", "1"),
            "metadata": {"name": "old", "namespace": "ns", "creationTimestamp": "2026-04-01T10:00:00Z"},
        }
    )
    world.at("2026-04-01T09:00:00Z", finish="Workload/ns/old")
    assert "events[0].at: 2026-04-01T09:00:00Z is before the scenario's start" in error(world)


# ------------------------------------------------------------------------------------------------ running


def test_events_apply_in_time_order_and_decisions_name_the_event_they_followed():
    """Events of several Timeline documents apply by time (document order among equals); the document lists them
    and says which event each decision followed."""
    world = base()
    world.at(
        "20s",
        "raise",
        patch="ClusterQueue/cq",
        with_={
            "spec": {
                "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [flavor_quotas("on-demand", cpu="8")]}]
            }
        },
    )
    world.at("10s", "big", create=workload("big", "lq", "6"))
    doc = world.run()
    assert [(e["name"], e["at"], e["verb"], e["object"], e["applied"]) for e in doc["timeline"]["events"]] == [
        ("big", 10.0, "create", "Workload/ns/big", True),
        ("raise", 20.0, "patch", "ClusterQueue/cq", True),
    ]
    assert doc["timeline"]["decisions"] == [
        {"at": 10.0, "workload": "ns/big", "decision": "created", "detail": "", "after": "big"},
        {"at": 20.0, "workload": "ns/big", "decision": "admitted", "detail": "cq", "after": "raise"},
    ]
    assert row(doc, "big")["decidedAfter"] == "raise"
    assert doc["summary"]["clusterQueues"]["cq"]["nominal"] == 8000  # millicores
    # 6 CPUs for the last 0s of a 20s window: utilisation over the nominal each stretch had (4 then 8).
    assert doc["summary"]["clusterQueues"]["cq"]["utilization"] == 0.0

    later = world.run(until="15s")
    assert [e["applied"] for e in later["timeline"]["events"]] == [True, False]


def test_settle_and_once_apply_only_the_events_at_the_start():
    world = base()
    world.at("0s", "now", create=workload("a", "lq", "1"))
    world.at("10s", "later", create=workload("b", "lq", "1"))
    scenario = loads_scenario(world.text())
    for mode in ("settle", "once"):
        doc = run_scenario(scenario, mode=mode)
        assert [w["name"] for w in doc["workloads"]] == ["ns/a"]
        assert [e["applied"] for e in doc["timeline"]["events"]] == [True, False]


def test_documents_without_a_timeline_keep_their_shape():
    doc = run_scenario(loads_scenario(base().add(workload("a", "lq", "1")).text()), mode="replay")
    assert "timeline" not in doc
    assert "decidedAfter" not in doc["workloads"][0]


def test_deleting_a_namespace_deletes_its_workloads_and_queues():
    world = base()
    world.at("0s", create=workload("running", "lq", "4"))
    world.at("0s", create=workload("waiting", "lq", "4"))
    world.at("5s", "drop-ns", delete="Namespace/ns")
    doc = world.run()
    assert history(doc, "running")[-1] == (5.0, "deleted")
    assert history(doc, "waiting")[-1] == (5.0, "deleted")


def test_stop_keep_already_running_is_hold():
    world = base()
    world.at("0s", create=workload("a", "lq", "2"))
    world.at("1s", "hold", stop="LocalQueue/ns/lq", keepAlreadyRunning=True)
    world.at("2s", create=workload("b", "lq", "1"))
    doc = world.run()
    assert row(doc, "a")["state"] == "admitted"
    assert row(doc, "b")["kueueMessage"] == "LocalQueue lq is inactive"


def test_simulate_command_reports_a_timeline_error_and_exits_2(tmp_path, capsys):
    world = base()
    world.at("1s", delete="ClusterQueue/nope")
    path = tmp_path / "s.yaml"
    path.write_text(world.text())
    with pytest.raises(CommandError) as info:
        call_command("simulate", str(path), "--until", "end")
    assert info.value.returncode == 2
    assert "Timeline/t: events[0].delete: delete ClusterQueue/nope: no ClusterQueue/nope at this time" in str(
        info.value
    )


def test_simulate_command_prints_the_timeline(tmp_path, capsys):
    world = base()
    world.at("1s", "make", create=workload("a", "lq", "1"))
    path = tmp_path / "s.yaml"
    path.write_text(world.text())
    call_command("simulate", str(path), "--until", "end", "--json")
    doc = json.loads(capsys.readouterr().out)
    assert doc["timeline"]["events"][0]["name"] == "make"
    call_command("simulate", str(path), "--until", "end")
    table = capsys.readouterr().out
    assert "make  1.0s  create Workload/ns/a  yes" in table
    assert "1.0s  ns/a  admitted (cq)  make" in table


def test_configuration_patched_mid_run():
    """Kueue's Configuration changed (a manager restart): fair sharing switched on, and waitForPodsReady's timeout
    set, take effect from the event on — a workload admitted before whose pods never get Ready is evicted at the
    new timeout after its admission."""
    world = base()
    world.add(
        {
            "apiVersion": "config.kueue.x-k8s.io/v1beta1",
            "kind": "Configuration",
        }
    )
    never = {"sim.portal/pods-ready-after": "never"}
    world.at("0s", create=workload("stuck", "lq", "1", annotations=never))
    fair = {"fairSharing": {"enable": True, "preemptionStrategies": ["LessThanOrEqualToFinalShare"]}}
    world.at("10s", "fair-on", patch="Configuration", with_=fair)
    world.at("20s", "pods-ready", patch="Configuration", with_={"waitForPodsReady": {"enable": True, "timeout": "1m"}})
    before = world.run(until="15s")
    assert before["summary"]["fairSharing"] == {"preemptionStrategies": ["LessThanOrEqualToFinalShare"]}
    assert "eviction" not in row(before, "stuck")  # v1beta1 without waitForPodsReady: not tracked
    doc = world.run(until="70s")
    assert row(doc, "stuck")["eviction"] == {
        "reason": "PodsReadyTimeout",
        "message": "Exceeded the PodsReady timeout ns/stuck",
        "at": 60.0,
    }


def gpu_node(name: str, gpus: int = 8) -> dict:
    """A Ready node of the ``h100`` flavor with ``gpus`` allocatable GPUs."""
    resources = {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "gpu-class": "h100"}},
        "spec": {},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def gpu_workload(name: str, gpus: int) -> dict:
    """A Workload of one pod asking ``gpus`` GPUs (it fits on one node or not at all)."""
    return workload(name, "lq", pod_sets=[pod_set("main", 1, **{"nvidia.com/gpu": str(gpus)})])


def test_a_node_that_leaves_evicts_its_pods_and_one_that_joins_admits_what_fits_only_there():
    """Quota is ample (24 GPUs); nodes decide. ``a`` and ``b`` take n1 and n2 whole; n1 is deleted at 10s: ``a``
    loses its pod (NodeLost), queues again and waits, since n2 is full; n3 joins at 20s and ``a`` starts on it."""
    world = World(
        flavor("h100", **{"gpu-class": "h100"}),
        cluster_queue("cq", flavor_quotas("h100", **{"nvidia.com/gpu": "24"})),
        local_queue("lq", "cq"),
        gpu_node("n1"),
        gpu_node("n2"),
    )
    world.at("0s", create=gpu_workload("a", 8))
    world.at("1s", create=gpu_workload("b", 8))
    world.at("10s", "n1-gone", delete="Node/n1")
    world.at("20s", "n3-joins", create=gpu_node("n3"))
    doc = world.run(until="30s")
    a = history(doc, "a")
    assert [d for _, d in a] == ["created", "admitted", "evicted", "admitted"], a
    assert [t for t, _ in a] == [0.0, 0.0, 10.0, 20.0], a
    evicted = next(d for d in doc["timeline"]["decisions"] if d["workload"] == "ns/a" and d["decision"] == "evicted")
    assert "node n1 left the cluster" in evicted["detail"], evicted
    assert (evicted["after"], row(doc, "a")["decidedAfter"]) == ("n1-gone", "n3-joins")
    assert [d for _, d in history(doc, "b")] == ["created", "admitted"]
    assert state(doc, "a", "b") == {"a": "admitted", "b": "admitted"}
    assert (row(doc, "a")["podSets"][0]["nodes"], row(doc, "b")["podSets"][0]["nodes"]) == (["n3"], ["n2"])

    between = world.run(until="15s")  # n1 gone, n3 not yet there: the devices, not the quota, are what it waits for
    assert row(between, "a")["state"] == "pending"
    assert row(between, "a")["reason"] == {
        "code": "class_exhausted",
        "message": "The 8 h100 GPUs on the nodes of flavor h100 are in use: 0 free, this job needs 8 (1 pod(s) × 8).",
    }
