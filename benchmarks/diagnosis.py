"""Diagnosis at scale: reasons, ETAs and places in queue of 10,000 to 100,000 pending jobs, and the job page's polls.

Per ``--pending`` size, builds a throwaway database (SQLite under var/ by default, or ``--database-url``) with one
simulated cluster of ``--nodes`` nodes x 8 H100s full of running jobs, six teams in two cohorts and the pending
jobs (``_worlds.queue_world``, bulk-created), then measures, in a fresh process (so that its peak memory is the
diagnosis's, not the set-up's), CPU seconds of:

* the first refresh (``diagnosis.cluster_diagnosis_refresh``: every page of the stored diagnosis new; the engine
  input read in full);
* a refresh after each change, as the portal meets them: nothing changed (5 minutes later, the stored diagnosis
  older than its maximum age), one more job submitted, a running job ends — with its parts (input, reasons and
  replay, store), the pages written, and whether the replay ran or the window was kept;
* the process's peak memory (resident set);
* the job page's first view after the refresh (its suggestions, bounded), then ``--polls`` polls of its live
  fragment with nothing changed, as a browser makes them (``If-None-Match``: 304 while nothing changed) and, for
  comparison, without it (the fragment rendered each time): CPU and SQL queries per poll, engines built;
* ``--parts``: the same change computed the way a change was before (the engine input of every job, reasons of
  every pending job and one replay of all of them to the horizon, each on an engine of its own) and the tick's
  reasons (``engine.settle``);
* ``--legacy-sample K``: K ETAs the way they were made at first (one engine and one replay per job).

    .venv/bin/python benchmarks/diagnosis.py --pending 10000 50000 100000
    PORTAL_ENGINE_PURE=1 .venv/bin/python benchmarks/diagnosis.py --pending 10000     # the engine as plain Python
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import time
from datetime import timedelta

from _setup import add_database_argument, setup_django


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pending", type=int, nargs="+", default=[10000])
    parser.add_argument("--nodes", type=int, default=75)
    parser.add_argument("--polls", type=int, default=100)
    parser.add_argument("--parts", action="store_true", help="also time a change computed the way it was before")
    parser.add_argument("--legacy-sample", type=int, default=0, help="ETAs timed the old way (one replay each)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)  # the measuring child
    add_database_argument(parser, "bench_diagnosis.sqlite3")
    return parser.parse_args()


ARGS = parse_args()
setup_django(ARGS.database_url, fresh_sqlite=not ARGS.measure)

from _worlds import queue_world  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

from pools.models import Cluster  # noqa: E402
from queues import diagnosis  # noqa: E402
from queues import engine as eng  # noqa: E402
from queues.engine import native, scheduler  # noqa: E402
from queues.engine_input import cluster_engine_input, ts  # noqa: E402
from queues.models import Job  # noqa: E402


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


class QueryCounter:
    """Counts the SQL statements run inside a ``with`` block."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        self.count += 1
        return execute(sql, params, many, context)

    def __enter__(self) -> QueryCounter:
        self._wrapped = connection.execute_wrapper(self)
        self._wrapped.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._wrapped.__exit__(*exc)


def cpu(fn):
    """(value, CPU seconds of this process) of ``fn()``."""
    t = time.process_time()
    value = fn()
    return value, time.process_time() - t


class GcTimer:
    """CPU seconds spent in the cyclic garbage collector while installed (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._began = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._began = time.process_time()
        else:
            self.seconds += time.process_time() - self._began


GC = GcTimer()


def peak_mb() -> float:
    """This process's peak resident set, MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def line(what: str, result, seconds: float) -> None:  # type: ignore[no-untyped-def]
    """One refresh's figures."""
    replay = "window kept" if result.window_kept else f"{result.replays} replay(s)"
    read = "input read in full" if result.read_everything else "input brought up to date"
    print(
        f"  {what}: {seconds:6.2f} CPU-s (input {result.input_seconds:.2f}, reasons + replay + pages "
        f"{result.compute_seconds - result.input_seconds:.2f}, store {result.store_seconds:.2f}; "
        f"{result.written} of {result.pages} pages written, {replay}, {read}; cyclic GC {result.gc_seconds:.2f})"
    )


def time_refreshes(cluster) -> None:
    """The first refresh, then one after each change."""
    with EngineCounter() as engines:
        result, seconds = timed_refresh(cluster, timezone.now())
    line(f"first refresh ({result.jobs} pending, {engines.count} engine(s))", result, seconds)
    changes = (
        ("nothing changed, 5 min later", lambda: None, timedelta(minutes=5)),
        ("one more job submitted", lambda: _submit_one(cluster), timedelta()),
        ("a running job ends", lambda: _end_one(cluster), timedelta()),
    )
    for what, change, later in changes:
        change()  # a counted change: the state version moves
        result, seconds = timed_refresh(cluster, timezone.now() + later)
        line(f"a change ({what})", result, seconds)
    print(f"  peak memory of this process: {peak_mb():.0f} MB")


