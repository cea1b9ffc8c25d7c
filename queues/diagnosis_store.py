"""Diagnoses stored per engine state version: computed once per change of a cluster, read by every poll.

* ``cluster_diagnosis_refresh``: the verdict (would it start now, else the primary reason), the ETA (p50 and p90)
  and the place in its queue of every pending job of a cluster, from the engine input kept in this process and
  brought up to date by the change (``queues.diagnosis_input``), one bounded replay that is skipped when the change
  cannot touch it (``queues.diagnosis_window``), stored as pages (``queues.diagnosis_pages``, ``DiagnosisPage``)
  under the cluster's state version (``pools.state_version``, on ``ClusterDiagnosis``), read *before* the engine
  input so that a result is never stored under a version newer than its data. Only pages whose content changed
  are written.
* ``stored_job_diagnosis``: one job's entry at the current version, or the last stored one (``stale``): one
  indexed read, whatever the length of the queue. Asking for a refresh when the version moved is
  ``queues.diagnosis_requests``'s (it sends the task).
* ``stored_suggestions``: the job page's suggestions, computed on its first view after a change (bounded, see
  ``queues.diagnosis_suggestions``) from the engine state the last refresh of this process replayed, or, in a
  process that has none, from the quota holders alone (what an explanation reads), and stored with their version.
* ``catalogue_estimates``: the catalogue cards' typical-job ETAs, cached per (team, class, count, priority).

``DIAGNOSIS_MAX_AGE`` bounds what a missed change could leave stale, and refreshes the ETAs of kubernetes-mode
clusters whose overdue jobs are assumed to end "within a minute from now".
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from pools.models import Cluster
from pools.state_version import state_changes_prune, state_version, state_versions
from queues.diagnosis_context import (
    EngineContext,
    Eta,
    Suggestion,
    Verdict,
    class_runtime_history,
    context_eta,
    engine_context,
    eta_without_replay,
    expected_end,
    expected_runtime,
    is_simulated,
)
from queues.diagnosis_input import KeptInput, engine_input_of, input_timing, kept_input
from queues.diagnosis_pages import (
    PageEntry,
    build_pages,
    extended_eta,
    page_digest,
    page_entry,
    page_estimates,
    page_of,
    with_estimates_before,
)
from queues.diagnosis_suggestions import suggestions_for
from queues.diagnosis_window import Window, diagnosis_window, replay_admissions
from queues.engine import model as m
from queues.engine.gc_pacing import paused_collections
from queues.engine_input import (
    HOLDING_STATES,
    EngineInput,
    cluster_engine_input,
    engine_job_workloads,
    ts,
    workload_key,
)
from queues.engine_jobs import PerCluster
from queues.models import (
    CatalogueEstimate,
    ClusterDiagnosis,
    DiagnosisPage,
    Job,
    JobSuggestions,
    Team,
    TeamQuota,
)

#: Stored diagnoses older than this are recomputed even when no change was counted.
DIAGNOSIS_MAX_AGE = timedelta(minutes=10)
#: Pages per statement when the refresh writes or deletes them.
STORE_BATCH = 100
#: The journal of state versions keeps this long (``pools.state_version``).
JOURNAL_KEEP = timedelta(hours=1)
#: An estimate moved "much" (the job page says what changed) past this much, or this share of the wait left.
ETA_MOVE = timedelta(minutes=30)
ETA_MOVE_SHARE = 0.5
#: Jobs given per queue to an explaining context: its first in the engine's order, the one behind it, and ties.
HEAD_TIES = 8

#: Per cluster, the last window this process replayed (the next refresh may keep it, suggestions read its state).
_WINDOWS: PerCluster[Window] = PerCluster()
#: When this process last pruned the journal.
_PRUNED = [0.0]


@dataclass
class RefreshResult:
    """What one refresh computed: the version, how many pending jobs, its cost, and the context it built.

    ``compute_seconds`` (CPU) includes ``input_seconds``, the engine input and its timing; ``written`` counts the
    pages written (rewritten or new), ``pages`` all of them.
    """

    version: int
    jobs: int
    compute_seconds: float
    store_seconds: float
    ctx: EngineContext | None = field(default=None, repr=False)
    written: int = 0
    pages: int = 0
    input_seconds: float = 0.0
    replays: int = 0
    window_kept: bool = False
    read_everything: bool = False


@paused_collections()  # tens of thousands of objects held to the end: no collection rescans them meanwhile
def cluster_diagnosis_refresh(cluster: Cluster, *, now: datetime | None = None) -> RefreshResult:
    """Verdicts, ETAs and places of every pending job of ``cluster``, stored with the state version."""
    now = now or timezone.now()
    versions = state_versions(cluster)  # before the state is read
    began = time.process_time()
    kept, change = kept_input(cluster, versions=versions, now=now)
    timing = input_timing(kept, cluster, now=now)
    built = time.process_time()
    previous = _WINDOWS.take(cluster.pk, None)  # type: ignore[arg-type]
    window = diagnosis_window(kept, cluster, timing, now=now, previous=previous, change=change)
    _WINDOWS.put(cluster.pk, window)
    ctx = _window_context(kept, window, cluster, timing=timing, now=now)
    pages = build_pages(kept, window, ctx)
    compute = time.process_time() - began
    started = time.process_time()
    pending = sum(len(q) for q in kept.queues.values())
    written = _store(
        cluster, pages, window=window, kept=kept, version=versions.total, now=now, compute=compute, jobs=pending
    )
    _prune_journal(now)
    return RefreshResult(
        version=versions.total,
        jobs=pending,
        compute_seconds=compute,
        store_seconds=time.process_time() - started,
        ctx=ctx,
        written=written,
        pages=len(pages),
        input_seconds=built - began,
        replays=0 if window.kept else window.replays,
        window_kept=window.kept,
        read_everything=change is None,
    )


def _window_context(kept: KeptInput, window: Window, cluster: Cluster, *, timing, now: datetime) -> EngineContext:  # type: ignore[no-untyped-def]
    """The engine context of the window's state (quota holders and the pending jobs it was given) at ``now``."""
    assert window.state is not None
    inp = engine_input_of(kept, window.state)
    return EngineContext(
        cluster=cluster,
        now=now,
        inp=inp,
        state=inp.state,
        end_times=timing.end_times,
        default_runtime=timing.default_runtime,
        runtimes=timing.history,
    )


