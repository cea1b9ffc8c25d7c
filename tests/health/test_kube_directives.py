"""Health directives applied by the kubernetes backend, over HTTP against the API emulator (objects validated
against the real schemas): node taint, cordon, DRA DeviceTaintRule; only on managed nodes; undone on release."""

from __future__ import annotations

import pytest
from django.test import override_settings
from django.utils import timezone

from clusters import tasks
from clusters.backends.k8s.health import CORDON_ANNOTATION, DEVICE_TAINT_RULES, health_directives_sync, rule_name
from pools.health import tickets
from pools.health.directives import TAINT_KEY
from pools.health.services import Actor, device_health_set
from pools.inventory.service import inventory_import
from pools.models import Device, HealthState, NodeHealthDirective
from queues.engine.model import DEGRADED_DEVICES_LABEL
from tests.kube.cluster import gpu_node
from tests.kube.conftest import _kube_settings, _schemas_loaded, api, cluster, emulator  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db(transaction=False)

MANAGED = {"portal.example/health-managed": "true"}
OPS = Actor(label="ops")


@pytest.fixture
def nodes(emulator, cluster):  # noqa: F811
    """gpu-a1 (managed, with the GPU operator's own taint), gpu-a2 (not managed); imported into the portal."""
    nvidia = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    emulator.put(gpu_node("gpu-a1", labels=MANAGED, taints=[nvidia]))
    emulator.put(gpu_node("gpu-a2"))
    inventory_import(cluster=cluster, objects=emulator.all("Node"), now=timezone.now())
    return {n: Device.objects.filter(node__name=n).order_by("index") for n in ("gpu-a1", "gpu-a2")}


def _taints(emulator, name):  # noqa: F811
    return (emulator.get_obj("Node", name).get("spec") or {}).get("taints") or []


def _patches(emulator):  # noqa: F811
    return [r for r in emulator.requests if r.get("method") == "PATCH"]


@override_settings(HEALTH_MANAGED_NODE_LABELS=MANAGED, HEALTH_NODE_ACTION="taint")
def test_node_taint_only_on_managed_nodes_applied_once_and_removed_on_release(emulator, cluster, nodes):  # noqa: F811
    managed = tickets.ticket_open(device=nodes["gpu-a1"][3], reason="XID 79", actor=OPS)
    tickets.ticket_open(device=nodes["gpu-a2"][0], reason="XID 79", actor=OPS)
    [row] = NodeHealthDirective.objects.all()
    assert (row.node.name, row.kind, row.key) == ("gpu-a1", "node-taint", TAINT_KEY)

    tasks.health_reconcile_cluster.delay(cluster.pk)  # the sweep: reconcile, then the backend applies
    keys = [(t["key"], t["effect"]) for t in _taints(emulator, "gpu-a1")]
    assert keys == [("nvidia.com/gpu", "NoSchedule"), (TAINT_KEY, "NoSchedule")]
    assert _taints(emulator, "gpu-a2") == []
    row.refresh_from_db()
    assert row.applied_at is not None
    assert row.last_error == ""
    assert emulator.rejected == []

    before = len(_patches(emulator))
    tasks.health_reconcile_cluster.delay(cluster.pk)
    assert len(_patches(emulator)) == before  # idempotent: nothing more to send

    tickets.ticket_mark_rma(ticket=managed, actor=OPS)
    tasks.health_reconcile_cluster.delay(cluster.pk)
    assert [t["key"] for t in _taints(emulator, "gpu-a1")] == ["nvidia.com/gpu"]
    row.refresh_from_db()
    assert row.released_at is not None
    assert row.removed_at is not None


@override_settings(HEALTH_MANAGED_NODE_LABELS=MANAGED, HEALTH_NODE_ACTION="taint")
def test_a_conflict_keeps_the_error_and_the_next_sweep_applies(emulator, cluster, api, nodes):  # noqa: F811
    tickets.ticket_open(device=nodes["gpu-a1"][1], reason="double-bit ECC", actor=OPS)
    emulator.fail("PATCH", "/api/v1/nodes/gpu-a1", status=409, times=1)
    result = health_directives_sync(cluster=cluster, api=api)
    assert result.applied == []
    assert "409" in result.errors[0]
    row = NodeHealthDirective.objects.get()
    assert row.applied_at is None
    assert "409" in row.last_error
    result = health_directives_sync(cluster=cluster, api=api)
    assert result.applied == [row.pk]
    assert TAINT_KEY in [t["key"] for t in _taints(emulator, "gpu-a1")]


