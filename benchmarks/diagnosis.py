"""Diagnosis at scale: wait reasons and ETAs for 1,000 / 10,000 pending jobs, and 100 job-page polls.

Builds a throwaway database (SQLite under var/ by default, or ``--database-url``) with one simulated cluster of
``--nodes`` nodes x 8 H100s, six teams in two cohorts, the pool full of running jobs and ``--pending`` pending
jobs (1/2/4/8 GPUs, runtimes 10 min to 8 h). Then, per size, prints CPU seconds of:

* the tick's wait reasons (``engine.settle`` and its ``pending`` reasons, the engine input given);
* the diagnosis of a state change: reasons and ETAs (p50/p90) of every pending job, from one forward replay,
  stored with the cluster's state version (``diagnosis.cluster_diagnosis_refresh``): the first one (every row
  new), then one with nothing changed (5 minutes later), after one more job is submitted and after a running job
  ends (rows written only where the verdict or ETA changed);
* the parts of a change apart: the engine input (``engine_context``), the reasons (``engine.explain_many``) and
  the replay of the jobs that wait (``engine.estimate_admissions``), each on an engine of its own — the refresh
  runs the last two on one engine;
* the job page's first view after the refresh (it computes that job's suggestions, bounded), then 100 polls of
  the live fragment (Django's test client) with no state change in between: engine constructions and CPU;
* ``--legacy-sample K``: K ETAs the way they were made before (one engine and one replay per job), with the
  per-job cost and what all pending jobs would take (extrapolated, as the old way is O(pending²)).

    .venv/bin/python benchmarks/diagnosis.py [--pending 1000 10000] [--nodes 75] [--legacy-sample 5]
"""

from __future__ import annotations

import argparse
import random
import time
from datetime import timedelta

from _setup import add_database_argument, setup_django


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pending", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--nodes", type=int, default=75)
    parser.add_argument("--polls", type=int, default=100)
    parser.add_argument("--legacy-sample", type=int, default=0, help="ETAs timed the old way (one replay each)")
    parser.add_argument("--seed", type=int, default=7)
    add_database_argument(parser, "bench_diagnosis.sqlite3")
    return parser.parse_args()


ARGS = parse_args()
setup_django(ARGS.database_url, fresh_sqlite=True)

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

from pools.models import Cluster, Device, Node, ResourceClass, ResourceClassFlavor, ResourceFlavor  # noqa: E402
from queues import diagnosis  # noqa: E402
from queues import engine as eng  # noqa: E402
from queues.engine import native, scheduler  # noqa: E402
from queues.engine.wait_codes import never_fits  # noqa: E402
from queues.engine_input import cluster_engine_input, ts  # noqa: E402
from queues.models import Cohort, Job, Membership, QuotaLine, Team, TeamQuota  # noqa: E402

GPU = "nvidia.com/gpu"
TEAMS = [("t1", "research"), ("t2", "research"), ("t3", "research"), ("t4", "product"), ("t5", "product"), ("t6", None)]


class EngineCounter:
    """Counts ``Engine`` constructions (every explain, settle, replay builds one) inside a ``with`` block."""

    def __init__(self) -> None:
        self.count = 0
        self._before = 0

    def __enter__(self) -> EngineCounter:
        self._before = scheduler.engines_built()
        return self

    def __exit__(self, *exc) -> None:
        self.count = scheduler.engines_built() - self._before


