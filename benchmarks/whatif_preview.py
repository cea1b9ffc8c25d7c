"""The what-if preview at scale: time to replay two weeks of recorded jobs under the current and a proposed policy.

Builds a throwaway database (SQLite under var/ by default, or ``--database-url``) with one simulated cluster of
``--nodes`` nodes x 8 H100s, six teams in two cohorts and ``--jobs`` recorded jobs spread over the last 14 days
(sizes 1/2/4/8 GPUs, runtimes 10 min to 8 h, offered load about ``--load`` of the pool). Then times:
loading the recorded jobs, one replay, the whole comparison (``whatif_compare``), and the admin preview end to
end: the request that starts it (POST of the TeamQuota change form through Django's test client, its save
rolled back, the replay enqueued as it would be for a broker), the worker's replay of the stored preview, and
the poll of the finished preview page.

    .venv/bin/python benchmarks/whatif_preview.py [--jobs 5000] [--nodes 16] [--load 0.9]
"""

from __future__ import annotations

import argparse
import random
import time
from datetime import timedelta

from _setup import add_database_argument, setup_django


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--load", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=7)
    add_database_argument(parser, "bench_whatif.sqlite3")
    return parser.parse_args()


ARGS = parse_args()
setup_django(ARGS.database_url)

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

from pools.models import Cluster, Device, Node, ResourceClass, ResourceClassFlavor, ResourceFlavor  # noqa: E402
from queues.models import Cohort, Job, PolicyPreview, QuotaLine, Team, TeamQuota  # noqa: E402
from queues.policy import preview_replay, previews  # noqa: E402
from queues.policy.whatif import (  # noqa: E402
    MAX_CYCLES_PER_INSTANT,
    WhatIfRequest,
    WhatIfTooSlow,
    policy_configuration,
    recorded_jobs,
    replay_policy,
    whatif_compare,
)

GPU = "nvidia.com/gpu"
TEAMS = [("t1", "research"), ("t2", "research"), ("t3", "research"), ("t4", "product"), ("t5", "product"), ("t6", None)]


def build() -> Cluster:
    """The pool, the policy and the recorded jobs (once; a later run with the same size reuses them)."""
    call_command("migrate", verbosity=0)
    cluster = Cluster.objects.filter(name="bench").first()
    if cluster is not None and Job.objects.filter(cluster=cluster).count() == ARGS.jobs:
        return cluster
    Job.objects.all().delete()
    QuotaLine.objects.all().delete()
    TeamQuota.objects.all().delete()
    Cohort.objects.all().delete()
    Device.objects.all().delete()
    Node.objects.all().delete()
    Cluster.objects.filter(name="bench").delete()
    now = timezone.now()
    cluster = Cluster.objects.create(name="bench")
    flavor, _ = ResourceFlavor.objects.get_or_create(name="h100", defaults={"node_labels": {"gpu": "h100"}})
    rc, _ = ResourceClass.objects.get_or_create(slug="h100", defaults={"name": "H100", "resource_name": GPU})
    ResourceClassFlavor.objects.get_or_create(resource_class=rc, flavor=flavor)
    for i in range(ARGS.nodes):
        node = Node.objects.create(
            cluster=cluster, name=f"n{i}", flavor=flavor, labels={"gpu": "h100"}, first_seen_at=now, last_seen_at=now
        )
        Device.objects.bulk_create(
            Device(node=node, key=f"n{i}-{d}", vendor="nvidia", resource_name=GPU, first_seen_at=now, last_seen_at=now)
            for d in range(8)
        )
    cohorts = {name: Cohort.objects.create(name=name) for name in ("research", "product")}
    per_team = ARGS.nodes * 8 // len(TEAMS)
    user, _ = get_user_model().objects.get_or_create(username="bench")
    teams = []
    for slug, cohort in TEAMS:
        team, _ = Team.objects.get_or_create(slug=slug, defaults={"name": slug.upper(), "namespace": slug})
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
    rng = random.Random(ARGS.seed)
    window = 14 * 86400
    mean_size, mean_run = 3.75, 4 * 3600
    total = ARGS.jobs
    jobs = []
    for i in range(total):
        submitted = now - timedelta(seconds=window * (1 - i / total) + rng.random() * 60)
        run = rng.uniform(600, 8 * 3600) * ARGS.load * ARGS.nodes * 8 * window / (total * mean_size * mean_run)
        start = submitted + timedelta(seconds=rng.uniform(0, 600))
        end = start + timedelta(seconds=run)
        done = end < now
        jobs.append(
            Job(
                team=teams[i % len(teams)],
                owner=user,
                cluster=cluster,
                name=f"j{i}",
                image="x",
                resource_class=rc,
                devices_per_pod=rng.choice((1, 2, 4, 8)),
                state="succeeded" if done else "running",
                submitted_at=submitted,
                queued_at=submitted,
                admitted_at=start,
                started_at=start,
                finished_at=end if done else None,
                state_changed_at=end if done else start,
            )
        )
    Job.objects.bulk_create(jobs, batch_size=5000)
    return cluster