@override_settings(HEALTH_MANAGED_NODE_LABELS=MANAGED, HEALTH_NODE_ACTION="cordon")
def test_cordon_is_undone_only_when_the_portal_cordoned(emulator, cluster, api, nodes):  # noqa: F811
    ticket = tickets.ticket_open(device=nodes["gpu-a1"][0], reason="XID 48", actor=OPS)
    health_directives_sync(cluster=cluster, api=api)
    node = emulator.get_obj("Node", "gpu-a1")
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"][CORDON_ANNOTATION] == f"ticket-{ticket.pk}"
    tickets.ticket_mark_rma(ticket=ticket, actor=OPS)
    health_directives_sync(cluster=cluster, api=api)
    node = emulator.get_obj("Node", "gpu-a1")
    assert not node["spec"].get("unschedulable")
    assert CORDON_ANNOTATION not in (node["metadata"].get("annotations") or {})

    # cordoned by someone else first: the portal leaves it cordoned when its ticket closes
    emulator.edit("Node", "gpu-a1", spec={**node["spec"], "unschedulable": True})
    second = tickets.ticket_open(device=nodes["gpu-a1"][1], reason="XID 48", actor=OPS)
    health_directives_sync(cluster=cluster, api=api)
    tickets.ticket_mark_rma(ticket=second, actor=OPS)
    health_directives_sync(cluster=cluster, api=api)
    node = emulator.get_obj("Node", "gpu-a1")
    assert node["spec"]["unschedulable"] is True
    assert CORDON_ANNOTATION not in (node["metadata"].get("annotations") or {})
    assert emulator.rejected == []


@override_settings(HEALTH_MANAGED_NODE_LABELS=MANAGED)
def test_dra_device_gets_a_device_taint_rule(emulator, cluster, api, nodes):  # noqa: F811
    emulator.register(DEVICE_TAINT_RULES)
    card = nodes["gpu-a1"][2]
    Device.objects.filter(pk=card.pk).update(
        source=Device.Source.DRA, dra_driver="gpu.nvidia.com", dra_pool="gpu-a1", dra_device="gpu-2"
    )
    card.refresh_from_db()
    ticket = tickets.ticket_open(device=card, reason="XID 79", actor=OPS)
    [row] = NodeHealthDirective.objects.filter(kind="device-taint")
    result = health_directives_sync(cluster=cluster, api=api)
    assert row.pk in result.applied
    rule = emulator.get_obj("DeviceTaintRule", rule_name(row))
    assert rule["spec"]["deviceSelector"] == {"driver": "gpu.nvidia.com", "pool": "gpu-a1", "device": "gpu-2"}
    assert rule["spec"]["taint"] == {"key": TAINT_KEY, "value": f"ticket-{ticket.pk}", "effect": "NoSchedule"}
    assert emulator.rejected == []
    # RMA keeps the taint while the device is still listed; once the inventory sees it gone it is removed
    tickets.ticket_mark_rma(ticket=ticket, actor=OPS)
    health_directives_sync(cluster=cluster, api=api)
    assert emulator.get_obj("DeviceTaintRule", rule_name(row)) is not None


@override_settings(HEALTH_MANAGED_NODE_LABELS=MANAGED)
def test_device_taint_without_the_api_keeps_a_clear_error(emulator, cluster, api, nodes):  # noqa: F811
    card = nodes["gpu-a1"][2]
    Device.objects.filter(pk=card.pk).update(
        source=Device.Source.DRA, dra_driver="gpu.nvidia.com", dra_pool="gpu-a1", dra_device="gpu-2"
    )
    card.refresh_from_db()
    tickets.ticket_open(device=card, reason="XID 79", actor=OPS)
    result = health_directives_sync(cluster=cluster, api=api)
    assert "DRADeviceTaints" in result.errors[0]
    assert "DRADeviceTaints" in NodeHealthDirective.objects.get(kind="device-taint").last_error


