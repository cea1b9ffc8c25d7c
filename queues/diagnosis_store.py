"""Diagnoses stored per engine state version: computed once per change of a cluster, read by every poll.

* ``cluster_diagnosis_refresh``: the verdict (would it start now, else the primary reason) of every pending job
  of a cluster and all their ETAs (p50 and p90), from one engine: one explanation per queue and shape, and ONE
  forward replay (``engine.diagnose_many``). Stored as ``JobDiagnosis`` rows under the cluster's state version
  (``pools.state_version``, on ``ClusterDiagnosis``), read *before* the engine input so that a result is never
  stored under a version newer than its data. What a row stores does not move with the clock (the p50 as a
  time, the p90 as its spread), so a change rewrites only the rows whose verdict or ETA changed.
* ``job_stored_diagnosis``: the row of one job at the current version, refreshing the cluster's rows first when
  the version moved (or the refresh is older than ``DIAGNOSIS_MAX_AGE``): between changes a poll costs two
  indexed reads and no engine run.
* ``stored_suggestions``: the job page's suggestions, computed on its first view after a change (bounded, see
  ``queues.diagnosis_suggestions``) and kept on the row with their version.
* ``catalogue_estimates``: the catalogue cards' typical-job ETAs, cached per (team, class, count, priority).

``DIAGNOSIS_MAX_AGE`` bounds what a missed change could leave stale, and refreshes the ETAs of kubernetes-mode
clusters whose overdue jobs are assumed to end "within a minute from now".
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection, models, transaction
from django.utils import timezone

from pools.models import Cluster
from pools.state_version import state_version
from queues import engine
from queues.diagnosis_context import (
    ETA_HORIZON,
    EngineContext,
    Eta,
    Suggestion,
    Verdict,
    context_levels,
    engine_context,
    eta_at,
    eta_without_replay,
    flavor_labels,
    verdict_of,
)
from queues.diagnosis_suggestions import suggestions_for
from queues.engine.gc_pacing import paused_collections
from queues.engine_input import ts, workload_key
from queues.engine_jobs import PerCluster
from queues.models import CatalogueEstimate, ClusterDiagnosis, Job, JobDiagnosis

#: Stored diagnoses older than this are recomputed even when no change was counted.
DIAGNOSIS_MAX_AGE = timedelta(minutes=10)
#: The stored verdict and ETA, in the order of ``_content``: nothing that moves with the time of the refresh.
_CONTENT_FIELDS = (
    "admissible",
    "preempting",
    "code",
    "message",
    "kueue_message",
    "details",
    "eta_starts_now",
    "eta_p50",
    "eta_spread_floor",
    "eta_spread_share",
    "eta_method",
    "eta_samples",
)
#: Rows per statement when the refresh writes or deletes rows.
STORE_BATCH = 500
#: An estimate moved "much" (the page says what changed) past this much, or this share of the wait left.
ETA_MOVE = timedelta(minutes=30)
ETA_MOVE_SHARE = 0.5
#: Per cluster (the last ones refreshed in this process): job id → (its row's content, the digest).
_DIGESTS: PerCluster[dict[int, tuple[tuple, str]]] = PerCluster()


@dataclass
class RefreshResult:
    """What one refresh computed: the version, how many pending jobs, its cost, and the context it built.

    ``compute_seconds`` (CPU) includes ``input_seconds``, the engine input and its context.
    """

    version: int
    jobs: int
    compute_seconds: float
    store_seconds: float
    ctx: EngineContext | None = field(default=None, repr=False)
    written: int = 0  # rows whose verdict or ETA changed (or new), written out
    input_seconds: float = 0.0


@paused_collections()  # tens of thousands of objects held to the end: no collection rescans them meanwhile
def cluster_diagnosis_refresh(
    cluster: Cluster, *, now: datetime | None = None, version: int | None = None
) -> RefreshResult:
    """Verdicts and ETAs of every pending job of ``cluster`` (one engine, one replay), stored with the version."""
    now = now or timezone.now()
    version = state_version(cluster) if version is None else version  # before the state is read
    began = time.process_time()
    ctx = engine_context(cluster, now=now)
    pending = sorted(key for key, job in ctx.inp.jobs_by_key.items() if job.state == Job.State.PENDING)
    built = time.process_time()
    found = engine.diagnose_many(
        ctx.state,
        pending,
        ts(now),
        ctx.end_times,
        horizon=ts(now + ETA_HORIZON),
        default_runtime=ctx.default_runtime,
    )
    labels, levels = flavor_labels(ctx), context_levels(ctx)
    verdicts = {key: verdict_of(found.explanations[key], labels, levels) for key in pending}
    etas: dict[str, Eta] = {}
    for key in pending:
        early = eta_without_replay(verdicts[key], now=now)
        if early is not None:
            etas[key] = early
        else:
            etas[key] = eta_at(ctx, found.admitted_at[key], team=ctx.inp.jobs_by_key[key].team)
    compute = time.process_time() - began
    started = time.process_time()
    written = _store(cluster, ctx, pending, verdicts, etas, version=version, now=now, compute=compute)
    return RefreshResult(
        version=version,
        jobs=len(pending),
        compute_seconds=compute,
        store_seconds=time.process_time() - started,
        ctx=ctx,
        written=written,
        input_seconds=built - began,
    )


def _store(
    cluster: Cluster,
    ctx: EngineContext,
    pending: list[str],
    verdicts: dict[str, Verdict],
    etas: dict[str, Eta],
    *,
    version: int,
    now: datetime,
    compute: float,
) -> int:
    """Write the refresh: only the rows whose verdict or ETA changed (by their digest) or that are new are written
    (their number is returned), rows of jobs no longer pending go, and the cluster's row moves to ``version``.
    """
    fresh: dict[int, tuple[str, tuple]] = {}
    # A content equal to the job's at the last refresh of this process has its digest: no repr and hash of every row.
    previous = _DIGESTS.take(cluster.pk, {})
    for key in pending:
        content = _content(verdicts[key], etas[key])
        pk = ctx.inp.jobs_by_key[key].pk
        kept = previous.get(pk)
        fresh[pk] = (kept[1] if kept is not None and kept[0] == content else _digest(content), content)
    _DIGESTS.put(cluster.pk, {pk: (content, digest) for pk, (digest, content) in fresh.items()})
    stored = dict(JobDiagnosis.objects.filter(job__cluster=cluster).values_list("job_id", "digest"))
    gone = [pk for pk in stored if pk not in fresh]
    rewrite = [pk for pk, (digest, _) in fresh.items() if stored.get(pk) != digest]
    before = _estimates_before([pk for pk in rewrite if pk in stored], fresh, now=now)
    changed = [(pk, version, now, None, None, fresh[pk][0], before.get(pk), *fresh[pk][1]) for pk in rewrite]
    with transaction.atomic():
        for i in range(0, len(gone), STORE_BATCH):
            JobDiagnosis.objects.filter(job_id__in=gone[i : i + STORE_BATCH]).delete()
        for i in range(0, len(changed), STORE_BATCH):
            _upsert(changed[i : i + STORE_BATCH])
        ClusterDiagnosis.objects.update_or_create(
            cluster=cluster,
            defaults={"state_version": version, "computed_at": now, "jobs": len(fresh), "compute_seconds": compute},
        )
    return len(changed)


def _estimates_before(pks: list[int], fresh: dict[int, tuple[str, tuple]], *, now: datetime) -> dict[int, dict]:
    """For rows about to be rewritten: the estimate they held when the new one differs much from it (else the
    earlier estimate they carried); one query per ``STORE_BATCH`` rows rewritten, none when nothing existed."""
    out: dict[int, dict] = {}
    starts, p50 = _CONTENT_FIELDS.index("eta_starts_now"), _CONTENT_FIELDS.index("eta_p50")
    for i in range(0, len(pks), STORE_BATCH):
        rows = JobDiagnosis.objects.filter(job_id__in=pks[i : i + STORE_BATCH]).values_list(
            "job_id", "eta_starts_now", "eta_p50", "eta_method", "code", "computed_at", "eta_before"
        )
        for pk, old_starts, old_p50, old_method, old_code, at, carried in rows:
            new = fresh[pk][1]
            if _moved_much((old_starts, old_p50), (new[starts], new[p50]), now=now):
                out[pk] = {
                    "starts_now": old_starts,
                    "p50": old_p50.isoformat() if old_p50 else None,
                    "method": old_method,
                    "code": old_code,
                    "at": at.isoformat(),
                }
            elif carried:
                out[pk] = carried
    return out


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


def _digest(content: tuple) -> str:
    """The digest of a row's content (``_content``): a changed digest rewrites the row."""
    return hashlib.blake2b(repr(content).encode(), digest_size=16).hexdigest()


