"""Workload kinds at submission: the class allows the kind, companion pod sets resolved and checked, all or nothing."""

from __future__ import annotations

import pytest

from kernel.errors import ValidationFailed
from pools.workload_kinds import kind_spec
from queues import services
from queues.engine import TopologyRequest
from queues.engine_input import cluster_engine_input
from queues.models import Job, JobEvent
from queues.pod_sets import job_pod_sets
from queues.services import JobSpec
from tests.factories import (
    ClusterFactory,
    DeviceFactory,
    MembershipFactory,
    NodeFactory,
    QuotaLineFactory,
    ResourceClassFactory,
    ResourceFlavorFactory,
    TeamQuotaFactory,
    TopologyFactory,
)

pytestmark = pytest.mark.django_db

ALL_KINDS = ["batch", "jobset", "pytorchjob", "rayjob", "session", "inference", "inference-lws"]


@pytest.fixture
def setup():
    """A member of a team with a quota; a class over two 8-GPU nodes that allows every kind."""
    flavor = ResourceFlavorFactory(name="h100")
    cluster = ClusterFactory(name="sim")
    for _ in range(2):
        DeviceFactory.create_batch(8, node=NodeFactory(flavor=flavor, cluster=cluster))
    rc = ResourceClassFactory(
        flavors=[flavor], allowed_counts=[1, 2, 4, 8], cpu_per_device="8", memory_per_device="64Gi"
    )
    rc.allowed_kinds = ALL_KINDS
    rc.save(update_fields=["allowed_kinds"])
    membership = MembershipFactory()
    quota = TeamQuotaFactory(team=membership.team, cluster=cluster)
    QuotaLineFactory(team_quota=quota, flavor=flavor, resource_name="nvidia.com/gpu", nominal="16")
    QuotaLineFactory(team_quota=quota, flavor=flavor, resource_name="cpu", nominal="256")
    return membership.user, membership.team, rc


def spec(rc, **overrides) -> JobSpec:
    """A valid submission of two pods with two GPUs each."""
    values = {"name": "llm", "image": "registry.example.org/ml/train:2", "resource_class": rc, "devices_per_pod": 2}
    values.update(overrides)
    return JobSpec(**values)


def test_job_submit_rayjob_stores_head_with_default_requests_then_workers(setup):
    user, team, rc = setup
    job = services.job_submit(owner=user, team=team, spec=spec(rc, kind="rayjob", pod_count=4))
    assert job.kind == "rayjob"
    assert job.companion_pod_sets == [{"name": "head", "count": 1, "devices_per_pod": 0, "cpu": "4", "memory": "16Gi"}]
    shapes = job_pod_sets(job)
    assert [(p.name, p.count, p.devices_per_pod, p.cpu, p.memory) for p in shapes] == [
        ("head", 1, 0, "4", "16Gi"),
        ("workers", 4, 2, "16", "128Gi"),
    ]
    assert job.total_devices == 8
    event = job.events.get(kind=JobEvent.Kind.SUBMITTED)
    assert "ray job, head: 1 pod (4 CPU, 16Gi memory) + workers: 4 pods x 2 GPUs" in event.message
    assert event.message.endswith("= 8 GPUs.")
    assert [p["name"] for p in event.details["podSets"]] == ["head", "workers"]


def test_job_submit_pytorchjob_master_asks_like_a_worker_and_counts_in_the_total(setup):
    user, team, rc = setup
    job = services.job_submit(owner=user, team=team, spec=spec(rc, kind="pytorchjob", pod_count=3))
    assert job.companion_pod_sets == [
        {"name": "master", "count": 1, "devices_per_pod": 2, "cpu": "16", "memory": "128Gi"}
    ]
    assert job.total_devices == 8  # the master's 2 + 3 workers x 2


def test_job_submit_overrides_companion_requests_in_canonical_notation(setup):
    user, team, rc = setup
    overrides = {"launcher": {"cpu": "64000m", "memory": "0.5Ti"}}
    job = services.job_submit(owner=user, team=team, spec=spec(rc, kind="jobset", companions=overrides))
    assert job.companion_pod_sets == [
        {"name": "launcher", "count": 1, "devices_per_pod": 0, "cpu": "64", "memory": "512Gi"}
    ]


def test_job_submit_session_gets_the_kinds_default_image(setup):
    user, team, rc = setup
    job = services.job_submit(owner=user, team=team, spec=spec(rc, kind="session", image="", devices_per_pod=1))
    assert job.image == kind_spec("session").default_image
    assert job.companion_pod_sets == []


