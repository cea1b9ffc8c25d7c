"""The portal against the testbed: a real API server, etcd, Kueue, kube-controller-manager, kube-scheduler and
KWOK GPU nodes (``scripts/testbed``, docs/testbed.md), started once per session and shared by the tests (or, with ``TESTBED_RUN_DIR``, one started beforehand with
``scripts/testbed up --nodes 4 --framework batch/job --framework pod --framework deployment
--framework jobset.x-k8s.io/jobset --run-dir DIR``).

Each test works in its own names (``<prefix>-vision`` namespace, ``h100-<prefix>`` flavor, …) and removes what
the portal created in the cluster when it ends, so the tests do not see each other's objects. Tests are skipped
with the reason when the testbed is not built; with ``TESTBED_REQUIRED=1`` (CI) that is a failure instead.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from clusters.backends.k8s.client import KubeClient, forget_client
from clusters.kube_sync.config import kube_config_push
from clusters.kube_sync.labels import MANAGED_BY, PORTAL
from clusters.kube_sync.sync import ClusterSync
from pools.models import Cluster
from queues.models import Job, Membership, PriorityClass, QuotaLine, TeamQuota
from queues.services import JobSpec, job_submit
from testbed import build, layout
from testbed.cluster import Testbed
from testbed.errors import TestbedError
from testbed.kubeapi import KubeApi, wait_for
from tests.factories import ResourceClassFactory, ResourceFlavorFactory, TeamFactory, UserFactory

#: Fake nodes of the shared testbed: 8 H100s each, two to a rack, two racks to a block.
NODES = 4
#: Kueue's integrations whose controllers the testbed runs: batch Jobs, plain Pods (development sessions),
#: Deployments (inference services; kube-controller-manager runs the Deployment and ReplicaSet controllers) and
#: JobSets (distributed training; the testbed runs JobSet's controller).
FRAMEWORKS = ("batch/job", "pod", "deployment", "jobset.x-k8s.io/jobset")
H100 = "NVIDIA-H100-80GB-HBM3"
CONFIG_KINDS = (
    "LocalQueue",
    "ClusterQueue",
    "Cohort",
    "ResourceFlavor",
    "WorkloadPriorityClass",
    "Topology",
    "Namespace",
)
_prefixes = itertools.count(1)
#: The xdist group of every test here: one worker runs them all, against one testbed.
XDIST_GROUP = "realcluster"


@pytest.hookimpl(tryfirst=True)  # before tests/conftest.py's, which leaves the separate tiers out of a plain run
def pytest_collection_modifyitems(items):
    """Every test here is a ``realcluster`` test, and all of them run in one xdist worker (``scripts/test`` runs
    ``--dist loadgroup``): the testbed is per session, so each worker that got one would start a testbed of its
    own and the tests would wait for the other testbeds' CPU."""
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.realcluster)
            item.add_marker(pytest.mark.xdist_group(XDIST_GROUP))
            _join_xdist_group(item, XDIST_GROUP)


def _join_xdist_group(item: pytest.Item, group: str) -> None:
    """Put the test in its xdist group where pytest-xdist 3.8 cannot: xdist groups a test by appending ``@group``
    to ``item._nodeid``, which pytest 9.2 no longer reads (a node's id is the structured ``item._id``), so the
    tests were spread over the workers and each started a testbed (pytest-dev/pytest-xdist#1386, fix not released).
    Done the way xdist does it, on the id pytest reads, and only on an xdist worker running ``--dist loadgroup``."""
    node_id = getattr(item, "_id", None)
    if not getattr(item.config.option, "loadgroup", False) or node_id is None or "@" in str(node_id):
        return
    item._id = type(node_id).parse(f"{node_id}@{group}")