def timed_refresh(cluster, now):  # type: ignore[no-untyped-def]
    """(result, CPU seconds) of one refresh, the collector's share on the result as ``gc_seconds``."""
    before = GC.seconds
    result, seconds = cpu(lambda: diagnosis.cluster_diagnosis_refresh(cluster, now=now))
    result.gc_seconds = GC.seconds - before
    return result, seconds


def _submit_one(cluster) -> None:
    """One more pending job at the back of the queue (a save: the state version moves, the journal names it)."""
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
    """The first view after the refresh (it computes the job's suggestions), then polls with nothing changed."""
    client = Client()
    client.force_login(user)
    url = f"/jobs/{job.pk}/"
    headers = {"HX-Request": "true", "HX-Trigger": "queues-job-live"}
    client.get("/jobs/")  # the views' modules imported before anything is timed
    with EngineCounter() as engines, QueryCounter() as queries:
        response, seconds = cpu(lambda: client.get(url))
    assert response.status_code == 200, response.status_code
    print(
        f"  first job-page view after the refresh (its suggestions): {seconds * 1000:6.1f} ms CPU, "
        f"{queries.count} queries, {engines.count} engine(s)"
    )
    polls = ARGS.polls
    for label, conditional in (("as a browser polls (If-None-Match)", True), ("rendered each time", False)):
        tag = client.get(url, headers=headers)["ETag"]
        asked = {**headers, "If-None-Match": tag} if conditional else headers
        with EngineCounter() as engines, QueryCounter() as queries:
            answers, seconds = cpu(lambda a=asked: [client.get(url, headers=a).status_code for _ in range(polls)])
        statuses = set(answers)
        print(
            f"  {polls} polls of the live fragment, nothing changed, {label}: {seconds / polls * 1000:5.1f} ms CPU "
            f"and {queries.count / polls:.1f} queries each, {engines.count} engines, answers {sorted(statuses)}"
        )


def time_parts(cluster) -> None:
    """A change the way it was computed before: every job's input, every pending job's reasons, one full replay."""
    now = timezone.now()
    ctx, built = cpu(lambda: diagnosis.engine_context(cluster, now=now))
    pending = sorted(k for k, j in ctx.inp.jobs_by_key.items() if j.state == Job.State.PENDING)
    explained, explain_seconds = cpu(lambda: eng.explain_many(ctx.state, pending, ts(now)))
    waiting = [k for k in pending if eng.needs_replay(explained[k])]
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
        f"  before, apart: input of every job {built:.2f}, reasons {explain_seconds:.2f}, "
        f"full replay of {len(waiting)} waiting {replay_seconds:.2f} CPU-s"
    )
    inp = cluster_engine_input(cluster=cluster)
    settled, seconds = cpu(lambda: eng.settle(inp.state, ts(now), complete_evictions=False))
    print(f"  tick: settle + wait reasons of {len(settled.pending)} pending: {seconds:.2f} CPU-s")


def time_legacy(cluster, pending: int) -> None:
    """``--legacy-sample`` ETAs made one engine and one replay per job (the first way), extrapolated."""
    sample = ARGS.legacy_sample
    if not sample:
        return
    now = timezone.now()
    ctx = diagnosis.engine_context(cluster, now=now)
    keys = sorted(k for k, j in ctx.inp.jobs_by_key.items() if j.state == Job.State.PENDING)
    chosen = keys[:: max(len(keys) // sample, 1)][:sample]
    horizon = ts(now + diagnosis.ETA_HORIZON)

    def run():
        for key in chosen:
            eng.estimate_admission(
                ctx.state, key, ts(now), ctx.end_times, horizon=horizon, default_runtime=ctx.default_runtime
            )

    _, seconds = cpu(run)
    each = seconds / len(chosen)
    print(
        f"  legacy ETA (one replay per job): {each:.2f} CPU-s each; all {pending} pending ≈ {each * pending:,.0f} CPU-s"
    )


def measure() -> None:
    """The measuring child: the database is built."""
    cluster = Cluster.objects.get(name="bench")
    world = json.loads(sys.stdin.read())
    user = Job.objects.get(pk=world["watched"]).owner
    watched = Job.objects.get(pk=world["watched"])
    time_refreshes(cluster)
    time_polls(user, watched)
    if ARGS.parts:
        time_parts(cluster)
    time_legacy(cluster, world["pending"])


def main() -> None:
    """Build each size, then measure it in a fresh process."""
    if ARGS.measure:
        measure()
        return
    print(native.describe())
    for pending in ARGS.pending:
        started = time.perf_counter()
        world = queue_world(pending=pending, nodes=ARGS.nodes, seed=ARGS.seed)
        print(
            f"{pending} pending, {ARGS.nodes} nodes x 8 GPUs full of running jobs ({connection.vendor}; set up in "
            f"{time.perf_counter() - started:.0f} s):",
            flush=True,
        )
        argv = [sys.executable, __file__, "--measure", "--database-url", ARGS.database_url, "--polls", str(ARGS.polls)]
        argv += ["--parts"] if ARGS.parts else []
        argv += ["--legacy-sample", str(ARGS.legacy_sample)]
        connection.close()
        subprocess.run(argv, input=json.dumps({"watched": world.watched.pk, "pending": pending}), text=True, check=True)


if __name__ == "__main__":
    main()
