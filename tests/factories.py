"""factory_boy factories for the pools and queues models, with sensible defaults and timezone-aware times."""

from __future__ import annotations

import uuid
from functools import cache

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.utils import timezone

from pools.models import Allocation, Cluster, Device, Node, ResourceClass, ResourceClassFlavor, ResourceFlavor, Topology
from queues.models import Job, Membership, PriorityClass, QuotaLine, Team, TeamQuota

GiB = 1024**3

#: Every factory-made user signs in with this password.
PASSWORD = "password"


@cache
def _password_hash() -> str:
    """One hash of PASSWORD for all users: hashing per user would dominate the time of tests that make many."""
    return make_password(PASSWORD)


class UserFactory(factory.django.DjangoModelFactory):
    """A user who can sign in with ``PASSWORD``."""

    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.org")
    first_name = factory.Faker("first_name")
    last_name = factory.Faker("last_name")
    password = factory.LazyFunction(_password_hash)


class ClusterFactory(factory.django.DjangoModelFactory):
    """A simulated cluster."""

    class Meta:
        model = Cluster
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"cluster-{n}")
    display_name = factory.LazyAttribute(lambda c: c.name.replace("-", " ").title())
    backend = Cluster.Backend.SIMULATED


class TopologyFactory(factory.django.DjangoModelFactory):
    """block → rack → hostname."""

    class Meta:
        model = Topology
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"topology-{n}")
    levels = factory.LazyFunction(
        lambda: ["cloud.provider.com/topology-block", "cloud.provider.com/topology-rack", "kubernetes.io/hostname"]
    )


class ResourceFlavorFactory(factory.django.DjangoModelFactory):
    """A flavor selecting nodes by ``nvidia.com/gpu.product``."""

    class Meta:
        model = ResourceFlavor
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"h100-{n}")
    display_name = factory.LazyAttribute(lambda f: f.name.upper())
    node_labels = factory.LazyAttribute(lambda f: {"nvidia.com/gpu.product": f.name})
    node_taints = factory.LazyFunction(list)
    tolerations = factory.LazyFunction(list)
    topology = None


class NodeFactory(factory.django.DjangoModelFactory):
    """A ready, schedulable node carrying its flavor's labels; pass ``flavor=`` to share one flavor."""

    class Meta:
        model = Node

    cluster = factory.SubFactory(ClusterFactory)
    name = factory.Sequence(lambda n: f"gpu-node-{n:04d}")
    flavor = factory.SubFactory(ResourceFlavorFactory)
    labels = factory.LazyAttribute(
        lambda o: {"kubernetes.io/hostname": o.name, **(o.flavor.node_labels if o.flavor else {})}
    )
    ready = True
    unschedulable = False
    capacity = factory.LazyFunction(lambda: {"nvidia.com/gpu": "8", "cpu": "128", "memory": "2Ti"})
    allocatable = factory.LazyAttribute(lambda o: dict(o.capacity))
    first_seen_at = factory.LazyFunction(timezone.now)
    last_seen_at = factory.LazyFunction(timezone.now)
    gone_at = None


class DeviceFactory(factory.django.DjangoModelFactory):
    """A healthy full NVIDIA H100 card scheduled as ``nvidia.com/gpu``."""

    class Meta:
        model = Device

    node = factory.SubFactory(NodeFactory)
    uuid = factory.LazyFunction(lambda: f"GPU-{uuid.uuid4()}")
    key = factory.LazyAttribute(lambda d: d.uuid or f"dev-{d.index}")
    vendor = Device.Vendor.NVIDIA
    product = "NVIDIA H100 80GB HBM3"
    index = factory.Sequence(lambda n: n % 8)
    memory_bytes = 80 * GiB
    architecture = "hopper"
    driver_version = "550.54.15"
    cuda_version = "12.4"
    kind = Device.Kind.FULL
    resource_name = "nvidia.com/gpu"
    parent = None
    health = "healthy"
    first_seen_at = factory.LazyFunction(timezone.now)
    last_seen_at = factory.LazyFunction(timezone.now)
    gone_at = None

    class Params:
        mig = factory.Trait(
            kind=Device.Kind.MIG,
            product="NVIDIA A100-SXM4-80GB MIG 1g.10gb",
            mig_profile="1g.10gb",
            resource_name="nvidia.com/mig-1g.10gb",
            memory_bytes=10 * GiB,
            uuid=factory.LazyFunction(lambda: f"MIG-{uuid.uuid4()}"),
        )
        shared = factory.Trait(
            kind=Device.Kind.SHARED,
            product="NVIDIA L4",
            resource_name="nvidia.com/gpu.shared",
            memory_bytes=24 * GiB,
            uuid="",
            key=factory.Sequence(lambda n: f"shared-{n}"),
            replica_index=factory.Sequence(lambda n: n % 4),
        )
        partitioned = factory.Trait(
            product="NVIDIA A100-SXM4-80GB",
            resource_name="",
            architecture="ampere",
        )