@pytest.mark.parametrize(
    ("overrides", "field", "text"),
    [
        ({"kind": "notebook"}, "kind", "'notebook' is not a workload kind"),
        ({"kind": "inference", "max_runtime_seconds": 3600}, "max_runtime_seconds", "runs until it is stopped"),
        ({"kind": "session", "max_runtime_seconds": 3600}, "max_runtime_seconds", "leave the maximum runtime empty"),
        ({"kind": "batch", "companions": {"head": {}}}, "pod_sets", "has no pod set 'head' (its other pod sets: none)"),
        ({"kind": "rayjob", "companions": {"workers": {}}}, "pod_sets", "workers is the primary pod set"),
        ({"kind": "rayjob", "companions": {"head": {"count": 2}}}, "pod_sets", "head: count must be between 1 and 1"),
        ({"kind": "rayjob", "companions": {"head": {"devices_per_pod": 3}}}, "pod_sets", "allows 0, 1, 2, 4, 8"),
        ({"kind": "jobset", "companions": {"launcher": {"cpu": "lots"}}}, "pod_sets", "launcher: cpu invalid quantity"),
        ({"kind": "jobset", "companions": {"launcher": {"cpu": "0"}}}, "pod_sets", "above 0 and at most 1024"),
        ({"kind": "jobset", "companions": {"launcher": {"memory": "20Ti"}}}, "pod_sets", "at most 16Ti, got '20Ti'"),
        ({"kind": "jobset", "companions": {"launcher": {"gpus": 1}}}, "pod_sets", "unknown field 'gpus'"),
        ({"kind": "session", "image": "", "devices_per_pod": 1, "name": "Bad"}, "name", "DNS-1123"),
        ({"kind": "batch", "image": ""}, "image", "'' is not an image reference"),
        (
            {"kind": "pytorchjob", "pod_count": 8, "devices_per_pod": 2},
            "pod_count",
            "can never run: asks 18 GPUs in all",
        ),
    ],
)
def test_job_submit_refuses_bad_kind_input_naming_field(setup, overrides, field, text):
    user, team, rc = setup
    with pytest.raises(ValidationFailed) as exc:
        services.job_submit(owner=user, team=team, spec=spec(rc, **overrides))
    assert any(text in m for m in exc.value.errors[field]), exc.value.errors
    assert not Job.objects.exists()
    assert not JobEvent.objects.exists()


def test_job_submit_refuses_a_kind_the_class_does_not_allow_naming_the_allowed_ones(setup):
    user, team, rc = setup
    rc.allowed_kinds = ["batch", "session"]
    rc.save(update_fields=["allowed_kinds"])
    with pytest.raises(ValidationFailed) as exc:
        services.job_submit(owner=user, team=team, spec=spec(rc, kind="rayjob"))
    assert exc.value.errors["kind"] == [
        f"{rc.name} does not allow the kind rayjob (Ray job); allowed kinds: batch, session"
    ]
    assert not Job.objects.exists()


def test_engine_input_gives_every_pod_set_its_requests_affinity_and_topology(setup, django_assert_max_num_queries):
    """A RayJob's head (no devices, 8 CPUs asked) and workers (2 GPUs each: 16 CPUs) in Kueue's order; cpu is
    declared in the team's quota, memory is not; both keep to the class's flavor; a required rack applies to the
    workers only, the head may go anywhere in the topology-aware flavor."""
    user, team, rc = setup
    flavor = rc.flavor_links.get().flavor
    flavor.topology = TopologyFactory()
    flavor.save(update_fields=["topology"])
    level = flavor.topology.levels[-1]
    companions = {"head": {"cpu": "8"}}
    job = services.job_submit(
        owner=user,
        team=team,
        spec=spec(
            rc, kind="rayjob", pod_count=2, companions=companions, topology_mode="required", topology_level=level
        ),
    )
    baseline = cluster_engine_input(cluster=job.cluster)  # warm caches (quantities, class facts)
    assert baseline
    with django_assert_max_num_queries(15):  # + the cluster's reservation holds
        inp = cluster_engine_input(cluster=job.cluster)
    [workload] = inp.state.workloads
    head, workers = workload.pod_sets
    assert (head.name, head.count, dict(head.requests)) == ("head", 1, {"cpu": 8000})
    assert (workers.name, workers.count, dict(workers.requests)) == ("workers", 2, {"nvidia.com/gpu": 2, "cpu": 16000})
    assert head.node_affinity == workers.node_affinity != ()
    assert head.topology == TopologyRequest(unconstrained=True)
    assert workers.topology == TopologyRequest(required=level)
