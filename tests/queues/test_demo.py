"""The demo seed: built on the product's services, idempotent, with jobs in many states."""

from __future__ import annotations

import re

import pytest

from pools.models import Allocation, Device, Node, ResourceClass
from pools.workload_kinds import WorkloadKind
from portal.demo import demo_seed
from queues.models import Job, JobEvent

pytestmark = pytest.mark.django_db


def test_demo_seed_is_idempotent_and_realistic():
    first = demo_seed(days=3, seed=3)
    assert first.history_jobs > 10
    counts = (Node.objects.count(), Device.objects.count(), Job.objects.count(), JobEvent.objects.count())
    second = demo_seed(days=3, seed=3)
    assert second.history_jobs == 0
    assert (Node.objects.count(), Device.objects.count(), Job.objects.count(), JobEvent.objects.count()) == counts
    physical = Device.objects.filter(parent__isnull=True).count()
    assert physical >= 80
    states = set(Job.objects.values_list("state", flat=True))
    assert {"succeeded", "running", "pending"} <= states
    # Every workload kind is in the catalogue's classes and among the jobs; sessions and services keep running.
    kinds = set(Job.objects.values_list("kind", flat=True))
    assert kinds == set(WorkloadKind.values)
    allowed = {k for rc in ResourceClass.objects.all() for k in rc.allowed_kinds}
    assert allowed == set(WorkloadKind.values)
    assert Job.objects.filter(kind__in=["session", "inference"], state="running").count() == 2
    assert not Job.objects.filter(kind__in=["jobset", "pytorchjob", "rayjob"], companion_pod_sets=[]).exists()
    # A name says what the job is, not a counter: the pages show the id beside it (issue 32: "resnet-41 #41").
    counted = [n for n in Job.objects.values_list("name", flat=True) if re.search(r"-\d+$", n)]
    assert not counted, counted[:5]
    # Every pending job says why it waits; every finished job released its devices.
    assert not Job.objects.filter(state="pending", wait_reason="").exists()
    assert not Allocation.objects.filter(ended_at__isnull=True, job__state__in=Job.FINAL_STATES).exists()
    # The card the device plugin reports unhealthy is in repair (ticket open); one H100 runs hot (degraded).
    assert Device.objects.filter(node__name="h100-r2-03", health="quarantined").count() == 1
    assert Device.objects.filter(health="degraded").count() == 1