def build(pending: int):
    """A fresh pool full of running jobs plus ``pending`` pending jobs; returns (cluster, a user, a pending job)."""
    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)
    rng = random.Random(ARGS.seed)
    now = timezone.now()
    cluster = Cluster.objects.create(name="bench", backend=Cluster.Backend.SIMULATED)
    flavor = ResourceFlavor.objects.create(name="h100", node_labels={"gpu": "h100"})
    rc = ResourceClass.objects.create(slug="h100", name="H100", resource_name=GPU, allowed_counts=[1, 2, 4, 8])
    ResourceClassFlavor.objects.create(resource_class=rc, flavor=flavor)
    nodes = []
    for i in range(ARGS.nodes):
        node = Node.objects.create(
            cluster=cluster,
            name=f"n{i:03d}",
            flavor=flavor,
            labels={"gpu": "h100"},
            first_seen_at=now,
            last_seen_at=now,
        )
        Device.objects.bulk_create(
            Device(node=node, key=f"n{i}-{d}", vendor="nvidia", resource_name=GPU, first_seen_at=now, last_seen_at=now)
            for d in range(8)
        )
        nodes.append(node)
    cohorts = {name: Cohort.objects.create(name=name) for name in ("research", "product")}
    per_team = ARGS.nodes * 8 // len(TEAMS)
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
    # The pool is full: one 8-GPU job per node, each team within its quota, ending over the next 8 hours.
    for i, node in enumerate(nodes):
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
    watched = Job.objects.filter(cluster=cluster, state=Job.State.PENDING).order_by("pk")[pending // 2]
    return cluster, user, watched


def cpu(fn):
    """(value, CPU seconds of this process) of ``fn()``."""
    t = time.process_time()
    value = fn()
    return value, time.process_time() - t


def time_reasons(cluster) -> None:
    """The tick's reasons: settle the cluster and explain every pending workload (engine input given)."""
    inp = cluster_engine_input(cluster=cluster)
    now = ts(timezone.now())
    settled, seconds = cpu(lambda: eng.settle(inp.state, now, complete_evictions=False))
    print(f"  tick: settle + wait reasons of {len(settled.pending)} pending      {seconds:8.2f} CPU-s")


def time_parts(cluster) -> None:
    """The engine input, the reasons and the replay of one change, timed apart (each on an engine of its own)."""
    now = timezone.now()
    ctx, built = cpu(lambda: diagnosis.engine_context(cluster, now=now))
    pending = sorted(k for k, j in ctx.inp.jobs_by_key.items() if j.state == Job.State.PENDING)
    explained, explain_seconds = cpu(lambda: eng.explain_many(ctx.state, pending, ts(now)))
    needs = getattr(eng, "needs_replay", None) or _needs_replay
    waiting = [k for k in pending if needs(explained[k])]
    _, replay_seconds = cpu(
        lambda: eng.estimate_admissions(
            ctx.state,
            waiting,
            ts(now),
            ctx.end_times,
            horizon=ts(now + diagnosis.ETA_HORIZON),
            default_runtime=ctx.default_runtime,
        )
    )
    print(
        f"  a change, apart: input {built:.2f}, reasons {explain_seconds:.2f}, "
        f"replay of {len(waiting)} waiting {replay_seconds:.2f} CPU-s"
    )


def _needs_replay(explanation) -> bool:
    """What the refresh replays for (versions without ``engine.needs_replay``)."""
    reason = explanation.reason
    return not explanation.admissible and not (reason is not None and never_fits(reason.code))


def time_refresh(cluster) -> None:
    """Reasons and ETAs of every pending job from one replay, stored with the state version."""
    refresh = getattr(diagnosis, "cluster_diagnosis_refresh", None)
    if refresh is None:
        print("  diagnosis refresh (reasons + ETAs, one replay): not in this version")
        return
    with EngineCounter() as engines:
        result, seconds = cpu(lambda: refresh(cluster, now=timezone.now()))
    print(
        f"  diagnosis refresh: reasons + ETAs of {result.jobs} pending, {engines.count} engines "
        f"{seconds:8.2f} CPU-s (compute {result.compute_seconds:.2f} s, store {result.store_seconds:.2f} s)"
    )
    if not hasattr(result, "written"):
        return
    changes = (
        ("nothing changed, 5 min later", lambda: None, timedelta(minutes=5)),
        ("one more job submitted", lambda: _submit_one(cluster), timedelta()),
        ("a running job ends", lambda: _end_one(cluster), timedelta()),
    )
    for what, change, later in changes:
        change()  # a counted change: the state version moves
        result, seconds = cpu(lambda later=later: refresh(cluster, now=timezone.now() + later))
        inputs = getattr(result, "input_seconds", None)
        split = (
            f"input {inputs:.2f} s, reasons + replay {result.compute_seconds - inputs:.2f} s"
            if inputs
            else f"compute {result.compute_seconds:.2f} s"
        )
        pages = getattr(result, "pages", None)
        whole = f"{pages} pages" if pages is not None else f"{result.jobs} rows"
        written = f"{result.written} of {whole}"
        kept = getattr(result, "window_kept", None)
        replay = "" if kept is None else (", window kept" if kept else f", {result.replays} replay(s)")
        print(
            f"  after a change ({what}): {seconds:8.2f} CPU-s ({split}, store {result.store_seconds:.2f} s, "
            f"{written} written{replay})"
        )


def _submit_one(cluster) -> None:
    """One more pending job at the back of the queue (a save: the state version moves)."""
    job = Job.objects.filter(cluster=cluster, state=Job.State.PENDING).order_by("-pk").first()
    job.pk, job.name, job.k8s_name = None, "extra", ""
    job.submitted_at = job.queued_at = job.state_changed_at = timezone.now()
    job.save()


def _end_one(cluster) -> None:
    """The running job that would end first ends now (a save: the state version moves)."""
    job = Job.objects.filter(cluster=cluster, state=Job.State.RUNNING).order_by("sim_runtime_seconds").first()
    job.state, job.finished_at = Job.State.SUCCEEDED, timezone.now()
    job.save()


def time_polls(user, job) -> None:
    """The first view after the refresh (it computes the job's suggestions), then ``--polls`` polls, no change."""
    client = Client()
    client.force_login(user)
    url = f"/jobs/{job.pk}/"
    headers = {"HX-Request": "true", "HX-Trigger": "queues-job-live"}
    client.get("/jobs/")  # the views' modules imported before anything is timed
    with EngineCounter() as engines:
        response, seconds = cpu(lambda: client.get(url, headers=headers))
    assert response.status_code == 200, response.status_code
    print(f"  first job-page view after the refresh (its suggestions): {engines.count} engines {seconds:8.2f} CPU-s")
    polls = ARGS.polls
    with EngineCounter() as engines:
        _, seconds = cpu(lambda: [client.get(url, headers=headers) for _ in range(polls)])
    print(
        f"  {polls} job-page polls, no change: {engines.count} engines {seconds:8.2f} CPU-s "
        f"({seconds / polls * 1000:.1f} ms each)"
    )


def time_legacy(cluster, pending: int) -> None:
    """``--legacy-sample`` ETAs made one engine and one replay per job (the old way), extrapolated."""
    sample = ARGS.legacy_sample
    if not sample:
        return
    now = timezone.now()
    ctx = diagnosis.engine_context(cluster, now=now)
    keys = sorted(k for k, j in ctx.inp.jobs_by_key.items() if j.state == Job.State.PENDING)
    step = max(len(keys) // sample, 1)
    chosen = keys[::step][:sample]
    horizon = ts(now + diagnosis.ETA_HORIZON)

    def run():
        for key in chosen:
            eng.estimate_admission(
                ctx.state, key, ts(now), ctx.end_times, horizon=horizon, default_runtime=ctx.default_runtime
            )

    _, seconds = cpu(run)
    each = seconds / len(chosen)
    print(
        f"  legacy ETA (one replay per job): {each:.2f} CPU-s each over {len(chosen)}; "
        f"all {pending} pending ≈ {each * pending:,.0f} CPU-s"
    )


def main() -> None:
    """Build each size, then time reasons, the diagnosis of a change, the polls and the legacy ETAs."""
    print(native.describe())
    for pending in ARGS.pending:
        cluster, user, watched = build(pending)
        print(f"{pending} pending, {ARGS.nodes} nodes x 8 GPUs full of running jobs:")
        time_reasons(cluster)
        time_parts(cluster)
        time_refresh(cluster)
        time_polls(user, watched)
        time_legacy(cluster, pending)


if __name__ == "__main__":
    main()
