"""Health importers (event records, NVRM lines, DCGM scrapes) refuse impossible values, exit status 2."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from pools.models import Device, RepairTicket
from tests.health.scrapes import exposition, gpu

pytestmark = pytest.mark.django_db


# --- health: XID records, NVRM lines, DCGM scrapes ---------------------------------------------------------------


def import_health(path) -> CommandError:
    with pytest.raises(CommandError) as caught:
        call_command("import_health", str(path), stdout=io.StringIO())
    assert caught.value.returncode == 2
    return caught.value


BAD_RECORDS = {
    "negative xid": ({"xid": -5}, "xid: -5 is out of range"),
    "zero xid": ({"xid": 0}, "xid: 0 is out of range"),
    "huge xid": ({"xid": 100000}, "xid: 100000 is out of range"),
    "fractional xid": ({"xid": 79.5}, "xid: 79.5 is not a whole number"),
    "boolean xid": ({"xid": True}, "xid: True is not a whole number"),
    "negative gpu": ({"xid": 79, "gpu": -1, "node": "gpu-node-0"}, "gpu: -1 is out of range"),
    "long node": ({"xid": 79, "gpu": 0, "node": "n" * 300}, "node: 300 characters"),
}


@pytest.mark.parametrize(("record", "problem"), BAD_RECORDS.values(), ids=BAD_RECORDS.keys())
def test_impossible_event_records_are_refused(pool, tmp_path, record, problem):
    path = tmp_path / "xid.json"
    path.write_text(json.dumps([{"uuid": pool.devices[0].uuid, **record}]))
    error = import_health(path)
    assert "record 1" in str(error)
    assert problem in str(error)
    assert not RepairTicket.objects.exists()
    assert not Device.objects.exclude(health="healthy").exists()


def test_nvrm_line_with_xid_zero_is_refused(pool, tmp_path):
    path = tmp_path / "kern.log"
    path.write_text("NVRM: Xid (PCI:0000:3b:00): 0, pid=1, bogus\n")
    assert "line 1: xid: 0 is out of range" in str(import_health(path))


@pytest.mark.parametrize(
    ("fields", "problem"),
    [({"DCGM_FI_DEV_XID_ERRORS": -5}, "-5 is not an XID"), ({"DCGM_FI_DEV_XID_ERRORS": 79.5}, "79.5 is not an XID")],
)
def test_impossible_scrape_values_are_refused(pool, tmp_path, fields, problem):
    path = tmp_path / "scrape.prom"
    path.write_text(exposition([gpu(pool.devices[0], **fields)]))
    error = import_health(path)
    assert pool.devices[0].uuid in str(error)
    assert problem in str(error)
    assert not RepairTicket.objects.exists()


def test_scrape_with_a_negative_gpu_index_is_refused(pool, tmp_path):
    path = tmp_path / "scrape.prom"
    text = exposition([gpu(pool.devices[0], DCGM_FI_DEV_GPU_TEMP=40)])
    path.write_text(text.replace(f'gpu="{pool.devices[0].index}"', 'gpu="-1"'))
    assert 'label gpu: "-1"' in str(import_health(path)).replace("'", '"')


def test_an_impossible_xid_is_refused_by_the_service_too(pool):
    from pools.health.events import EventRecord
    from pools.health.ingest import health_ingest_events
    from pools.health.services import HealthInputError

    record = EventRecord(kind="xid", xid=-5, at=pool.at(0), uuid=pool.devices[0].uuid)
    with pytest.raises(HealthInputError, match="-5 is not an XID"):
        health_ingest_events(records=[record], now=pool.at(1))
    assert not RepairTicket.objects.exists()
