"""Validators (HTTP ETags) of the polled fragments: what a poll reads to answer "not modified" without rendering.

An open job page polls its live fragment every 5 seconds, and hundreds of pages may be open. The fragment is sent
with an ETag (``Cache-Control: private, no-cache``), so the browser asks again with ``If-None-Match``; while the
tag holds, the answer is a bodiless 304 and the browser keeps what it shows. A tag is read in one indexed query
(a second one, and the permission check, only for the roles that see every team), whatever the queue, and covers:

* what must show at once: every column of the job (state, wait reason, times…), its last timeline event, the
  cluster's stored diagnosis (version and time, so a refresh shows), the cluster's engine state version (so the
  first poll after a change renders, and asks for the refresh), the cluster's sync times (an unreachable cluster),
  the job's idle negotiation and stored suggestions, and who asks (a member of its team sees actions);
* everything else (a renamed class, a cost that grows with time, "since 3 min" and the other clock-relative
  words) at most ``LIVE_CLOCK_SECONDS`` late: the time, to that many seconds, is part of the tag.

The query is written in SQL: building it through the ORM cost more than the rest of the poll (≈ 3 ms of Python
for 60 columns and five joins, against ≈ 0.2 ms to run it).
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import connection

from pools.models import Cluster, EngineStateVersion
from queues.models import ClusterDiagnosis, Job, JobEvent, JobIdle, JobSuggestions, Membership
from queues.visibility import sees_every_team

#: What moves with the clock on a live fragment is redrawn at least this often (seconds).
LIVE_CLOCK_SECONDS = 30


def _tag_sql(*, member: bool) -> str:
    """The tag's query: the job row and what else the fragment must show at once (see the module docstring)."""
    qn = connection.ops.quote_name
    job, event, cd = qn(Job._meta.db_table), qn(JobEvent._meta.db_table), qn(ClusterDiagnosis._meta.db_table)
    cluster, idle, sugg = qn(Cluster._meta.db_table), qn(JobIdle._meta.db_table), qn(JobSuggestions._meta.db_table)
    esv, membership = qn(EngineStateVersion._meta.db_table), qn(Membership._meta.db_table)
    where = f"j.id = %s AND EXISTS (SELECT 1 FROM {membership} m WHERE m.team_id = j.team_id AND m.user_id = %s)"
    return (
        f"SELECT j.*, (SELECT MAX(e.id) FROM {event} e WHERE e.job_id = j.id), d.state_version, d.computed_at, "
        f"c.last_synced_at, c.last_sync_error_at, i.phase, i.changed_at, i.snoozed_at, s.state_version, "
        f"(SELECT SUM(v.version) FROM {esv} v WHERE v.scope = 'global' OR v.scope = 'cluster:' || j.cluster_id) "
        f"FROM {job} j JOIN {cluster} c ON c.id = j.cluster_id "
        f"LEFT JOIN {cd} d ON d.cluster_id = j.cluster_id LEFT JOIN {idle} i ON i.job_id = j.id "
        f"LEFT JOIN {sugg} s ON s.job_id = j.id WHERE " + (where if member else "j.id = %s")
    )


def job_live_tag(user: AbstractBaseUser | AnonymousUser, pk: int, *, now: datetime) -> str | None:
    """The ETag of job ``pk``'s live fragment as ``user`` sees it at ``now``; None when they may not see the job
    (the view then answers as it does for any job: 404 when not visible)."""
    if not user.is_authenticated:
        return None
    with connection.cursor() as cursor:
        cursor.execute(_tag_sql(member=True), [pk, user.pk])
        row = cursor.fetchone()
        path = "member"
        if row is None and sees_every_team(user):
            cursor.execute(_tag_sql(member=False), [pk])
            row = cursor.fetchone()
            path = "every team"
    if row is None:
        return None
    clock = int(now.timestamp()) // LIVE_CLOCK_SECONDS
    text = repr((row, path, user.pk, clock))
    return f'"{hashlib.blake2b(text.encode(), digest_size=16).hexdigest()}"'