def _prune_journal(now: datetime) -> None:
    """Forget journal steps older than ``JOURNAL_KEEP`` (at most once a minute per process)."""
    if time.monotonic() - _PRUNED[0] < 60:
        return
    _PRUNED[0] = time.monotonic()
    state_changes_prune(before=now - JOURNAL_KEEP)


def _store(
    cluster: Cluster,
    pages: dict[int, str],
    *,
    window: Window,
    kept: KeptInput,
    version: int,
    now: datetime,
    compute: float,
    jobs: int,
) -> int:
    """Write the pages whose content changed (by digest) and delete those left empty; move the cluster's row to
    ``version`` unless a refresh of a later version got there first (then nothing is written). A page written keeps,
    per job, the last estimate that differed much from the new one (``_estimates_before``). Returns the pages
    written."""
    digests = {number: page_digest(text) for number, text in pages.items()}
    with transaction.atomic():
        row, _ = ClusterDiagnosis.objects.select_for_update().get_or_create(
            cluster=cluster, defaults={"state_version": 0, "computed_at": now}
        )
        if row.state_version > version:
            return 0
        stored = dict(DiagnosisPage.objects.filter(cluster=cluster).values_list("page", "digest"))
        gone = [number for number in stored if number not in pages]
        changed = [number for number in sorted(pages) if stored.get(number) != digests[number]]
        for i in range(0, len(gone), STORE_BATCH):
            DiagnosisPage.objects.filter(cluster=cluster, page__in=gone[i : i + STORE_BATCH]).delete()
        before = _estimates_before(cluster, [n for n in changed if n in stored], pages, now=now)
        for i in range(0, len(changed), STORE_BATCH):
            batch = changed[i : i + STORE_BATCH]
            _upsert(
                cluster,
                [(n, with_estimates_before(pages[n], before.get(n, {})), digests[n]) for n in batch],
                version,
                now,
            )
        row.state_version = version
        row.computed_at = now
        row.jobs = jobs
        row.compute_seconds = compute
        row.window = _window_summary(kept, window)
        fields = ["state_version", "computed_at", "jobs", "compute_seconds", "window"]
        if row.requested_version <= version:  # what was asked for is done: the next view may ask again
            row.requested_at = None
            fields.append("requested_at")
        row.save(update_fields=fields)
    return len(changed)


