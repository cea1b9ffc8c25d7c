"""The worlds the benchmarks build: a simulated cluster whose pool is full of running jobs, and a queue behind it.

Imported after ``_setup.setup_django``. Everything is created with ``bulk_create`` (100,000 jobs in seconds, not
minutes), then counted once as a change of the cluster (``pools.state_version.bump``), as the product's bulk
writes do.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from pools.models import Cluster, Device, Node, ResourceClass, ResourceClassFlavor, ResourceFlavor
from pools.state_version import bump
from queues.models import Cohort, Job, Membership, QuotaLine, Team, TeamQuota

GPU = "nvidia.com/gpu"
#: Six teams: three in cohort research, two in product, one alone.
TEAMS = [("t1", "research"), ("t2", "research"), ("t3", "research"), ("t4", "product"), ("t5", "product"), ("t6", None)]


@dataclass
class QueueWorld:
    """What ``queue_world`` made."""

    cluster: Cluster
    user: object
    watched: Job


def queue_world(*, pending: int, nodes: int, seed: int = 7) -> QueueWorld:
    """A fresh simulated cluster of ``nodes`` nodes x 8 H100s, full of 8-GPU jobs (ending over the next 8 hours),
    six teams in two cohorts with the pool's quota split between them, and ``pending`` jobs of 1/2/4/8 GPUs
    (runtimes 10 min to 8 h) queued behind them in the teams' queues in turn; the user ``bench`` is in every team.
    Returns the cluster, the user and a pending job half-way down the queue."""
    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)
    rng = random.Random(seed)
    now = timezone.now()
    cluster = Cluster.objects.create(name="bench", backend=Cluster.Backend.SIMULATED)
    flavor = ResourceFlavor.objects.create(name="h100", node_labels={"gpu": "h100"})
    rc = ResourceClass.objects.create(slug="h100", name="H100", resource_name=GPU, allowed_counts=[1, 2, 4, 8])
    ResourceClassFlavor.objects.create(resource_class=rc, flavor=flavor)
    made = Node.objects.bulk_create(
        Node(
            cluster=cluster,
            name=f"n{i:05d}",
            flavor=flavor,
            labels={"gpu": "h100"},
            first_seen_at=now,
            last_seen_at=now,
        )
        for i in range(nodes)
    )
    if made and made[0].pk is None:  # a backend without RETURNING
        made = list(Node.objects.filter(cluster=cluster).order_by("name"))
    Device.objects.bulk_create(
        (
            Device(
                node=node,
                key=f"{node.name}-{d}",
                vendor="nvidia",
                resource_name=GPU,
                first_seen_at=now,
                last_seen_at=now,
            )
            for node in made
            for d in range(8)
        ),
        batch_size=5000,
    )
    cohorts = {name: Cohort.objects.create(name=name) for name in ("research", "product")}
    per_team = nodes * 8 // len(TEAMS)
    user = get_user_model().objects.create(username="bench")
    teams = []
    for slug, cohort in TEAMS:
        team = Team.objects.create(slug=slug, name=slug.upper(), namespace=slug)
        Membership.objects.create(team=team, user=user)
        quota = TeamQuota.objects.create(
            team=team, cluster=cluster, cluster_queue_name=slug, cohort=cohorts.get(cohort) if cohort else None
        )
        QuotaLine.objects.create(
            team_quota=quota,
            flavor=flavor,
            resource_name=GPU,
            nominal=str(per_team),
            borrowing_limit=str(per_team) if cohort else "",
        )
        teams.append(team)
    jobs = []
    for i, node in enumerate(made):  # the pool is full: one 8-GPU job per node, each team within its quota
        team = teams[i % len(teams)]
        started = now - timedelta(seconds=rng.uniform(0, 3600))
        jobs.append(
            Job(
                team=team,
                owner=user,
                cluster=cluster,
                name=f"r{i}",
                image="x",
                resource_class=rc,
                devices_per_pod=8,
                state=Job.State.RUNNING,
                sim_runtime_seconds=int(rng.uniform(3600, 8 * 3600)),
                assignment={
                    "clusterQueue": team.slug,
                    "podSets": [{"name": "main", "count": 1, "flavors": {GPU: "h100"}, "nodes": [node.name]}],
                },
                submitted_at=started,
                queued_at=started,
                admitted_at=started,
                started_at=started,
                state_changed_at=started,
            )
        )
    for i in range(pending):
        submitted = now - timedelta(seconds=pending - i)
        jobs.append(
            Job(
                team=teams[i % len(teams)],
                owner=user,
                cluster=cluster,
                name=f"p{i}",
                image="x",
                resource_class=rc,
                devices_per_pod=rng.choice((1, 2, 4, 8)),
                state=Job.State.PENDING,
                sim_runtime_seconds=int(rng.uniform(600, 8 * 3600)),
                submitted_at=submitted,
                queued_at=submitted,
                state_changed_at=submitted,
            )
        )
    Job.objects.bulk_create(jobs, batch_size=5000)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")  # planner statistics after the bulk load, as autovacuum would make them
    bump(cluster_ids=[cluster.pk])  # bulk_create sends no signal
    watched = Job.objects.filter(cluster=cluster, state=Job.State.PENDING).order_by("pk")[pending // 2]
    return QueueWorld(cluster=cluster, user=user, watched=watched)
