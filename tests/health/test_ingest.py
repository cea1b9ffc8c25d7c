"""Ingestion: real scrapes mapped to devices (unknown vs healthy), injected faults, events, what the inventory saw."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from pools.gpu_usage import GpuUtilSample
from pools.health.events import load_event_text
from pools.health.ingest import health_ingest_events, health_ingest_scrape, health_ingest_text, health_reconcile
from pools.health.services import HealthInputError
from pools.models import Device, DeviceHealthTransition, HealthObservation, HealthState, RepairTicket
from tests.factories import DeviceFactory, NodeFactory
from tests.health.scrapes import exposition, gpu
from tests.health.test_dcgm import SAMPLES

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_real_sample_maps_to_its_device_and_leaves_it_healthy_with_unknowns(reference, pool, name):
    uuid, host, _ = SAMPLES[name]
    node = NodeFactory(cluster=pool.cluster, name=host, flavor=None)
    device = DeviceFactory(node=node, uuid=uuid, key=uuid, index=0)
    other = DeviceFactory(node=node, index=1)
    report = health_ingest_scrape(text=(reference / "dcgm/samples" / name).read_text(), now=pool.at(0), origin=name)
    [seen] = report.matched
    assert (seen.node, seen.uuid, seen.health) == (host, uuid, "healthy")
    if name.startswith("grid"):  # a vGPU guest reports no GPU temperature at all: unknown
        assert "temperature" in seen.unknown
        assert "temperature" not in seen.signals
    else:
        assert seen.signals["temperature"] == "ok"
    assert "xid" in seen.unknown
    assert "ecc_dbe" in seen.unknown
    assert report.changes == []
    assert report.unmatched == []
    assert report.not_in_input == [f"{host}/{other.key}: not in this scrape (unknown, state kept)"]
    device.refresh_from_db()
    assert device.health == HealthState.HEALTHY
    signals = {s.signal: s.level for s in device.health_signals.all()}
    assert "xid" not in signals
    assert "ecc_dbe" not in signals
    assert device.health_signals.get(signal="identity").data["pci"]


def test_scrape_maps_by_node_and_index_through_the_node_map(pool):
    target = pool.devices[2]  # gpu-node-0, index 2
    text = exposition(
        [{"uuid": "GPU-not-known", "gpu": 2, "host": "exporter-pod-x", "fields": {"DCGM_FI_DEV_GPU_TEMP": 50}}],
        host_label="hostname",
    )
    report = health_ingest_scrape(text=text, now=pool.at(0))
    assert report.matched == []
    assert "node not in the pool" in report.unmatched[0]
    report = health_ingest_scrape(text=text, now=pool.at(0), node_map={"exporter-pod-x": "gpu-node-0"})
    assert [m.device for m in report.matched] == [target.key]


def test_xid_79_makes_the_gpu_unhealthy_opens_a_ticket_and_quarantines_it(pool):
    device = pool.devices[0]
    text = exposition([gpu(device, DCGM_FI_DEV_XID_ERRORS=79)], xid_msg="GPU has fallen off the bus")
    report = health_ingest_scrape(text=text, now=pool.at(0))
    device.refresh_from_db()
    assert device.health == HealthState.QUARANTINED  # idle: drained at once
    ticket = RepairTicket.objects.get()
    assert (ticket.device, ticket.state, ticket.recommended_action) == (device, "in_repair", "reboot_node")
    assert report.tickets_opened == [ticket.pk]
    assert [(c.before, c.after) for c in report.changes] == [
        ("healthy", "unhealthy"),
        ("unhealthy", "quarantined"),
    ]
    first = device.health_transitions.order_by("at", "id").first()
    assert first.evidence["xid"]["chain"]["xids"] == [79]
    assert first.observation is not None
    assert first.observation.signal == "xid"
    obs = HealthObservation.objects.get(signal="xid_event")
    assert obs.evidence["recommended_action"] == "reboot_node"
    assert obs.evidence["severity"] == "fatal"
    assert device.health_reason.startswith(f"repair ticket #{ticket.pk} (in repair): XID 79")


def test_same_scrape_twice_changes_nothing(pool):
    device = pool.devices[0]
    text = exposition([gpu(device, DCGM_FI_DEV_XID_ERRORS=79, DCGM_FI_DEV_GPU_TEMP=45)])
    health_ingest_scrape(text=text, now=pool.at(0))
    counts = (HealthObservation.objects.count(), DeviceHealthTransition.objects.count(), RepairTicket.objects.count())
    report = health_ingest_scrape(text=text, now=pool.at(30))
    assert report.changes == []
    assert report.tickets_opened == []
    assert (
        HealthObservation.objects.count(),
        DeviceHealthTransition.objects.count(),
        RepairTicket.objects.count(),
    ) == counts


def test_application_xid_is_recorded_but_keeps_the_gpu_in_the_pool(pool):
    device = pool.devices[1]
    report = health_ingest_scrape(text=exposition([gpu(device, DCGM_FI_DEV_XID_ERRORS=13)]), now=pool.at(0))
    device.refresh_from_db()
    assert device.health == HealthState.HEALTHY
    assert report.changes == []
    assert HealthObservation.objects.filter(signal="xid_event", value=13, level="ok").exists()


def test_double_bit_ecc_makes_the_gpu_unhealthy(pool):
    device = pool.devices[3]
    health_ingest_scrape(text=exposition([gpu(device, DCGM_FI_DEV_ECC_DBE_VOL_TOTAL=0)]), now=pool.at(0))
    device.refresh_from_db()
    assert device.health == HealthState.HEALTHY
    health_ingest_scrape(text=exposition([gpu(device, DCGM_FI_DEV_ECC_DBE_VOL_TOTAL=2)]), now=pool.at(15))
    device.refresh_from_db()
    assert device.health == HealthState.QUARANTINED
    assert "double-bit ECC" in RepairTicket.objects.get(device=device).reason


def test_sustained_temperature_degrades_and_recovers_but_missing_series_never_clears(pool):
    device = pool.devices[4]
    for i in range(7):
        health_ingest_scrape(text=exposition([gpu(device, DCGM_FI_DEV_GPU_TEMP=91)]), now=pool.at(60 * i))
    device.refresh_from_db()
    assert device.health == HealthState.DEGRADED
    assert "91 °C" in device.health_reason
    # The temperature series goes missing: unknown, so the GPU stays degraded.
    health_ingest_scrape(text=exposition([gpu(device, DCGM_FI_DEV_POWER_USAGE=100)]), now=pool.at(500))
    device.refresh_from_db()
    assert device.health == HealthState.DEGRADED
    health_ingest_scrape(text=exposition([gpu(device, DCGM_FI_DEV_GPU_TEMP=60)]), now=pool.at(560))
    device.refresh_from_db()
    assert device.health == HealthState.HEALTHY
    assert [t.after for t in device.health_transitions.order_by("at", "id")] == ["degraded", "healthy"]
    assert not RepairTicket.objects.exists()


def test_xid_chain_from_event_records_takes_the_worst_action(pool):
    device = pool.devices[5]
    records = [
        {"xid": 48, "uuid": device.uuid, "at": pool.at(0).isoformat(), "message": "DBE (0x1)"},
        {"xid": 45, "uuid": device.uuid, "at": pool.at(1).isoformat()},
        {"xid": 63, "node": device.node.name, "gpu": device.index, "at": pool.at(2).isoformat()},
    ]
    report = health_ingest_text(text=json.dumps(records), now=pool.at(10), origin="events.json")
    ticket = RepairTicket.objects.get()
    assert ticket.recommended_action == "drain_and_reset_gpu"
    assert ticket.evidence["xid"]["chain"]["xids"] == [48, 45, 63]
    assert report.observations >= 3
    again = health_ingest_text(text=json.dumps(records), now=pool.at(20), origin="events.json")
    assert again.observations == 0
    assert again.changes == []


def test_nvrm_kernel_log_lines_map_by_pci_address(pool):
    device = pool.devices[0]
    health_ingest_scrape(text=exposition([gpu(device, DCGM_FI_DEV_GPU_TEMP=40)]), now=pool.at(0))  # learns PCI 18
    log = (
        f"{pool.at(5).isoformat()} host kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=1234, "
        "GPU has fallen off the bus.\n"
        f"{pool.at(6).isoformat()} host kernel: unrelated line\n"
    )
    [record] = load_event_text(log, node="gpu-node-0")
    assert (record.xid, record.pci_bus_id, record.at) == (79, "0000:18:00", pool.at(5))
    report = health_ingest_text(text=log, node="gpu-node-0", now=pool.at(30), origin="dmesg")
    assert [m.device for m in report.matched] == [device.key]
    device.refresh_from_db()
    assert device.health == HealthState.QUARANTINED


def test_resets_per_day_degrade(pool):
    device = pool.devices[6]
    records = [{"event": "reset", "uuid": device.uuid, "at": pool.at(i * 600).isoformat()} for i in range(3)]
    health_ingest_events(records=load_event_text(json.dumps(records)), now=pool.at(2000))
    device.refresh_from_db()
    assert device.health == HealthState.DEGRADED
    assert "3 GPU reset(s)" in device.health_reason


def test_unreadable_input_is_refused_with_its_name(pool):
    with pytest.raises(HealthInputError, match=r"notes\.txt"):
        health_ingest_text(text="just some words: no records", origin="notes.txt")
    with pytest.raises(HealthInputError, match="name the GPU"):
        health_ingest_text(text=json.dumps([{"xid": 79}]), origin="bad.json")


# --- what the inventory import recorded ----------------------------------------------------------------------


def test_reconcile_adopts_an_inventory_unhealthy_device_once(pool):
    device = pool.devices[7]
    node = device.node
    node.allocatable = {**node.allocatable, "nvidia.com/gpu": "3"}
    node.save()
    reason = "node allocatable 3 < capacity 4 (device plugin marked devices unhealthy)"
    Device.objects.filter(pk=device.pk).update(health="unhealthy", health_reason=reason, health_changed_at=pool.at(0))
    report = health_reconcile(cluster=pool.cluster, now=pool.at(10))
    device.refresh_from_db()
    assert device.health == HealthState.QUARANTINED
    first = device.health_transitions.order_by("at", "id").first()
    assert (first.before, first.after, first.actor_label) == ("healthy", "unhealthy", "inventory import")
    assert first.evidence["allocatable"]["nvidia.com/gpu"] == "3"
    assert first.observation.source == "node-condition"
    assert len(report.tickets_opened) == 1
    again = health_reconcile(cluster=pool.cluster, now=pool.at(20))
    assert again.changes == []
    assert again.tickets_opened == []
    assert again.observations == 0


def test_reconcile_undoes_an_inventory_write_over_quarantine(pool):
    device = pool.devices[0]
    health_ingest_scrape(text=exposition([gpu(device, DCGM_FI_DEV_XID_ERRORS=79)]), now=pool.at(0))
    Device.objects.filter(pk=device.pk).update(health="unhealthy", health_reason="node taint x")
    health_reconcile(cluster=pool.cluster, now=pool.at(10))
    device.refresh_from_db()
    assert device.health == HealthState.QUARANTINED
    assert device.health_transitions.order_by("-at", "-id").first().actor_label == "portal health (restored)"


def test_reconcile_reads_dra_xid_taints_and_node_conditions(pool):
    device = pool.devices[1]
    added = pool.at(0).isoformat()
    device.taints = [{"key": "gpu.nvidia.com/xid", "value": "48", "effect": "NoSchedule", "timeAdded": added}]
    device.save()
    node = pool.nodes[1]
    node.conditions = [
        {"type": "Ready", "status": "True"},
        {"type": "SysLogsGPUFallenOff", "status": "True", "message": f"GPU {pool.devices[5].uuid} fell off the bus"},
    ]
    node.save()
    report = health_reconcile(cluster=pool.cluster, now=pool.at(30))
    device.refresh_from_db()
    assert device.health == HealthState.QUARANTINED
    assert HealthObservation.objects.filter(device=device, signal="xid_event", value=48, source="xid").exists()
    named = pool.devices[5]
    named.refresh_from_db()
    assert named.health == HealthState.QUARANTINED
    others = [d for d in pool.devices if d.node_id == node.pk and d.pk != named.pk]
    assert all(Device.objects.get(pk=d.pk).health == HealthState.HEALTHY for d in others)
    assert len(report.tickets_opened) == 2
    assert health_reconcile(cluster=pool.cluster, now=pool.at(60)).changes == []


def test_reconcile_node_condition_without_a_gpu_named_covers_the_node(pool):
    node = pool.nodes[0]
    node.conditions = [{"type": "SysLogsXIDError", "status": "True", "message": "XID 79 seen"}]
    node.save()
    health_reconcile(cluster=pool.cluster, now=pool.at(0) + timedelta(seconds=1))
    states = set(Device.objects.filter(node=node).values_list("health", flat=True))
    assert states == {HealthState.QUARANTINED}


def test_the_move_that_opened_a_ticket_is_in_the_tickets_history(pool):
    device = pool.devices[1]
    report = health_ingest_scrape(text=exposition([gpu(device, DCGM_FI_DEV_XID_ERRORS=79)]), now=pool.at(0))
    ticket = RepairTicket.objects.get()
    assert [(t.before, t.after) for t in ticket.transitions.order_by("at", "id")] == [
        ("healthy", "unhealthy"),
        ("unhealthy", "quarantined"),
    ]
    assert [c.ticket for c in report.changes] == [ticket.pk, ticket.pk]


# --- activity samples: GR engine active preferred over GPU utilisation ----------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # the T4 runs a tiny kernel back to back: DCGM_FI_DEV_GPU_UTIL 91, its engine was active 15.6 % of the time
        ("t4_ericsson_driver590.48.prom", 15.6205),
        ("l4_kops_k8s1.35_driver580.105.prom", 0.0),
        # a vGPU guest has no profiling metrics: DCGM_FI_DEV_GPU_UTIL is what there is
        ("grid-a100-40c_vgpu_vks_driver580.126.prom", 0.0),
    ],
)
def test_real_scrape_stores_engine_activity_where_reported_else_gpu_util(reference, pool, name, expected):
    uuid, host, _ = SAMPLES[name]
    device = DeviceFactory(node=NodeFactory(cluster=pool.cluster, name=host, flavor=None), uuid=uuid, key=uuid, index=0)
    health_ingest_scrape(text=(reference / "dcgm/samples" / name).read_text(), now=pool.at(0), origin=name)
    [sample] = GpuUtilSample.objects.filter(device=device)
    assert sample.gpu_util == pytest.approx(expected)


def test_activity_prefers_engine_active_per_card_and_skips_cards_reporting_neither(pool):
    busy, fallback, silent = pool.devices[:3]
    text = exposition(
        [
            gpu(busy, DCGM_FI_DEV_GPU_UTIL=100, DCGM_FI_PROF_GR_ENGINE_ACTIVE=0.02),
            gpu(fallback, DCGM_FI_DEV_GPU_UTIL=37),
            gpu(silent, DCGM_FI_DEV_GPU_TEMP=40),
        ]
    )
    health_ingest_scrape(text=text, now=pool.at(0))
    stored = dict(GpuUtilSample.objects.values_list("device_id", "gpu_util"))
    assert stored == {busy.pk: pytest.approx(2.0), fallback.pk: 37.0}  # no sample: "not scraped", never 0 %