def _estimates_before(
    cluster: Cluster, numbers: list[int], pages: dict[int, str], *, now: datetime
) -> dict[int, dict[str, dict]]:
    """For stored pages about to be rewritten: per page, per job id, the estimate the stored page held when the new
    one differs much from it (``_moved_much``), else the earlier estimate the stored page carried for it; one query per
    ``STORE_BATCH`` pages rewritten, none when no page existed."""
    out: dict[int, dict[str, dict]] = {}
    for i in range(0, len(numbers), STORE_BATCH):
        rows = DiagnosisPage.objects.filter(cluster=cluster, page__in=numbers[i : i + STORE_BATCH]).values_list(
            "page", "data", "computed_at"
        )
        for number, text, at in rows:
            old_data = json.loads(text)
            old, carried = page_estimates(old_data), old_data.get("b", {})
            found: dict[str, dict] = {}
            for job_id, (new_now, new_p50, _, _) in page_estimates(json.loads(pages[number])).items():
                was = old.get(job_id)
                if was is None:
                    continue
                old_now, old_p50, old_method, old_code = was
                if (old_now, old_p50) != (new_now, new_p50) and _moved_much(
                    (old_now, _at(old_p50)), (new_now, _at(new_p50)), now=now
                ):
                    found[job_id] = {
                        "starts_now": old_now,
                        "p50": _at(old_p50).isoformat() if old_p50 is not None else None,
                        "method": old_method,
                        "code": old_code,
                        "at": at.isoformat(),
                    }
                elif job_id in carried:
                    found[job_id] = carried[job_id]
            if found:
                out[number] = found
    return out


def _at(p50: float | None) -> datetime | None:
    return datetime.fromtimestamp(p50, tz=UTC) if p50 is not None else None


def _moved_much(old: tuple, new: tuple, *, now: datetime) -> bool:
    """Whether an estimate (starts now, p50) moved enough to say what changed: it was lost or found, "starts now"
    became a start later than ``ETA_MOVE`` (or the reverse), or its p50 moved by more than ``ETA_MOVE`` and
    ``ETA_MOVE_SHARE`` of the wait it had left."""
    (old_now, old_p50), (new_now, new_p50) = old, new
    if old_now or new_now:
        if old_now and new_now:
            return False
        other = new_p50 if old_now else old_p50
        return other is None or other - now > ETA_MOVE
    if (old_p50 is None) != (new_p50 is None):
        return True
    if old_p50 is None:
        return False
    wait = max((old_p50 - now).total_seconds(), 0.0)
    return abs((new_p50 - old_p50).total_seconds()) > max(ETA_MOVE.total_seconds(), ETA_MOVE_SHARE * wait)


def _window_summary(kept: KeptInput, window: Window) -> dict:
    """What the catalogue's typical jobs are estimated from (``typical_eta``): the window's start and end, and per
    queue its pending jobs and how many of them the window admitted."""
    queues = {
        f"{queue[0]}/{queue[1]}": [len(members), window.admitted_in_queue.get(queue, 0)]
        for queue, members in kept.queues.items()
    }
    return {
        "start": window.start,
        "origin": window.origin,
        "end": window.window_end,
        "granted": window.granted,
        "queues": queues,
    }


def _upsert(cluster: Cluster, pages: list[tuple[int, str, str]], version: int, now: datetime) -> None:
    """Insert or overwrite pages (number, JSON text, digest) in one ``INSERT … ON CONFLICT`` ``executemany``."""
    ops = connection.ops
    table = ops.quote_name(DiagnosisPage._meta.db_table)
    at = ops.adapt_datetimefield_value(now)
    sql = (
        f"INSERT INTO {table} (cluster_id, page, state_version, computed_at, digest, data) "
        "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (cluster_id, page) DO UPDATE SET "
        "state_version = EXCLUDED.state_version, computed_at = EXCLUDED.computed_at, digest = EXCLUDED.digest, "
        "data = EXCLUDED.data"
    )
    with connection.cursor() as cursor:
        cursor.executemany(sql, [(cluster.pk, n, version, at, digest, text) for n, text, digest in pages])


# --------------------------------------------------------------------------- reads