@override_settings(HEALTH_MANAGED_NODE_LABELS=MANAGED, HEALTH_NODE_ACTION="taint")
def test_validation_job_manifest_is_pinned_to_the_ticket_node_and_tolerates_the_taint(emulator, cluster, nodes):  # noqa: F811
    from clusters.kube_sync.jobs import job_manifest_now
    from tests.factories import ResourceClassFactory, ResourceFlavorFactory
    from tests.kube.schemas import validate

    flavor = ResourceFlavorFactory(name="h100", node_labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    ResourceClassFactory(slug="h100", name="H100", flavors=[flavor], allowed_counts=[1, 8])
    inventory_import(cluster=cluster, objects=emulator.all("Node"), now=timezone.now())  # nodes take the flavor
    card = Device.objects.get(node__name="gpu-a1", index=3)
    assert card.node.flavor_id == flavor.pk
    ticket = tickets.ticket_open(device=card, reason="XID 79", actor=OPS)
    run = tickets.ticket_start_validation(ticket=ticket, actor=OPS)
    manifest = job_manifest_now(run.job)
    pod = manifest["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "gpu-a1"}
    # pinned to its node: no preference away from nodes with degraded devices (the flavor's terms stay)
    assert "preferredDuringSchedulingIgnoredDuringExecution" not in pod["affinity"]["nodeAffinity"]
    assert {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert env["PORTAL_VALIDATION_DEVICES"] == (card.uuid or card.key)
    assert env["PORTAL_VALIDATION_GPU_INDEXES"] == "3"
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert validate(manifest) == []


def _labels(emulator, name):  # noqa: F811
    return emulator.get_obj("Node", name)["metadata"].get("labels") or {}


def _set(device, to):
    device_health_set(device, to=to, reason="sustained 89 °C", now=timezone.now(), actor=OPS)


@override_settings(HEALTH_MANAGED_NODE_LABELS=MANAGED)
def test_degraded_devices_label_follows_the_managed_nodes_degraded_cards(emulator, cluster, api, nodes):  # noqa: F811
    _set(nodes["gpu-a1"][5], HealthState.DEGRADED)
    _set(nodes["gpu-a2"][0], HealthState.DEGRADED)  # not managed: never labelled

    tasks.health_reconcile_cluster.delay(cluster.pk)  # the sweep: the backend brings the labels in step
    assert _labels(emulator, "gpu-a1")[DEGRADED_DEVICES_LABEL] == "1"
    assert MANAGED.items() <= _labels(emulator, "gpu-a1").items()  # the node's other labels are kept
    assert DEGRADED_DEVICES_LABEL not in _labels(emulator, "gpu-a2")

    before = len(_patches(emulator))
    assert health_directives_sync(cluster=cluster, api=api).labelled == []
    assert len(_patches(emulator)) == before  # idempotent: nothing more to send

    _set(nodes["gpu-a1"][6], HealthState.DEGRADED)
    assert health_directives_sync(cluster=cluster, api=api).labelled == ["gpu-a1"]
    assert _labels(emulator, "gpu-a1")[DEGRADED_DEVICES_LABEL] == "2"

    # an unhealthy card is out of the pool (a ticket's taint keeps pods off), not degraded: it does not count
    _set(nodes["gpu-a1"][5], HealthState.UNHEALTHY)
    _set(nodes["gpu-a1"][6], HealthState.HEALTHY)
    result = health_directives_sync(cluster=cluster, api=api)
    assert result.labelled == ["gpu-a1"]
    assert result.errors == []
    assert DEGRADED_DEVICES_LABEL not in _labels(emulator, "gpu-a1")
    assert MANAGED.items() <= _labels(emulator, "gpu-a1").items()
    assert emulator.rejected == []


@override_settings(HEALTH_MANAGED_NODE_LABELS=MANAGED)
def test_degraded_devices_label_drift_is_repaired_and_errors_are_kept(emulator, cluster, api, nodes):  # noqa: F811
    emulator.edit("Node", "gpu-a1", metadata={"labels": {DEGRADED_DEVICES_LABEL: "3"}})  # left by an earlier sweep
    emulator.fail("PATCH", "/api/v1/nodes/gpu-a1", status=422, times=1)
    result = health_directives_sync(cluster=cluster, api=api)
    assert result.labelled == []
    assert "422" in result.errors[0]
    result = health_directives_sync(cluster=cluster, api=api)  # the next sweep: no degraded card, label removed
    assert result.labelled == ["gpu-a1"]
    assert DEGRADED_DEVICES_LABEL not in _labels(emulator, "gpu-a1")


def test_degraded_devices_label_without_managed_nodes_makes_no_request(emulator, cluster, api, nodes):  # noqa: F811
    _set(nodes["gpu-a1"][5], HealthState.DEGRADED)
    before = len(emulator.requests)
    health_directives_sync(cluster=cluster, api=api)
    assert len(emulator.requests) == before
    assert DEGRADED_DEVICES_LABEL not in _labels(emulator, "gpu-a1")
