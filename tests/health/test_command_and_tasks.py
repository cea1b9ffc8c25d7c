"""``import_health`` and the scrape task (HTTP GET against a local exporter stand-in serving a real sample)."""

from __future__ import annotations

import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from clusters import tasks
from pools.models import Device, HealthSignal, HealthState, RepairTicket
from tests.factories import DeviceFactory, NodeFactory
from tests.health.scrapes import exposition, gpu

pytestmark = pytest.mark.django_db

L4 = "l4_kops_k8s1.35_driver580.105.prom"
L4_UUID = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"


def run(*args) -> str:
    out = io.StringIO()
    call_command("import_health", *args, stdout=out)
    return out.getvalue()


def test_import_health_prints_the_changes_of_a_scrape(pool, tmp_path):
    device = pool.devices[0]
    path = tmp_path / "scrape.prom"
    path.write_text(exposition([gpu(device, DCGM_FI_DEV_XID_ERRORS=79), gpu(pool.devices[1], DCGM_FI_DEV_GPU_TEMP=40)]))
    text = run(str(path), "--at", pool.at(0).isoformat())
    assert "2 GPU(s)/event(s) read, 2 device(s) matched, 0 unmatched" in text
    assert f"gpu-node-0/{device.key}: healthy → unhealthy" in text
    assert "repair ticket #" in text
    assert "unknown (no series): dcgm_health, ecc_dbe" in text
    assert "not in this scrape" in text
    again = run(str(path), "--at", pool.at(30).isoformat())
    assert "no state changes" in again


def test_import_health_json_and_node_map(pool, reference, tmp_path):
    node = NodeFactory(cluster=pool.cluster, name="gpu-l4-1")
    DeviceFactory(node=node, uuid="GPU-other", key="GPU-other", index=0)
    sample = (reference / "dcgm/samples" / L4).read_text().replace(L4_UUID, "GPU-not-in-pool")
    path = tmp_path / "l4.prom"
    path.write_text(sample)
    assert json.loads(run(str(path), "--json"))["unmatched"]
    mapping = tmp_path / "map.yaml"
    mapping.write_text("i-030791dc5a37cd257: gpu-l4-1\n")
    report = json.loads(run(str(path), "--json", "--node-map", str(mapping)))
    assert [m["node"] for m in report["matched"]] == ["gpu-l4-1"]
    report = json.loads(run(str(path), "--json", "--node-map", "i-030791dc5a37cd257=gpu-l4-1"))
    assert report["matched"][0]["signals"]["temperature"] == "ok"


def test_import_health_event_records_and_errors(pool, tmp_path):
    device = pool.devices[2]
    path = tmp_path / "xid.json"
    path.write_text(json.dumps([{"xid": 48, "uuid": device.uuid, "at": pool.at(0).isoformat()}]))
    assert "healthy → unhealthy" in run(str(path), "--at", pool.at(5).isoformat())
    with pytest.raises(CommandError, match="cannot read"):
        run(str(tmp_path / "missing.prom"))
    with pytest.raises(CommandError, match="no cluster"):
        run(str(path), "--cluster", "nope")
    with pytest.raises(CommandError, match="time zone"):
        run(str(path), "--at", "2025-01-01T00:00:00")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- {gpu: 1}\n")
    with pytest.raises(CommandError, match="xid: required"):
        run(str(bad))


class _Exporter(BaseHTTPRequestHandler):
    body = b""
    status = 200

    def do_GET(self):
        self.send_response(self.status)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        return


@pytest.fixture
def exporter(settings):
    settings.HEALTH_SCRAPE_ALLOWED_NETWORKS = ["127.0.0.0/8"]  # the exporter below listens on loopback
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()
    server.server_close()


def test_scrape_task_gets_configured_endpoints(pool, reference, exporter):
    url = exporter
    node = NodeFactory(cluster=pool.cluster, name="i-030791dc5a37cd257")
    device = DeviceFactory(node=node, uuid=L4_UUID, key=L4_UUID, index=0)
    _Exporter.body = (reference / "dcgm/samples" / L4).read_text().encode()
    with override_settings(HEALTH_DCGM_ENDPOINTS=[url], HEALTH_SCRAPE_TIMEOUT_SECONDS=5):
        tasks.health_scrape_endpoints.delay()
    assert HealthSignal.objects.get(device=device, signal="temperature").level == "ok"
    device.refresh_from_db()
    assert device.health == HealthState.HEALTHY


def test_scrape_task_ingests_a_fault_and_skips_an_unreachable_endpoint(pool, exporter, caplog):
    url = exporter
    device = pool.devices[3]
    _Exporter.body = exposition([gpu(device, DCGM_FI_DEV_ROW_REMAP_FAILURE=1)]).encode()
    tasks.health_scrape_endpoint.delay(url)
    device.refresh_from_db()
    assert device.health == HealthState.QUARANTINED
    assert "row remapping failed" in RepairTicket.objects.get().reason
    _Exporter.status = 404
    try:
        tasks.health_scrape_endpoint.delay(url)
    finally:
        _Exporter.status = 200
    assert "HTTP 404" in caplog.text


def test_sweep_task_reconciles_every_cluster(pool):
    Device.objects.filter(pk=pool.devices[4].pk).update(
        health="unhealthy", health_reason="node taint nvidia.com/gpu-xid-error=true:NoSchedule"
    )
    tasks.health_sweep.delay()
    assert RepairTicket.objects.get().device_id == pool.devices[4].pk
