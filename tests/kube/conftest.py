"""Fixtures of the kubernetes backend tests: an API emulator over HTTP, a cluster row pointing at it, a portal."""

from __future__ import annotations

import pytest

from clusters.backends.k8s.client import KubeClient, forget_client
from clusters.kube_sync.config import kube_config_push
from clusters.kube_sync.sync import ClusterSync
from pools.models import Cluster
from queues.models import Job, Membership, PriorityClass, QuotaLine, TeamQuota
from queues.services import JobSpec, job_submit
from tests.factories import ResourceClassFactory, ResourceFlavorFactory, TeamFactory, UserFactory
from tests.kube.cluster import FakeKueue, at, gpu_node
from tests.kube.emulator import Emulator
from tests.kube.schemas import crd_schemas, validate, workload_crd_schemas


@pytest.fixture(autouse=True)
def _kube_settings(settings):
    """Fast retries and short watches."""
    settings.KUBE_API_BACKOFF_BASE = 0.01
    settings.KUBE_API_BACKOFF_MAX = 0.02
    settings.KUBE_API_RETRIES = 3
    settings.KUBE_API_READ_TIMEOUT = 10  # generous: the machine running the tests may be busy
    settings.KUBE_SYNC_WATCH_SECONDS = 1
    settings.KUBE_RESUBMIT_AFTER_SECONDS = 0


@pytest.fixture(scope="session")
def _schemas_loaded():
    """Compile the validators once, before any emulator answers: a cold CRD schema takes seconds."""
    for kind in crd_schemas():
        validate({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": {"name": "warm"}, "spec": {}})
    for api_version, kind in (("v1", "Namespace"), ("batch/v1", "Job"), *workload_crd_schemas()):
        validate({"apiVersion": api_version, "kind": kind, "metadata": {"name": "warm"}, "spec": {}})


#: Seconds between the emulator's watch BOOKMARKs in tests: none, a bookmark follows each batch of events at once, so
#: a sync pass (which stops at the first bookmark) ends as soon as it has read everything. A test that needs the
#: realistic pause asks for it: ``@pytest.mark.emulator(bookmark_interval=0.2)``.
TEST_BOOKMARK_INTERVAL = 0.0


@pytest.fixture
def emulator(request, _schemas_loaded):
    """A running emulator that validates what clients send; fails the test if anything was rejected.

    A test that expects a rejection says so by clearing ``emulator.rejected`` once it has checked it.
    """
    marker = request.node.get_closest_marker("emulator")
    options = {"bookmark_interval": TEST_BOOKMARK_INTERVAL, **(marker.kwargs if marker else {})}
    emu = Emulator(validator=validate, **options)
    emu.start()
    yield emu
    emu.stop()
    if emu.rejected:
        pytest.fail(f"the emulator rejected what the client sent: {emu.rejected}", pytrace=False)


@pytest.fixture
def kube(emulator):
    """The cluster side."""
    return FakeKueue(emulator)


@pytest.fixture
def cluster(db, emulator, tmp_path):
    """A kubernetes Cluster row whose kubeconfig points at the emulator."""
    path = emulator.kubeconfig(str(tmp_path / "kubeconfig"))
    cluster = Cluster.objects.create(
        name="gpu-east", backend=Cluster.Backend.KUBERNETES, kubeconfig_path=path, kube_context="emulator"
    )
    forget_client(cluster)
    yield cluster
    forget_client(cluster)


@pytest.fixture
def api(cluster):
    """The real client, over HTTP."""
    return KubeClient(cluster)


@pytest.fixture
def portal(db, cluster, emulator):
    """One team with an H100 quota of 16 in the cluster, a class, a priority class, a member; 2 nodes of 8 GPUs."""
    flavor = ResourceFlavorFactory(
        name="h100", display_name="H100", node_labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    )
    rc = ResourceClassFactory(
        slug="h100", name="H100 80GB", flavors=[flavor], cpu_per_device="8", memory_per_device="64Gi"
    )
    team = TeamFactory(slug="vision", namespace="team-vision", local_queue_name="main")
    quota = TeamQuota.objects.create(team=team, cluster=cluster, cluster_queue_name="vision")
    QuotaLine.objects.create(team_quota=quota, flavor=flavor, resource_name="nvidia.com/gpu", nominal="16")
    QuotaLine.objects.create(team_quota=quota, flavor=flavor, resource_name="cpu", nominal="256")
    QuotaLine.objects.create(team_quota=quota, flavor=flavor, resource_name="memory", nominal="2Ti")
    priority = PriorityClass.objects.create(name="normal", value=100, is_default=True)
    user = UserFactory(username="ada")
    Membership.objects.create(team=team, user=user)
    for name in ("gpu-a1", "gpu-a2"):
        emulator.put(gpu_node(name))
    emulator.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}})
    return type(
        "Portal", (), {"flavor": flavor, "rc": rc, "team": team, "quota": quota, "priority": priority, "user": user}
    )


@pytest.fixture
def world(portal, cluster, api, emulator, kube, django_capture_on_commit_callbacks):
    """Configuration pushed, inventory synced; ``world.submit()`` and ``world.sync()`` helpers."""
    kube_config_push(cluster=cluster, api=api)

    class World:
        def sync(self, sync_class: type[ClusterSync] = ClusterSync, **kwargs):
            report = sync_class(Cluster.objects.get(pk=cluster.pk), api).run(**kwargs)
            assert emulator.rejected == []
            return report

        def submit(self, name: str = "train", *, pods: int = 1, gpus: int = 8, minute: float = 0, **kwargs) -> Job:
            spec = JobSpec(
                name=name,
                image="registry.example.com/vision/train:1.0",
                resource_class=portal.rc,
                devices_per_pod=gpus,
                pod_count=pods,
                **kwargs,
            )
            with django_capture_on_commit_callbacks(execute=True):
                job = job_submit(owner=portal.user, team=portal.team, spec=spec, now=at(minute))
            job.refresh_from_db()
            return job

        def job(self, job: Job) -> Job:
            return Job.objects.get(pk=job.pk)

    w = World()
    w.sync()
    return w
