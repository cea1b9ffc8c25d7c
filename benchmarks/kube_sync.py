"""The kubernetes sync at scale: 2,000 nodes (16,000 GPUs) and 50,000 workloads served by the API emulator.

Builds a throwaway database (SQLite under var/ by default, or ``--database-url`` / DATABASE_URL), creates the
portal's side (a kubernetes cluster, a team, ``--workloads`` submitted jobs) and, in a separate process, the
emulator serving the cluster's side over HTTP: ``--nodes`` GPU nodes of 8 GPUs, one batch Job and one Workload per
job — one job per node admitted and running (every GPU busy), the rest pending on quota with Kueue's message.

Prints:

* **full sync**: a first ``ClusterSync.run(full=True)`` (list every kind in pages, inventory import, snapshots,
  evaluation of every job: states, allocations, wait reasons, timeline events), with its phases;
* **bare baseline**: the same list responses fetched once, then only ``json.loads`` + ``bulk_create`` of the same
  rows (2,000 Node rows, one KubeJobState row per job holding its objects), rolled back; and the **ratio** full
  sync / baseline (target ≤ 3);
* **incremental latency**: with the ``kube_watch`` loops running, a job completes in the cluster (Job, Workload and
  Pod updated through the emulator's HTTP control API) and the job page is polled through Django's test client
  until it shows the new state (target < 2 s), over ``--trials`` trials.

    .venv/bin/python benchmarks/kube_sync.py                                   # full scale, SQLite
    .venv/bin/python benchmarks/kube_sync.py --nodes 200 --workloads 5000      # a quick look
    .venv/bin/python benchmarks/kube_sync.py --database-url postgres://postgres@127.0.0.1:5432/bench_kube
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from _setup import add_database_argument, setup_django


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--workloads", type=int, default=50_000)
    parser.add_argument("--trials", type=int, default=5, help="incremental changes timed")
    parser.add_argument("--emulator-port", type=int, default=0, help="the emulator's port on 127.0.0.1 (0: any free)")
    add_database_argument(parser, "bench_kube.sqlite3")
    return parser.parse_args()


ARGS = parse_args()
setup_django(ARGS.database_url, fresh_sqlite=True)

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, connections, transaction  # noqa: E402
from django.db.models import Count  # noqa: E402
from django.test import Client  # noqa: E402
from django.urls import reverse  # noqa: E402
from django.utils import timezone  # noqa: E402

from clusters.backends.k8s.client import KubeClient  # noqa: E402
from clusters.kube_sync.api import JOBS, NODES, PODS, WORKLOADS  # noqa: E402
from clusters.kube_sync.jobs import job_manifest_now as job_manifest  # noqa: E402
from clusters.kube_sync.loops import kube_evaluate_loop, kube_watch_loop  # noqa: E402
from clusters.kube_sync.sync import ClusterSync  # noqa: E402
from clusters.models import KubeJobState  # noqa: E402
from pools.models import Cluster, Node, ResourceClass, ResourceClassFlavor, ResourceFlavor  # noqa: E402
from queues.models import Job, Membership, PriorityClass, QuotaLine, Team, TeamQuota  # noqa: E402

NS = "team-bench"
PRODUCT = "NVIDIA-H100-80GB-HBM3"
QUOTA_MESSAGE = (
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, "
    "8 more needed"
)


# --- the cluster side, in its own process ----------------------------------------------------------------------


def serve(manifests_path: str, running: int, nodes: int, conn, port: int = 0) -> None:
    """Child process: fill an emulator and serve it until the parent closes the pipe."""
    from tests.kube.cluster import FakeKueue, at, gpu_node
    from tests.kube.emulator import Emulator

    emu = Emulator(validator=None, bookmark_interval=1.0)
    emu.record_requests = False
    emu.port = port
    kube = FakeKueue(emu)
    for i in range(nodes):
        emu.put(gpu_node(f"gpu-{i:05d}", product=PRODUCT))
    emu.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    with open(manifests_path) as fh:
        manifests = json.load(fh)
    for i, manifest in enumerate(manifests):
        emu.put(manifest)
        name = manifest["metadata"]["name"]
        kube.create_workload(name, NS, when=at(0))
        if i < running:
            node = f"gpu-{i:05d}"
            kube.admit(name, NS, cluster_queue="bench", flavor="h100", nodes=[node], gpus_per_pod=8, when=at(1))
            kube.run_pods(name, NS, [node], when=at(2))
        else:
            kube.pending(name, NS, QUOTA_MESSAGE, when=at(1))
    emu.start()
    conn.send(emu.url)
    conn.recv()  # until the parent is done
    emu.stop()


# --- the portal side -------------------------------------------------------------------------------------------


def setup_portal(n_jobs: int) -> tuple[Cluster, list[Job], object]:
    """Cluster row, flavor, class, team with a quota of every GPU, ``n_jobs`` submitted jobs."""
    call_command("migrate", verbosity=0)
    if connection.vendor != "sqlite":
        call_command("flush", interactive=False, verbosity=0)  # a throwaway database: start empty
    User = get_user_model()
    cluster = Cluster.objects.create(name="bench", backend=Cluster.Backend.KUBERNETES, kube_context="emulator")
    flavor = ResourceFlavor.objects.create(
        name="h100", display_name="H100", node_labels={"nvidia.com/gpu.product": PRODUCT}
    )
    rc = ResourceClass.objects.create(
        slug="h100",
        name="H100 80GB",
        resource_name="nvidia.com/gpu",
        allowed_counts=[1, 2, 4, 8],
        cpu_per_device="8",
        memory_per_device="64Gi",
    )
    ResourceClassFlavor.objects.create(resource_class=rc, flavor=flavor, order=0)
    team = Team.objects.create(slug="bench", name="Bench", namespace=NS, local_queue_name="main")
    quota = TeamQuota.objects.create(team=team, cluster=cluster, cluster_queue_name="bench")
    QuotaLine.objects.create(
        team_quota=quota, flavor=flavor, resource_name="nvidia.com/gpu", nominal=str(ARGS.nodes * 8)
    )
    priority = PriorityClass.objects.create(name="normal", value=100, is_default=True)
    user = User.objects.create_user(username="bench", password="x")
    Membership.objects.create(team=team, user=user)
    now = timezone.now()
    jobs = [
        Job(
            team=team,
            owner=user,
            cluster=cluster,
            name=f"j{i}",
            image="registry.example.com/bench:1",
            resource_class=rc,
            devices_per_pod=8,
            pod_count=1,
            priority_class=priority,
            priority=100,
            submitted_at=now,
            queued_at=now,
            state_changed_at=now,
            k8s_namespace=NS,
        )
        for i in range(n_jobs)
    ]
    jobs = Job.objects.bulk_create(jobs, batch_size=5000)
    if jobs[0].pk is None:  # a backend without RETURNING
        jobs = list(Job.objects.filter(cluster=cluster).order_by("pk"))
    for job in jobs:
        job.k8s_name = f"{job.name}-{job.pk}"
    Job.objects.bulk_update(jobs, ["k8s_name"], batch_size=5000)
    return cluster, jobs, user


def analyze() -> None:
    """Planner statistics after bulk loads (what autovacuum gives a production database)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")