class ResourceClassFactory(factory.django.DjangoModelFactory):
    """A dedicated-card class; ``flavors=[...]`` links flavors in the given order."""

    class Meta:
        model = ResourceClass
        django_get_or_create = ("slug",)
        skip_postgeneration_save = True

    slug = factory.Sequence(lambda n: f"class-{n}")
    name = factory.Sequence(lambda n: f"H100 80GB class {n}")
    description = "Full H100 cards for training."
    resource_name = "nvidia.com/gpu"
    sharing = ResourceClass.Sharing.DEDICATED
    allowed_counts = factory.LazyFunction(lambda: [1, 2, 4, 8])
    active = True

    @factory.post_generation
    def flavors(self, create: bool, extracted, **kwargs) -> None:
        """Link the given flavors (in preference order)."""
        if not create or not extracted:
            return
        for order, flavor in enumerate(extracted):
            ResourceClassFlavor.objects.create(resource_class=self, flavor=flavor, order=order)


class ResourceClassFlavorFactory(factory.django.DjangoModelFactory):
    """A flavor a class may land on."""

    class Meta:
        model = ResourceClassFlavor

    resource_class = factory.SubFactory(ResourceClassFactory)
    flavor = factory.SubFactory(ResourceFlavorFactory)
    order = 0


class TeamFactory(factory.django.DjangoModelFactory):
    """A team with its own namespace."""

    class Meta:
        model = Team
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"team-{n}")
    name = factory.LazyAttribute(lambda t: t.slug.replace("-", " ").title())
    namespace = factory.LazyAttribute(lambda t: t.slug)
    local_queue_name = "main"


class MembershipFactory(factory.django.DjangoModelFactory):
    """A plain member."""

    class Meta:
        model = Membership

    team = factory.SubFactory(TeamFactory)
    user = factory.SubFactory(UserFactory)
    role = Membership.Role.MEMBER


class TeamQuotaFactory(factory.django.DjangoModelFactory):
    """A team's ClusterQueue, named after the team."""

    class Meta:
        model = TeamQuota

    team = factory.SubFactory(TeamFactory)
    cluster = factory.SubFactory(ClusterFactory)
    cluster_queue_name = factory.LazyAttribute(lambda q: q.team.slug)
    cohort = None


class QuotaLineFactory(factory.django.DjangoModelFactory):
    """Eight GPUs of nominal quota on a flavor."""

    class Meta:
        model = QuotaLine

    team_quota = factory.SubFactory(TeamQuotaFactory)
    cohort = None
    flavor = factory.SubFactory(ResourceFlavorFactory)
    resource_name = "nvidia.com/gpu"
    nominal = "8"
    borrowing_limit = ""
    lending_limit = ""


class PriorityClassFactory(factory.django.DjangoModelFactory):
    """A priority class that may preempt."""

    class Meta:
        model = PriorityClass
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"priority-{n}")
    value = 100
    description = ""
    may_preempt = True
    is_default = False


class JobFactory(factory.django.DjangoModelFactory):
    """A pending one-GPU job; the owner is a member of the team."""

    class Meta:
        model = Job
        skip_postgeneration_save = True

    team = factory.SubFactory(TeamFactory)
    owner = factory.SubFactory(UserFactory)
    cluster = factory.SubFactory(ClusterFactory)
    name = factory.Sequence(lambda n: f"job-{n}")
    image = "registry.example.org/ml/train:1.0"
    command = factory.LazyFunction(lambda: ["python", "train.py"])
    resource_class = factory.SubFactory(ResourceClassFactory)
    devices_per_pod = 1
    pod_count = 1
    priority_class = None
    priority = 0
    state = Job.State.PENDING
    submitted_at = factory.LazyFunction(timezone.now)
    queued_at = factory.LazyAttribute(lambda j: j.submitted_at)
    state_changed_at = factory.LazyAttribute(lambda j: j.submitted_at)

    class Params:
        running = factory.Trait(
            state=Job.State.RUNNING,
            admitted_at=factory.LazyAttribute(lambda j: j.submitted_at),
            started_at=factory.LazyAttribute(lambda j: j.submitted_at),
        )

    @factory.post_generation
    def membership(self, create: bool, extracted, **kwargs) -> None:
        """Make the owner a member of the team unless ``membership=False``."""
        if create and extracted is not False:
            Membership.objects.get_or_create(team=self.team, user=self.owner)


class AllocationFactory(factory.django.DjangoModelFactory):
    """An open allocation of a device to a running job."""

    class Meta:
        model = Allocation

    job = factory.SubFactory(JobFactory, running=True)
    device = factory.SubFactory(DeviceFactory)
    pod_index = 0
    started_at = factory.LazyFunction(timezone.now)
    ended_at = None
    end_reason = ""