@dataclass
class StoredJobDiagnosis:
    """One job's stored entry, read at ``now``: at the cluster's current ``version``, or (``stale``) the last one
    stored while a refresh is on its way."""

    entry: PageEntry
    version: int
    now: datetime
    stale: bool = False

    @property
    def verdict(self):  # type: ignore[no-untyped-def]
        """The stored verdict (without the assignment's flavors and nodes, which the job page does not show)."""
        return self.entry.verdict

    @property
    def eta(self) -> Eta:
        """The stored ETA as shown at ``now``."""
        return self.entry.eta

    @property
    def position(self) -> tuple[int, int]:
        """(place, length) of the job's queue at the stored version."""
        return self.entry.position

    @property
    def eta_before(self) -> dict | None:
        """The last estimate that differed much from this one, and when it was held (None: none did)."""
        return self.entry.before


def _page_text(job: Job, *, version: int | None, now: datetime) -> tuple[str, dict] | None:
    """The JSON of the job's page and the cluster's window summary: at ``version`` (and young enough), or (None) the
    last stored (one query)."""
    pages = DiagnosisPage.objects.filter(cluster_id=job.cluster_id, page=page_of(job.pk))
    if version is not None:
        pages = pages.filter(
            cluster__diagnosis__state_version=version, cluster__diagnosis__computed_at__gt=now - DIAGNOSIS_MAX_AGE
        )
    return pages.values_list("data", "cluster__diagnosis__window").first()


def stored_job_diagnosis(job: Job, *, version: int, now: datetime, stale: bool = False) -> StoredJobDiagnosis | None:
    """The pending job's entry at ``version`` (``stale``: the last stored, whatever its version); None when there is
    none (not diagnosed yet, or not among the cluster's pending workloads)."""
    found = _page_text(job, version=None if stale else version, now=now)
    if found is None:
        return None
    text, window = found
    queue = f"{job.team.namespace}/{job.team.local_queue_name}"
    length = ((window or {}).get("queues", {}).get(queue) or [0])[0]
    entry = page_entry(text, job.pk, length=length, now=now)
    if entry is None:
        return None
    return StoredJobDiagnosis(entry=entry, version=version, now=now, stale=stale)


def explain_context(cluster: Cluster, *, now: datetime) -> EngineContext:
    """An engine context to explain a job that is not in the state as it is (a modified copy, a submission) and to
    estimate its ETA.

    With at most ``DIAGNOSIS_REPLAY_ADMISSIONS`` pending jobs (as the last refresh counted) it is the whole state
    (``engine_context``), and ETAs are replayed as for a stored job. With more, it holds the configuration, the
    nodes, the quota holders and each queue's first pending job: what an explanation reads of the other jobs is only
    that (a StrictFIFO queue's head decides for those behind it; ``queues.engine.reasons``), so the verdicts are
    those of the whole state, read without the queue; ETAs are then extended from the last refresh's window
    (``hypothetical_eta``).
    """
    pending = ClusterDiagnosis.objects.filter(cluster=cluster).values_list("jobs", flat=True).first()
    if pending is None or pending <= replay_admissions():
        return engine_context(cluster, now=now)
    base = cluster_engine_input(cluster=cluster, jobs=[])
    holders = list(Job.objects.filter(cluster=cluster, state__in=HOLDING_STATES).values_list("pk", flat=True))
    heads = []
    for team_id in {q.team_id for q in TeamQuota.objects.filter(cluster=cluster)}:
        first = (
            Job.objects.filter(cluster=cluster, team_id=team_id, state=Job.State.PENDING)
            .order_by("-priority", "queued_at", "pk")
            .values_list("pk", "priority", "queued_at")[:HEAD_TIES]
        )
        heads.extend(pk for pk, _, _ in first)  # the head, the one behind it (a copy of the head is explained
        # without the head), and ties on priority and queue time (the engine breaks those by key)
    jobs_by_key: dict[str, Job] = {}
    workloads = []
    end_times: dict[str, float] = {}
    built = engine_job_workloads(cluster, [*holders, *heads])
    history = {} if is_simulated(cluster) else class_runtime_history({job.resource_class_id for job, _ in built})
    for job, wl in built:
        runtime = expected_runtime(job, cluster=cluster, history=history) - job.run_seconds_banked
        workloads.append(dataclasses.replace(wl, runtime=max(float(runtime), 1.0)))
        jobs_by_key[wl.key] = job
        if wl.admission is not None:
            end_times[wl.key] = ts(expected_end(job, now=now, cluster=cluster, history=history))
    state = dataclasses.replace(base.state, workloads=tuple(workloads))
    return EngineContext(
        cluster=cluster,
        now=now,
        inp=EngineInput(state=state, jobs_by_key=jobs_by_key, nodes_by_name=base.nodes_by_name),
        state=state,
        end_times=end_times,
        default_runtime=float(settings.SIMULATED_DEFAULT_RUNTIME_SECONDS),
        runtimes=history,
        whole=False,
    )


