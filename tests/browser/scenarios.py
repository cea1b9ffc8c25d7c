"""Pools and teams for the researcher-page tests (browser, views, API, diagnosis), built with the factories.

Kept here rather than in a conftest so the browser tests and the queues tests share one definition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone

from pools.models import Allocation, Cluster, Device, Node, ResourceClass, ResourceFlavor
from queues.models import Job, PriorityClass, Team, TeamQuota
from tests.factories import (
    ClusterFactory,
    DeviceFactory,
    JobFactory,
    MembershipFactory,
    NodeFactory,
    PriorityClassFactory,
    QuotaLineFactory,
    ResourceClassFactory,
    ResourceFlavorFactory,
    TeamFactory,
    TeamQuotaFactory,
    TopologyFactory,
    UserFactory,
)

BLOCK = "cloud.provider.com/topology-block"
RACK = "cloud.provider.com/topology-rack"
HOST = "kubernetes.io/hostname"
PASSWORD = "password"


@dataclass
class Pool:
    """What ``research_pool`` built."""

    cluster: Cluster
    flavor: ResourceFlavor
    rc: ResourceClass
    team: Team
    quota: TeamQuota
    user: object
    other_team: Team
    other_user: object
    normal: PriorityClass
    nodes: list[Node] = field(default_factory=list)

    def devices(self, node: Node) -> list[Device]:
        """The node's GPUs in index order."""
        return list(node.devices.order_by("index", "pk"))


def research_pool(
    *,
    racks: dict[str, list[int]] | None = None,
    nominal: str = "16",
    other_nominal: str = "16",
    cluster_name: str = "sim",
) -> Pool:
    """A simulated cluster with H100 nodes in racks (default: two racks of two 4-GPU nodes), two teams.

    ``alice`` is in team ``vision`` (quota ``nominal``), ``bob`` in team ``speech``; the class ``h100``
    allows 1, 2, 4 or 8 GPUs per pod; priority ``normal`` is the default.
    """
    racks = racks if racks is not None else {"rack-a": [4, 4], "rack-b": [4, 4]}
    cluster = ClusterFactory(name=cluster_name, backend=Cluster.Backend.SIMULATED)
    topology = TopologyFactory(name="dc", levels=[BLOCK, RACK, HOST])
    flavor = ResourceFlavorFactory(name="h100", display_name="H100", topology=topology)
    nodes = []
    for rack, sizes in racks.items():
        for i, size in enumerate(sizes):
            name = f"{rack}-n{i}"
            node = NodeFactory(
                cluster=cluster,
                flavor=flavor,
                name=name,
                labels={HOST: name, RACK: rack, BLOCK: "block-1", **flavor.node_labels},
                capacity={"nvidia.com/gpu": str(size), "cpu": "128", "memory": "2Ti"},
            )
            for index in range(size):
                DeviceFactory(node=node, index=index)
            nodes.append(node)
    rc = ResourceClassFactory(
        slug="h100",
        name="H100 80GB",
        description="Full H100 cards in racks of NVLink nodes: training and large fine-tuning.",
        flavors=[flavor],
        allowed_counts=[1, 2, 4, 8],
        display_order=10,
    )
    team = TeamFactory(slug="vision", name="Vision")
    user = UserFactory(username="alice", first_name="Alice", last_name="Liddell")
    MembershipFactory(team=team, user=user)
    quota = TeamQuotaFactory(team=team, cluster=cluster, cluster_queue_name="vision")
    QuotaLineFactory(team_quota=quota, flavor=flavor, nominal=nominal)
    other_team = TeamFactory(slug="speech", name="Speech")
    other_user = UserFactory(username="bob", first_name="Bob", last_name="Builder")
    MembershipFactory(team=other_team, user=other_user)
    other_quota = TeamQuotaFactory(team=other_team, cluster=cluster, cluster_queue_name="speech")
    QuotaLineFactory(team_quota=other_quota, flavor=flavor, nominal=other_nominal)
    normal = PriorityClassFactory(name="normal", value=100, is_default=True)
    return Pool(
        cluster=cluster,
        flavor=flavor,
        rc=rc,
        team=team,
        quota=quota,
        user=user,
        other_team=other_team,
        other_user=other_user,
        normal=normal,
        nodes=nodes,
    )