def _content(verdict: Verdict, eta: Eta) -> tuple:
    """What a row stores of a verdict and an ETA, in ``_CONTENT_FIELDS`` order (its digest decides a rewrite).

    Nothing here depends on when the refresh ran: "starts now" keeps no time, an estimate its p50 (a time the
    replay found) and the p90's spread, which ``Eta.seen_at`` turns into a p90 when the row is read.
    """
    return (
        verdict.admissible,
        bool(verdict.preemption_targets),
        verdict.code,
        verdict.message,
        verdict.kueue_message,
        verdict.details,
        eta.starts_now,
        None if eta.starts_now else eta.p50,
        eta.spread_floor,
        eta.spread_share,
        eta.method,
        eta.samples,
    )


#: The columns ``_upsert`` writes, in the order of its rows.
_UPSERT_FIELDS = (
    "job",
    "state_version",
    "computed_at",
    "suggestions",
    "suggestions_version",
    "digest",
    "eta_before",
    *_CONTENT_FIELDS,
)


def _upsert(rows: list[tuple]) -> None:
    """Insert or overwrite ``JobDiagnosis`` rows (values in ``_UPSERT_FIELDS`` order) in one ``executemany``.

    ``bulk_create(update_conflicts=True)`` spends about 0.1 ms of Python per row building the statement (1 s at
    10,000 rows); here each value goes through the backend's own adapter for its column (datetimes, JSON) and one
    ``INSERT … ON CONFLICT (job_id) DO UPDATE`` statement is sent for the batch (SQLite and PostgreSQL both).
    """
    if not rows:
        return
    ops = connection.ops
    fields = [JobDiagnosis._meta.get_field(name) for name in _UPSERT_FIELDS]
    adapters = []
    for f in fields:
        if isinstance(f, models.DateTimeField):
            adapters.append(ops.adapt_datetimefield_value)
        elif isinstance(f, models.JSONField):
            adapters.append(functools.partial(_adapt_json, encoder=f.encoder))
        else:
            adapters.append(None)
    params = [
        [v if adapt is None or v is None else adapt(v) for v, adapt in zip(row, adapters, strict=True)] for row in rows
    ]
    columns = [ops.quote_name(f.column) for f in fields]
    sql = (
        f"INSERT INTO {ops.quote_name(JobDiagnosis._meta.db_table)} ({', '.join(columns)}) "
        f"VALUES ({', '.join(['%s'] * len(columns))}) "
        f"ON CONFLICT ({columns[0]}) DO UPDATE SET {', '.join(f'{c} = EXCLUDED.{c}' for c in columns[1:])}"
    )
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)


