"""Property: no job is ever placed on a device outside USABLE_HEALTH, except a validation job on its own device.

Random submissions, health changes (XIDs, double-bit ECC, manual marks, tickets, validations that pass or fail,
RMA) and simulated ticks. After every step, every allocation ever opened is checked against the device's health
*at the moment it was opened* (from the recorded transitions); once the drains have finished, no open allocation
remains on an unusable device but validation jobs on their own devices.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.test import override_settings
from django.utils import timezone
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from clusters.backends.simulated import simulated_cluster_tick_run
from kernel.errors import DomainError
from pools.health import tickets
from pools.health.ingest import health_ingest_scrape
from pools.health.services import Actor
from pools.health.settle import health_mark
from pools.models import USABLE_HEALTH, Allocation, Device, HealthState, RepairTicket, ValidationRun
from queues import services as job_services
from tests.factories import (
    ClusterFactory,
    DeviceFactory,
    MembershipFactory,
    NodeFactory,
    PriorityClassFactory,
    QuotaLineFactory,
    ResourceClassFactory,
    ResourceFlavorFactory,
    TeamQuotaFactory,
)
from tests.health.scrapes import exposition, gpu

pytestmark = pytest.mark.django_db

N_DEVICES = 8
device_index = st.integers(min_value=0, max_value=N_DEVICES - 1)
SUBMIT = st.tuples(st.just("submit"), st.sampled_from([1, 1, 2, 4]), st.booleans())
#: Jobs are running before the first health change, so there is something to move off.
WARM_UP = st.lists(SUBMIT, min_size=2, max_size=6).map(lambda subs: [*subs, ("tick", 1), ("tick", 1)])
OPS = st.one_of(
    SUBMIT,
    st.tuples(st.just("xid"), device_index, st.sampled_from([79, 48, 13, 63, 94])),
    st.tuples(st.just("dbe"), device_index),
    st.tuples(st.just("mark"), device_index, st.sampled_from(["degraded", "unhealthy", "ok"])),
    st.tuples(st.just("ticket"), device_index),
    st.tuples(st.just("validate"), st.sampled_from(["pass", "pass", "fail"])),
    st.tuples(
        st.just("rma"),
    ),
    st.tuples(
        st.just("drain_now"),
    ),
    st.tuples(st.just("tick"), st.sampled_from([1, 5, 12, 60, 400])),
)


def _pool():
    cluster = ClusterFactory()
    flavor = ResourceFlavorFactory()
    nodes = [NodeFactory(cluster=cluster, flavor=flavor) for _ in range(2)]
    devices = [DeviceFactory(node=n, index=i) for n in nodes for i in range(N_DEVICES // 2)]
    rc = ResourceClassFactory(flavors=[flavor], allowed_counts=[1, 2, 4])
    membership = MembershipFactory()
    quota = TeamQuotaFactory(team=membership.team, cluster=cluster)
    QuotaLineFactory(team_quota=quota, flavor=flavor, nominal=str(N_DEVICES))
    PriorityClassFactory(name="default-prio", value=100, is_default=True)
    return cluster, devices, rc, membership


def _health_at(device: Device, when) -> str:
    last = device.health_transitions.filter(at__lte=when).order_by("-at", "-id").first()
    return last.after if last else HealthState.HEALTHY


def _assert_never_placed_on_unusable() -> None:
    runs = {r.job_id: r for r in ValidationRun.objects.prefetch_related("devices")}
    for alloc in Allocation.objects.select_related("device"):
        state = _health_at(alloc.device, alloc.started_at)
        run = runs.get(alloc.job_id)
        if run is not None:
            assert alloc.device in run.devices.all(), f"validation job {alloc.job_id} off its own devices"
            assert state == HealthState.VALIDATING, f"validation job on a {state} device"
        else:
            assert state in USABLE_HEALTH, f"job {alloc.job_id} placed on a {state} device {alloc.device.key}"


def _assert_no_open_allocation_on_unusable() -> None:
    runs = {r.job_id: r for r in ValidationRun.objects.prefetch_related("devices")}
    for alloc in Allocation.objects.filter(ended_at__isnull=True).select_related("device"):
        if alloc.device.health in USABLE_HEALTH:
            continue
        run = runs.get(alloc.job_id)
        assert run is not None, f"job {alloc.job_id} still on {alloc.device.health} device {alloc.device.key}"
        assert alloc.device in run.devices.all()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(warm_up=WARM_UP, ops=st.lists(OPS, min_size=4, max_size=24))
def test_no_job_is_ever_placed_on_an_unusable_device(warm_up, ops):
    with transaction.atomic():
        cluster, devices, rc, member = _pool()
        clock = [timezone.now().replace(microsecond=0) - timedelta(days=2)]
        admin = Actor(label="ops")

        def now(step: float = 1):
            clock[0] += timedelta(seconds=step)
            return clock[0]

        def tick(step: float):
            simulated_cluster_tick_run(cluster_id=cluster.pk, now=now(step))

        for n, op in enumerate([*warm_up, *ops]):
            kind = op[0]
            try:
                if kind == "submit":
                    extra = {"checkpoint_path": "/ckpt", "checkpoint_signal": "SIGUSR1"} if op[2] else {}
                    spec = job_services.JobSpec(
                        name=f"j{n}",
                        image="python:3.11",
                        resource_class=rc,
                        devices_per_pod=op[1],
                        sim_runtime_seconds=300,
                        **extra,
                    )
                    job_services.job_submit(
                        owner=member.user, team=member.team, spec=spec, now=now(), notify_backend=False
                    )
                elif kind == "xid":
                    text = exposition([gpu(devices[op[1]], DCGM_FI_DEV_XID_ERRORS=op[2])])
                    health_ingest_scrape(text=text, now=now())
                elif kind == "dbe":
                    health_ingest_scrape(
                        text=exposition([gpu(devices[op[1]], DCGM_FI_DEV_ECC_DBE_VOL_TOTAL=2)]), now=now()
                    )
                elif kind == "mark":
                    health_mark(device=devices[op[1]], level=op[2], note="property", actor=admin, now=now())
                elif kind == "ticket":
                    tickets.ticket_open(device=devices[op[1]], reason="property", actor=admin, now=now())
                elif kind == "validate":
                    ticket = RepairTicket.objects.filter(state=RepairTicket.State.IN_REPAIR).order_by("pk").first()
                    if ticket is not None:
                        with override_settings(HEALTH_SIMULATED_VALIDATION_OUTCOME=op[1]):
                            tickets.ticket_start_validation(ticket=ticket, actor=admin, now=now())
                elif kind == "rma":
                    ticket = RepairTicket.objects.filter(state=RepairTicket.State.IN_REPAIR).order_by("pk").first()
                    if ticket is not None:
                        tickets.ticket_mark_rma(ticket=ticket, actor=admin, now=now())
                elif kind == "drain_now":
                    ticket = RepairTicket.objects.filter(state=RepairTicket.State.DRAINING).order_by("pk").first()
                    if ticket is not None:
                        tickets.ticket_drain_now(ticket=ticket, actor=admin, now=now())
                else:
                    tick(op[1])
            except DomainError:
                pass  # a refusal (e.g. a ticket for a retired device) is a legal outcome
            _assert_never_placed_on_unusable()
        for _ in range(3):  # let checkpoints finish and drains complete, with no new health change
            tick(15)
        _assert_never_placed_on_unusable()
        _assert_no_open_allocation_on_unusable()
        event(f"validation job placed: {Allocation.objects.filter(job__validation_run__isnull=False).exists()}")
        moved = Allocation.objects.filter(end_reason="preempted", device__health_transitions__isnull=False).exists()
        event(f"job moved off a device that went bad: {moved}")
        transaction.set_rollback(True)