def timed(label: str, fn, repeat: int = 2):
    """Best of ``repeat`` wall times, printed in ms (and the worst, when repeated)."""
    times, value = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t)
    worst = f"  (worst {max(times) * 1000:.1f} ms)" if repeat > 1 else ""
    print(f"{label:<72} {min(times) * 1000:9.1f} ms{worst}")
    return value


def main() -> None:
    """Build, then time each step and the admin request."""
    cluster = build()
    recorded = Job.objects.filter(cluster=cluster).count()
    print(f"pool: {ARGS.nodes * 8} GPUs on {ARGS.nodes} nodes; {recorded} recorded jobs")
    now = timezone.now()
    config, outcome = time_replay(cluster, now)
    quota = TeamQuota.objects.get(cluster_queue_name="t1")
    line = quota.lines.get()
    result = time_compare(cluster, config, quota, line, now)
    time_admin_preview(cluster, quota, line)
    print(f"replayed {result.jobs} jobs (+{result.carried_in} carried in); per team under the current policy:")
    for t in outcome.teams:
        p50 = (t.wait_p50_seconds or 0) / 60
        p90 = (t.wait_p90_seconds or 0) / 60
        util = (t.utilisation or 0) * 100
        print(
            f"  {t.cluster_queue}: jobs {t.jobs}, wait p50 {p50:.1f} min p90 {p90:.1f} min, utilisation {util:.0f}%, "
            f"borrowed {t.borrowed_device_hours:.0f} GPU-h, preemptions {t.preemptions}"
        )


def time_replay(cluster: Cluster, now):
    """Time loading the last 14 days of recorded jobs, reading the policy and one replay; (config, outcome)."""
    start, end = now - timedelta(days=14), now
    jobs, _ = timed("load recorded jobs (14 days)", lambda: recorded_jobs(cluster=cluster, start=start, end=end))
    config = timed("read the policy (policy_configuration)", lambda: policy_configuration(cluster=cluster))
    teams = {t.cluster_queue_name: t.team.name for t in TeamQuota.objects.select_related("team")}
    outcome = timed(
        "one replay through the engine",
        lambda: replay_policy(config=config, jobs=jobs, start=start.timestamp(), end=end.timestamp(), teams=teams),
    )
    return config, outcome