def fetch_pages(api: KubeClient) -> list[bytes]:
    """Raw bodies of every page of the lists the full sync reads (for the baseline)."""
    bodies = []
    for resource in (NODES, JOBS, PODS, WORKLOADS):
        token = ""
        while True:
            query = [("limit", 500)] + ([("continue", token)] if token else [])
            response = api._send("GET", resource.path(), query=query)
            body = response.data
            response.release_conn()
            bodies.append(body)
            token = (json.loads(body).get("metadata") or {}).get("continue") or ""
            if not token:
                break
    return bodies


def baseline(bodies: list[bytes], cluster: Cluster, jobs: list[Job]) -> float:
    """json.loads + bulk_create of the same rows (Nodes, one KubeJobState per job), rolled back; seconds."""
    by_name = {j.k8s_name: j.pk for j in jobs}
    start = time.perf_counter()
    with transaction.atomic():
        nodes, states = [], {}
        now = timezone.now()
        for body in bodies:
            data = json.loads(body)
            for item in data.get("items") or []:
                kind = data["kind"]
                meta = item["metadata"]
                if kind == "NodeList":
                    status = item.get("status") or {}
                    nodes.append(
                        Node(
                            cluster=cluster,
                            name=meta["name"],
                            labels=meta.get("labels") or {},
                            capacity=status.get("capacity") or {},
                            allocatable=status.get("allocatable") or {},
                            conditions=status.get("conditions") or [],
                            first_seen_at=now,
                            last_seen_at=now,
                        )
                    )
                    continue
                owner = (
                    meta["name"]
                    if kind == "JobList"
                    else next((o["name"] for o in meta.get("ownerReferences") or [] if o.get("kind") == "Job"), "")
                )
                pk = by_name.get(owner)
                if pk is None:
                    continue
                row = states.setdefault(pk, KubeJobState(job_id=pk, cluster=cluster, observed_at=now))
                if kind == "JobList":
                    row.batch_job = item
                elif kind == "WorkloadList":
                    row.workload = item
                else:
                    row.pods = {**row.pods, meta["name"]: item}
        Node.objects.bulk_create(nodes, batch_size=1000)
        KubeJobState.objects.bulk_create(list(states.values()), batch_size=1000)
        elapsed = time.perf_counter() - start
        transaction.set_rollback(True)
    return elapsed