def _adapt_json(value: object, *, encoder) -> object:  # type: ignore[no-untyped-def]
    return connection.ops.adapt_json_value(value, encoder)


@dataclass
class StoredJobDiagnosis:
    """One job's stored row at the current version, read at ``now``, and the engine context when this call had to
    build one."""

    row: JobDiagnosis
    version: int
    now: datetime
    ctx: EngineContext | None = None

    @property
    def verdict(self) -> Verdict:
        """The stored verdict (without the assignment's flavors and nodes, which the job page does not show)."""
        row = self.row
        return Verdict(
            admissible=row.admissible,
            code=row.code,
            message=row.message,
            kueue_message=row.kueue_message,
            details=dict(row.details or {}),
            preemption_targets=list((row.details or {}).get("victims", [])) if row.preempting else [],
        )

    @property
    def eta_before(self) -> dict | None:
        """The last estimate that differed much from this one, and when it was made (None: none did)."""
        return self.row.eta_before

    @property
    def eta(self) -> Eta:
        """The stored ETA as shown at ``now`` (its p90 derived from the stored spread)."""
        row = self.row
        return Eta(
            starts_now=row.eta_starts_now,
            p50=row.eta_p50,
            method=row.eta_method,
            samples=row.eta_samples,
            spread_floor=row.eta_spread_floor,
            spread_share=row.eta_spread_share,
        ).seen_at(self.now)


