"""The demo's health picture: a card in repair with its ticket, a hot GPU degraded and used last."""

from __future__ import annotations

import pytest
from django.utils import timezone

from pools.demo import DEGRADED_NODE, HOT_GPU, demo_health_seed, demo_scrape
from pools.health.dcgm import parse_scrape
from pools.models import Cluster, Device, HealthState, RepairTicket
from portal.demo import DEMO_CLUSTER, demo_seed
from queues import services as job_services

pytestmark = pytest.mark.django_db


def test_demo_scrape_is_an_exporter_exposition():
    scrape = parse_scrape(demo_scrape(node="n1", temperatures={3: 90}, xids={3: 79}))
    assert len(scrape.gpus) == 8
    gpu3 = scrape.gpus[3]
    assert (gpu3.hostname, gpu3.gpu, gpu3.last_xid, gpu3.fields["DCGM_FI_DEV_GPU_TEMP"]) == ("n1", 3, 79, 90)
    assert gpu3.uuid.startswith("GPU-")


def test_demo_has_a_card_in_repair_with_a_ticket_and_a_degraded_gpu_used_last():
    now = timezone.now().replace(microsecond=0)
    demo_seed(days=1, now=now)
    cluster = Cluster.objects.get(name=DEMO_CLUSTER)
    [ticket] = RepairTicket.objects.all()
    assert ticket.node.name == DEGRADED_NODE
    assert ticket.state == RepairTicket.State.IN_REPAIR
    assert "allocatable 7 < capacity 8" in ticket.reason
    card = ticket.device
    assert card.health == HealthState.QUARANTINED
    assert [t.after for t in card.health_transitions.order_by("at", "id")] == ["unhealthy", "quarantined"]
    node, index = HOT_GPU
    hot = Device.objects.get(node__name=node, index=index, resource_name="nvidia.com/gpu")
    assert hot.health == HealthState.DEGRADED
    assert "89 °C" in hot.health_reason
    # Used last: among the node's free GPUs the degraded one comes after every healthy one.
    free = job_services.usable_free_devices(node_ids=[hot.node_id], resource_name="nvidia.com/gpu", kind="full")
    order = free.get(hot.node_id, [])
    if hot in order:
        assert order[-1] == hot
    # A second call changes nothing.
    assert demo_health_seed(cluster=cluster, now=now) == []
    assert RepairTicket.objects.count() == 1