class TimedSync(ClusterSync):
    """A ClusterSync that times its phases."""

    phases: dict[str, float] = {}

    def _timed(self, name, fn, *args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - start

    def relist_inventory(self):
        return self._timed("inventory (list + import)", super().relist_inventory)

    def relist_jobs(self, kinds):
        return self._timed("jobs/pods/workloads (list + snapshots)", super().relist_jobs, kinds)

    def evaluate_dirty(self):
        return self._timed("evaluation (states, allocations, reasons)", super().evaluate_dirty)


def complete_in_cluster(url: str, api: KubeClient, job: Job, node: str) -> None:
    """The job's pod succeeds, its Job completes, its Workload finishes (through the emulator's control API)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def put(obj: dict) -> None:
        request = urllib.request.Request(
            f"{url}/_emu/put", data=json.dumps(obj).encode(), headers={"Content-Type": "application/json"}
        )
        urllib.request.urlopen(request).read()

    for pod in api.list_page(PODS, namespace=NS, label_selector=f"gpu-pool-portal.io/job-id={job.pk}").items:
        pod["status"]["phase"] = "Succeeded"
        started = pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
        pod["status"]["containerStatuses"][0]["state"] = {
            "terminated": {"exitCode": 0, "startedAt": started, "finishedAt": stamp}
        }
        put(pod)
    batch = api.get(JOBS, name=job.k8s_name, namespace=NS)
    batch["status"] = {
        **batch.get("status", {}),
        "active": 0,
        "succeeded": 1,
        "completionTime": stamp,
        "conditions": [
            {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": stamp},
            {"type": "Complete", "status": "True", "lastTransitionTime": stamp},
        ],
    }
    put(batch)
    wl = api.list_page(WORKLOADS, namespace=NS, field_selector=f"metadata.name={job.workload_name}").items[0]
    wl["status"]["conditions"].append(
        {
            "type": "Finished",
            "status": "True",
            "reason": "Succeeded",
            "message": "Job finished successfully",
            "lastTransitionTime": stamp,
        }
    )
    put(wl)


def main() -> None:
    started = time.perf_counter()
    cluster, jobs, user = setup_portal(ARGS.workloads)
    running = min(ARGS.nodes, ARGS.workloads)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        jobs_full = Job.objects.select_related("team", "owner", "resource_class", "priority_class").prefetch_related(
            "resource_class__flavor_links__flavor"
        )
        json.dump([job_manifest(j) for j in jobs_full.order_by("pk").iterator(chunk_size=2000)], fh)
    connections.close_all()
    parent, child = multiprocessing.get_context("fork").Pipe()
    server = multiprocessing.get_context("fork").Process(
        target=serve, args=(fh.name, running, ARGS.nodes, child, ARGS.emulator_port)
    )
    server.start()
    url = parent.recv()
    print(
        f"setup: {time.perf_counter() - started:.1f}s ({ARGS.nodes} nodes, {ARGS.nodes * 8} GPUs, "
        f"{ARGS.workloads} jobs/workloads, {running} running) on {connection.vendor}"
    )
    kubeconfig = Path(tempfile.mkdtemp()) / "kubeconfig"
    from tests.kube.emulator import Emulator

    stub = Emulator()
    stub.port = int(url.rsplit(":", 1)[1])
    Cluster.objects.filter(pk=cluster.pk).update(kubeconfig_path=stub.kubeconfig(str(kubeconfig)))
    cluster.refresh_from_db()
    api = KubeClient(cluster)

    bodies = fetch_pages(api)
    fetch_start = time.perf_counter()
    bodies = fetch_pages(api)
    fetch = time.perf_counter() - fetch_start
    base = baseline(bodies, cluster, jobs)

    analyze()
    sync = TimedSync(cluster, api)
    start = time.perf_counter()
    report = sync.run(full=True, watch_seconds=0)
    full = time.perf_counter() - start
    analyze()
    states = dict(Job.objects.filter(cluster=cluster).values_list("state").annotate(n=Count("pk")))
    print(f"full sync: {full:.1f}s  ({report.text()})")
    for name, seconds in TimedSync.phases.items():
        print(f"  {name}: {seconds:.1f}s")
    print(f"  jobs by state after it: {states}")
    print(
        f"bare baseline: fetch {fetch:.1f}s (HTTP, not in the baseline); json.loads + bulk_create {base:.1f}s "
        f"({len(bodies)} pages, {ARGS.nodes} + {len(jobs)} rows)"
    )
    print(
        f"ratio full sync / baseline: {full / base:.2f}  (target <= 3); including the fetch in the baseline: "
        f"{full / (base + fetch):.2f}"
    )

    # incremental: watch loops + the job page
    stopping = threading.Event()
    threads = [
        threading.Thread(
            target=kube_watch_loop,
            kwargs={"cluster": cluster, "api": api, "kind": kind, "stop": stopping.is_set, "timeout_seconds": 60},
            daemon=True,
        )
        for kind in ("jobs", "pods", "workloads")
    ]
    threads.append(
        threading.Thread(
            target=kube_evaluate_loop,
            kwargs={"cluster": cluster, "api": api, "stop": stopping.is_set, "interval": 0.05},
            daemon=True,
        )
    )
    for t in threads:
        t.start()
    time.sleep(2)  # the watches are open
    client = Client()
    client.force_login(user)
    latencies = []
    for trial in range(ARGS.trials):
        job = Job.objects.get(pk=jobs[trial].pk)
        page = reverse("queues:job_detail", args=[job.pk])
        assert b'data-state="running"' in client.get(page).content, "the job should be running before the change"
        t0 = time.perf_counter()
        complete_in_cluster(url, api, job, f"gpu-{trial:05d}")
        while b'data-state="succeeded"' not in client.get(page).content:
            if time.perf_counter() - t0 > 60:
                raise SystemExit(f"trial {trial}: the job page did not change within 60 s")
            time.sleep(0.02)
        latencies.append(time.perf_counter() - t0)
    stopping.set()
    print(
        f"incremental event → job page: median {statistics.median(latencies):.2f}s, max {max(latencies):.2f}s "
        f"over {len(latencies)} trials (target < 2 s): {', '.join(f'{x:.2f}' for x in latencies)}"
    )
    parent.send("stop")
    server.join(10)
    os.unlink(fh.name)


if __name__ == "__main__":
    main()