@pytest.fixture(scope="session")
def testbed(tmp_path_factory) -> Testbed:
    """The session's testbed (started on first use, stopped at the end of the session)."""
    absent = build.missing(layout.BY_NAME)
    if absent:
        reason = (
            f"the testbed is not built ({', '.join(absent)} missing in {layout.BIN_DIR}): run scripts/testbed build "
            "(Go >= 1.26 and its module proxy; docs/testbed.md)"
        )
        if os.environ.get("TESTBED_REQUIRED"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    reuse = os.environ.get("TESTBED_RUN_DIR")
    if reuse:  # a testbed started with `scripts/testbed up --nodes 4 --run-dir DIR`, kept between test runs
        bed = Testbed(run_dir=Path(reuse).resolve())
        states = bed.status()
        wanted = f"{NODES} nodes and Kueue's {', '.join(FRAMEWORKS)} integrations"
        if (
            not states
            or any(v != "up" for v in states.values())
            or bed.state.get("nodes", 0) < NODES
            or not set(FRAMEWORKS) <= set(bed.state.get("frameworks", ()))
        ):
            pytest.fail(f"TESTBED_RUN_DIR={reuse}: no testbed with {wanted} runs there ({states})", pytrace=False)
        yield bed
        return
    bed = Testbed(
        run_dir=tmp_path_factory.mktemp("testbed"),
        port_range=os.environ.get("TESTBED_PORTS", "18400-18499"),
        nodes=NODES,
        frameworks=FRAMEWORKS,
        attached=True,
        echo=lambda line: None,
    )
    try:
        bed.up()
    except TestbedError as exc:
        pytest.fail(f"the testbed did not start: {exc}", pytrace=False)
    yield bed
    bed.down(quiet=True)


@pytest.fixture(scope="session")
def kubectl(testbed) -> KubeApi:
    """The cluster's admin, acting beside the portal (as an operator with kubectl would)."""
    return testbed.api()


@pytest.fixture
def prefix(kubectl) -> str:
    """This test's name prefix; what the portal created under it in the cluster is removed afterwards."""
    name = f"t{next(_prefixes):02d}"
    yield name
    _remove_portal_objects(kubectl)


def _remove_portal_objects(kubectl: KubeApi) -> None:
    """Delete what the portal created and wait until the pods of its namespaces are gone (they hold the nodes'
    GPUs); take the portal's label off at once (deleting waits for Kueue's finalizers and the namespace controller,
    and a later test's push must not see the leftovers as its orphans)."""
    selector = f"{MANAGED_BY}={PORTAL}"
    namespaces = [n["metadata"]["name"] for n in kubectl.list("Namespace", label_selector=selector)]
    for namespace in namespaces:
        for job in kubectl.list("Job", namespace):
            kubectl.delete("Job", job["metadata"]["name"], namespace)
    for kind in CONFIG_KINDS:
        for obj in kubectl.list(kind, label_selector=selector):
            name, namespace = obj["metadata"]["name"], obj["metadata"].get("namespace", "")
            kubectl.delete(kind, name, namespace)
            try:
                kubectl.patch(kind, name, {"metadata": {"labels": {MANAGED_BY: None}}}, namespace)
            except TestbedError:
                pass  # already gone
    wait_for(
        "the pods of the test's namespaces to be gone",
        lambda: not any(kubectl.list("Pod", namespace) for namespace in namespaces),
        timeout=60,
    )


@pytest.fixture(autouse=True)
def _kube_settings(settings):
    """Short watches and idle cut-offs: the API server's first bookmark comes only seconds before a watch's end."""
    settings.KUBE_SYNC_WATCH_SECONDS = 2
    settings.KUBE_SYNC_IDLE_SECONDS = 0.3
    settings.KUBE_API_BACKOFF_BASE = 0.05
    settings.KUBE_API_BACKOFF_MAX = 0.2
    settings.KUBE_RESUBMIT_AFTER_SECONDS = 0


@pytest.fixture
def cluster(db, testbed):
    """The testbed registered as a kubernetes cluster (its admin kubeconfig)."""
    row = Cluster.objects.create(
        name="testbed",
        backend=Cluster.Backend.KUBERNETES,
        kubeconfig_path=str(testbed.kubeconfig),
        kube_context="testbed",
    )
    forget_client(row)
    yield row
    forget_client(row)


@pytest.fixture
def api(cluster):
    """The portal's own client of the testbed."""
    return KubeClient(cluster)


class World:
    """One team with an H100 quota on the testbed; submit, sync, and wait for the cluster."""

    def __init__(self, *, prefix, cluster, api, kubectl, capture) -> None:
        self.prefix = prefix
        self.cluster = cluster
        self.api = api
        self.kubectl = kubectl
        self.capture = capture
        self.flavor = ResourceFlavorFactory(
            name=f"h100-{prefix}", display_name="H100", node_labels={"nvidia.com/gpu.product": H100}
        )
        self.rc = ResourceClassFactory(
            slug=f"h100-{prefix}", name="H100 80GB", flavors=[self.flavor], cpu_per_device="8", memory_per_device="64Gi"
        )
        self.user = UserFactory(username=f"ada-{prefix}")
        self.priority = PriorityClass.objects.create(name=f"{prefix}-normal", value=100, is_default=True)
        self.team, self.quota = self.add_team("vision", gpus=16)

    @property
    def namespace(self) -> str:
        """The first team's namespace."""
        return self.team.namespace

    def add_team(self, slug: str, *, gpus: int, cohort=None, borrowing_limit=None, lending_limit=None, **quota):
        """A team with a namespace, a LocalQueue ``main``, a ClusterQueue and quota lines of GPUs, CPU, memory."""
        team = TeamFactory(slug=f"{self.prefix}-{slug}", namespace=f"{self.prefix}-{slug}", local_queue_name="main")
        Membership.objects.create(team=team, user=self.user)
        tq = TeamQuota.objects.create(
            team=team, cluster=self.cluster, cluster_queue_name=f"{self.prefix}-{slug}", cohort=cohort, **quota
        )
        QuotaLine.objects.create(
            team_quota=tq,
            flavor=self.flavor,
            resource_name="nvidia.com/gpu",
            nominal=str(gpus),
            borrowing_limit="" if borrowing_limit is None else str(borrowing_limit),
            lending_limit="" if lending_limit is None else str(lending_limit),
        )
        QuotaLine.objects.create(team_quota=tq, flavor=self.flavor, resource_name="cpu", nominal=str(gpus * 8))
        QuotaLine.objects.create(team_quota=tq, flavor=self.flavor, resource_name="memory", nominal=f"{gpus * 64}Gi")
        return team, tq

    def push(self):
        """The portal's configuration push."""
        return kube_config_push(cluster=Cluster.objects.get(pk=self.cluster.pk), api=self.api)

    def sync(self, **kwargs):
        """One sync pass of the portal."""
        return ClusterSync(Cluster.objects.get(pk=self.cluster.pk), self.api).run(**kwargs)

    def submit(self, name: str = "train", *, team=None, pods: int = 1, gpus: int = 8, **kwargs) -> Job:
        """Submit as the team's member; the Job is created in the cluster before this returns."""
        spec = JobSpec(
            name=name,
            image="registry.example.com/vision/train:1.0",
            resource_class=kwargs.pop("resource_class", self.rc),
            devices_per_pod=gpus,
            pod_count=pods,
            **kwargs,
        )
        with self.capture(execute=True):
            job = job_submit(owner=self.user, team=team or self.team, spec=spec)
        job.refresh_from_db()
        return job

    def job(self, job: Job) -> Job:
        """The job as the database has it now."""
        return Job.objects.get(pk=job.pk)

    def until(self, what: str, check: Callable[[], object], *, timeout: float = 60.0) -> object:
        """Sync until ``check()`` is truthy (the cluster moves on its own; the portal follows by syncing)."""
        deadline = time.monotonic() + timeout
        while True:
            self.sync()
            result = check()
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(0.2)

    def until_state(self, job: Job, *states: str, timeout: float = 60.0) -> Job:
        """Sync until the job is in one of ``states``; the job."""
        self.until(f"{job.name} in {states}", lambda: self.job(job).state in states, timeout=timeout)
        return self.job(job)

    def workload(self, job: Job) -> dict:
        """The job's Workload as Kueue wrote it (found by its owner, the job's object)."""
        found = [
            w
            for w in self.kubectl.list("Workload", job.k8s_namespace)
            if any(o.get("name") == job.k8s_name for o in w["metadata"].get("ownerReferences") or [])
        ]
        assert found, f"no Workload for {job.k8s_name}"
        return found[0]


@pytest.fixture
def world(prefix, cluster, api, kubectl, django_capture_on_commit_callbacks) -> World:
    """The portal with one team on the testbed, its configuration pushed and the inventory synced."""
    w = World(prefix=prefix, cluster=cluster, api=api, kubectl=kubectl, capture=django_capture_on_commit_callbacks)
    report = w.push()
    assert report.errors == [], report.errors
    w.sync()
    return w