def _current_row(job: Job, *, version: int, now: datetime) -> JobDiagnosis | None:
    """The job's row when its cluster's stored diagnoses are at ``version`` and young enough (one query)."""
    return JobDiagnosis.objects.filter(
        job=job,
        job__cluster__diagnosis__state_version=version,
        job__cluster__diagnosis__computed_at__gt=now - DIAGNOSIS_MAX_AGE,
    ).first()


def job_stored_diagnosis(job: Job, *, now: datetime) -> StoredJobDiagnosis | None:
    """The pending job's verdict and ETA at the cluster's current state version (refreshing the cluster if needed).

    None when the job is not among the cluster's pending workloads even after a refresh.
    """
    version = state_version(job.cluster_id)
    row = _current_row(job, version=version, now=now)
    if row is not None:
        return StoredJobDiagnosis(row=row, version=version, now=now)
    result = cluster_diagnosis_refresh(job.cluster, now=now, version=version)
    row = _current_row(job, version=version, now=now)
    return StoredJobDiagnosis(row=row, version=version, now=now, ctx=result.ctx) if row is not None else None


def stored_suggestions(job: Job, stored: StoredJobDiagnosis, *, now: datetime) -> list[Suggestion]:
    """The job's verified suggestions at the stored version: computed on the first call after a change, then read."""
    row = stored.row
    if row.suggestions is not None and row.suggestions_version == stored.version:
        return [Suggestion(**s) for s in row.suggestions]
    ctx = stored.ctx or engine_context(job.cluster, now=now)
    found = suggestions_for(ctx, job, team=job.team, exclude_key=workload_key(job))
    row.suggestions = [
        {"kind": s.kind, "title": s.title, "message": s.message, "changes": _plain(s.changes)} for s in found
    ]
    row.suggestions_version = stored.version
    JobDiagnosis.objects.filter(job_id=row.job_id, digest=row.digest).update(
        suggestions=row.suggestions, suggestions_version=stored.version
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
    }


def eta_from_json(data: dict) -> Eta:
    """A stored Eta back."""
    return Eta(
        starts_now=bool(data.get("starts_now")),
        p50=datetime.fromisoformat(data["p50"]) if data.get("p50") else None,
        p90=datetime.fromisoformat(data["p90"]) if data.get("p90") else None,
        method=data.get("method", ""),
        samples=int(data.get("samples", 0)),
    )


def catalogue_estimates(cluster: Cluster, keys: Iterable[str], compute, *, now: datetime) -> dict[str, Eta]:
    """The stored ETA of each key at the current version; ``compute(ctx, missing_keys)`` makes the missing ones.

    ``compute`` gets one engine context for all the missing keys and returns {key: Eta}.
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
    made = compute(engine_context(cluster, now=now), missing)
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