def time_compare(cluster: Cluster, config, quota: TeamQuota, line: QuotaLine, now):
    """Time ``whatif_compare`` for t1's doubled quota (returned) and for t1 reclaiming within its cohort."""
    with transaction.atomic():
        QuotaLine.objects.filter(pk=line.pk).update(nominal=str(int(line.nominal) * 2))
        proposed = policy_configuration(cluster=cluster)
        transaction.set_rollback(True)
    result = timed(
        "whatif_compare (load + two replays)",
        lambda: whatif_compare(cluster=cluster, current=config, proposed=proposed, request=WhatIfRequest(now=now)),
    )
    with transaction.atomic():
        TeamQuota.objects.filter(pk=quota.pk).update(reclaim_within_cohort="Any")
        reclaiming = policy_configuration(cluster=cluster)
        transaction.set_rollback(True)
    try:
        reclaim = timed(
            "whatif_compare, t1 reclaims within its cohort (preemptions)",
            lambda: whatif_compare(
                cluster=cluster, current=config, proposed=reclaiming, request=WhatIfRequest(now=now)
            ),
            repeat=1,
        )
    except WhatIfTooSlow as exc:
        print(f"whatif_compare, t1 reclaims within its cohort: {exc}")
    else:
        print(
            f"  preemptions under the reclaiming policy: {sum(t.preemptions for t in reclaim.proposed.teams)}; "
            f"instants where the engine did not settle within {MAX_CYCLES_PER_INSTANT} cycles: "
            f"{len(reclaim.proposed.unsettled)}"
        )
    return result


def teamquota_form_data(cluster: Cluster, quota: TeamQuota, line: QuotaLine) -> dict:
    """The admin change form of t1's TeamQuota, reclaiming within its cohort with its GPU quota doubled."""
    return {
        "team": quota.team_id,
        "cluster": cluster.pk,
        "cluster_queue_name": "t1",
        "cohort": quota.cohort_id,
        "queueing_strategy": "BestEffortFIFO",
        "within_cluster_queue": "Never",
        "reclaim_within_cohort": "Any",
        "borrow_within_cohort": "Never",
        "when_can_borrow": "MayStopSearch",
        "when_can_preempt": "TryNextFlavor",
        "fair_weight": "1",
        "stop_policy": "None",
        "lines-TOTAL_FORMS": "1",
        "lines-INITIAL_FORMS": "1",
        "lines-MIN_NUM_FORMS": "0",
        "lines-MAX_NUM_FORMS": "1000",
        "lines-0-id": line.pk,
        "lines-0-team_quota": quota.pk,
        "lines-0-flavor": line.flavor_id,
        "lines-0-flavor_order": 0,
        "lines-0-resource_name": GPU,
        "lines-0-nominal": str(int(line.nominal) * 2),
        "lines-0-borrowing_limit": line.borrowing_limit,
        "lines-0-lending_limit": "",
        "_save": "Save",
    }


def time_admin_preview(cluster: Cluster, quota: TeamQuota, line: QuotaLine) -> None:
    """Time the admin preview end to end: the POST that starts it, the worker's replay, the poll of the result."""
    admin, _ = get_user_model().objects.get_or_create(
        username="bench-admin", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(admin)
    data = teamquota_form_data(cluster, quota, line)

    enqueued: list[int] = []
    # As with a broker: the request records the preview and enqueues its replay; this script plays the worker.
    previews._enqueue = enqueued.append

    def ask():
        response = client.post(f"/admin/queues/teamquota/{quota.pk}/change/", data)
        if response.status_code != 302 or "/admin/policy/previews/" not in response["Location"]:
            raise SystemExit(f"the preview was not recorded: HTTP {response.status_code}")
        return response

    timed("admin request that starts a preview (POST, save rolled back, enqueued)", ask, repeat=5)
    preview_id = enqueued[-1]

    def replay():
        PolicyPreview.objects.filter(pk=preview_id).update(status=PolicyPreview.Status.QUEUED)
        return preview_replay.policy_preview_run(preview_id=preview_id)

    stored = timed("worker: replay of the stored preview (task body)", replay, repeat=1)
    if stored.status != PolicyPreview.Status.DONE:
        raise SystemExit(f"the preview failed: {stored.error}")

    def poll():
        response = client.get(f"/admin/policy/previews/{preview_id}/", headers={"HX-Request": "true"})
        if response.status_code != 286:
            raise SystemExit(f"the finished preview answered HTTP {response.status_code}")
        return response

    timed("poll of the finished preview (htmx fragment: chart + table)", poll, repeat=5)
    PolicyPreview.objects.all().delete()


if __name__ == "__main__":
    main()