def occupy(
    pool: Pool,
    *,
    node: Node,
    count: int,
    team: Team | None = None,
    owner=None,
    name: str = "blocker",
    started: datetime | None = None,
    runtime: int = 3600,
) -> Job:
    """A job already running on ``count`` GPUs of ``node`` (allocations and Kueue assignment recorded)."""
    team = team or pool.team
    owner = owner or (pool.user if team == pool.team else pool.other_user)
    started = started or timezone.now() - timedelta(minutes=5)
    queue = team.quotas.get(cluster=pool.cluster).cluster_queue_name
    job = JobFactory(
        team=team,
        owner=owner,
        cluster=pool.cluster,
        name=name,
        resource_class=pool.rc,
        devices_per_pod=count,
        pod_count=1,
        priority_class=pool.normal,
        priority=pool.normal.value,
        running=True,
        submitted_at=started - timedelta(minutes=1),
        state_changed_at=started,
        sim_runtime_seconds=runtime,
        assigned_flavor=pool.flavor,
        assignment={
            "clusterQueue": queue,
            "podSets": [
                {"name": "main", "count": 1, "flavors": {"nvidia.com/gpu": pool.flavor.name}, "nodes": [node.name]}
            ],
        },
    )
    job.admitted_at = job.started_at = started
    job.k8s_name = f"{name}-{job.pk}"
    job.save()
    used = set(Allocation.objects.filter(ended_at__isnull=True).values_list("device_id", flat=True))
    free = [d for d in pool.devices(node) if d.pk not in used][:count]
    assert len(free) == count, f"{node.name} has only {len(free)} free GPUs"
    Allocation.objects.bulk_create(Allocation(job=job, device=d, started_at=started) for d in free)
    return job


def login_password() -> str:
    """The password every factory user has."""
    return PASSWORD


def add_catalogue_classes(pool: Pool) -> None:
    """Two more classes beside H100: MIG slices of an A100 and time-shared L4s, with the team's quota on each."""
    from pools.models import Device as DeviceModel

    mig_flavor = ResourceFlavorFactory(
        name="a100-mig", display_name="A100 MIG", node_labels={"nvidia.com/gpu.product": "A100-SXM4-80GB"}
    )
    mig_node = NodeFactory(cluster=pool.cluster, flavor=mig_flavor, name="a100-n0")
    for card_index in range(2):
        card = DeviceFactory(node=mig_node, partitioned=True, index=card_index)
        for _ in range(7):
            DeviceFactory(node=mig_node, mig=True, parent=card, index=card_index)
    l4_flavor = ResourceFlavorFactory(name="l4", display_name="L4", node_labels={"nvidia.com/gpu.product": "L4"})
    l4_node = NodeFactory(cluster=pool.cluster, flavor=l4_flavor, name="l4-n0")
    for card_index in range(2):
        card = DeviceFactory(node=l4_node, partitioned=True, index=card_index, product="NVIDIA L4")
        for _ in range(4):
            DeviceFactory(node=l4_node, shared=True, parent=card, index=card_index)
    ResourceClassFactory(
        slug="mig-1g-10gb",
        name="A100 MIG 1g.10gb slice",
        description="A seventh of an A100 with 10 GB: notebooks, debugging, small inference.",
        resource_name="nvidia.com/mig-1g.10gb",
        sharing="mig",
        flavors=[mig_flavor],
        allowed_counts=[1, 2],
        display_order=20,
    )
    ResourceClassFactory(
        slug="l4-shared",
        name="L4 time-shared",
        description="A time-shared L4 replica for light inference and CI; other jobs share the card.",
        resource_name="nvidia.com/gpu.shared",
        sharing="time-shared",
        flavors=[l4_flavor],
        allowed_counts=[1],
        display_order=30,
    )
    QuotaLineFactory(team_quota=pool.quota, flavor=mig_flavor, resource_name="nvidia.com/mig-1g.10gb", nominal="7")
    QuotaLineFactory(team_quota=pool.quota, flavor=l4_flavor, resource_name="nvidia.com/gpu.shared", nominal="4")
    assert DeviceModel.objects.filter(resource_name="nvidia.com/mig-1g.10gb").count() == 14