def hypothetical_eta(ctx: EngineContext, workload: m.Workload, *, team: Team, verdict: Verdict) -> Eta:
    """The ETA of a job not in the state as it is: replayed on a whole state (``context_eta``); on an explaining
    one (``explain_context``), extended from the last refresh's window as for a job at the back of its queue."""
    early = eta_without_replay(verdict, now=ctx.now)
    if early is not None or ctx.whole:
        return early or context_eta(ctx, workload, team=team, verdict=verdict)
    summary = ClusterDiagnosis.objects.filter(cluster=ctx.cluster).values_list("window", flat=True).first() or {}
    return extended_eta(ctx, summary, queue=f"{workload.namespace}/{workload.queue_name}", team=team)


def stored_suggestions(job: Job, stored: StoredJobDiagnosis, *, now: datetime) -> list[Suggestion]:
    """The job's verified suggestions at the stored version: computed on the first call after a change, then read."""
    row = JobSuggestions.objects.filter(job_id=job.pk, state_version=stored.version).first()
    if row is not None:
        return [Suggestion(**s) for s in row.suggestions]
    ctx = explain_context(job.cluster, now=now)
    found = suggestions_for(ctx, job, team=job.team, exclude_key=workload_key(job))
    JobSuggestions.objects.update_or_create(
        job_id=job.pk,
        defaults={
            "state_version": stored.version,
            "computed_at": now,
            "suggestions": [
                {"kind": s.kind, "title": s.title, "message": s.message, "changes": _plain(s.changes)} for s in found
            ],
        },
    )
    return found


def _plain(changes: dict[str, object]) -> dict[str, object]:
    """Form changes as JSON values (a class by its slug, as the form takes it)."""
    return {k: (v if v is None or isinstance(v, str | int | float | bool) else str(v)) for k, v in changes.items()}


# --------------------------------------------------------------------------- catalogue


def eta_json(eta: Eta) -> dict:
    """An Eta as stored JSON."""
    return {
        "starts_now": eta.starts_now,
        "p50": eta.p50.isoformat() if eta.p50 else None,
        "p90": eta.p90.isoformat() if eta.p90 else None,
        "method": eta.method,
        "samples": eta.samples,
        "extended": eta.extended,
    }


def eta_from_json(data: dict) -> Eta:
    """A stored Eta back."""
    return Eta(
        starts_now=bool(data.get("starts_now")),
        p50=datetime.fromisoformat(data["p50"]) if data.get("p50") else None,
        p90=datetime.fromisoformat(data["p90"]) if data.get("p90") else None,
        method=data.get("method", ""),
        samples=int(data.get("samples", 0)),
        extended=bool(data.get("extended")),
    )


def catalogue_estimates(
    cluster: Cluster,
    keys: Iterable[str],
    compute: Callable[[EngineContext, list[str]], dict[str, Eta]],
    *,
    now: datetime,
) -> dict[str, Eta]:
    """The stored ETA of each key at the current version; ``compute(ctx, missing_keys)`` makes the missing ones.

    ``compute`` gets one engine context for all the missing keys (``explain_context``) and returns {key: Eta}.
    """
    keys = list(keys)
    version = state_version(cluster)
    rows = CatalogueEstimate.objects.filter(
        cluster=cluster, key__in=keys, state_version=version, computed_at__gt=now - DIAGNOSIS_MAX_AGE
    )
    out = {row.key: eta_from_json(row.eta) for row in rows}
    missing = [k for k in keys if k not in out]
    if not missing:
        return out
    made = compute(explain_context(cluster, now=now), missing)
    CatalogueEstimate.objects.bulk_create(
        [
            CatalogueEstimate(cluster=cluster, key=k, state_version=version, computed_at=now, eta=eta_json(eta))
            for k, eta in made.items()
        ],
        update_conflicts=True,
        unique_fields=["cluster", "key"],
        update_fields=["state_version", "computed_at", "eta"],
    )
    out.update(made)
    return out
