"""kernel.db.update_rows: many rows, each its own values, in one statement per batch, planned for the table as it is."""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from clusters.models import KubeJobState
from kernel.db import fresh_statistics, update_rows
from queues.models import Job
from tests.factories import ClusterFactory, JobFactory

pytestmark = pytest.mark.django_db


def _states(n: int) -> list[KubeJobState]:
    cluster = ClusterFactory()
    when = datetime(2026, 12, 1, tzinfo=UTC)
    return [
        KubeJobState.objects.create(job=JobFactory(cluster=cluster), cluster=cluster, observed_at=when)
        for _ in range(n)
    ]


def test_each_row_gets_its_own_values_and_only_the_listed_columns():
    rows = _states(5)
    for i, st in enumerate(rows):
        st.workload = {"metadata": {"name": f"wl-{i}"}, "quote": "it's", "n": i, "list": [1, "2"]}
        st.job_deleted_at = None if i % 2 else datetime(2026, 12, 2, i, tzinfo=UTC)
        st.dirty = bool(i % 2)
        st.pods = {"not": "written"}
    with CaptureQueriesContext(connection) as queries:
        written = update_rows(KubeJobState, rows, ["workload", "job_deleted_at", "dirty"], batch_size=2)
    assert written == 5
    updates = [q for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    assert len(updates) == 3  # batches of 2, 2 and 1
    for i, st in enumerate(rows):
        fresh = KubeJobState.objects.get(pk=st.pk)
        assert fresh.workload == {"metadata": {"name": f"wl-{i}"}, "quote": "it's", "n": i, "list": [1, "2"]}
        assert fresh.job_deleted_at == (None if i % 2 else datetime(2026, 12, 2, i, tzinfo=UTC))
        assert fresh.dirty is bool(i % 2)
        assert fresh.pods == {}


def test_a_column_of_nulls_and_json_scalars_keep_their_types():
    rows = _states(2)
    for st in rows:
        st.job_deleted_at = None
        st.evaluated_at = None
        st.batch_job = {"n": "123"}
    update_rows(KubeJobState, rows, ["job_deleted_at", "evaluated_at", "batch_job"])
    assert (
        list(KubeJobState.objects.values_list("job_deleted_at", "evaluated_at", "batch_job"))
        == [(None, None, {"n": "123"})] * 2
    )


def test_unsaved_rows_are_refused_and_nothing_is_a_no_op():
    assert update_rows(KubeJobState, [], ["dirty"]) == 0
    with pytest.raises(ValueError, match="saved rows only"):
        update_rows(KubeJobState, [KubeJobState()], ["dirty"])


@pytest.mark.postgres
def test_a_bulk_loaded_table_is_analyzed_before_a_batched_update_so_its_plan_fits_the_table():
    """The cliff of issue #40: statistics made while a bulk load was uncommitted say "0 rows" for a table of many
    pages, and a batched UPDATE planned from them scans the whole table for each row. update_rows analyzes such a
    table first (``fresh_statistics``), and the same statement is then planned for the table as it is."""
    first = JobFactory()
    common = {
        "team": first.team,
        "owner": first.owner,
        "cluster": first.cluster,
        "resource_class": first.resource_class,
        "image": "x",
        "submitted_at": first.submitted_at,
        "queued_at": first.queued_at,
        "state_changed_at": first.state_changed_at,
    }
    jobs = Job.objects.bulk_create([Job(name=f"j{i}", **common) for i in range(20_000)], batch_size=5000)
    when = datetime(2026, 12, 1, tzinfo=UTC)
    states = KubeJobState.objects.bulk_create(
        [KubeJobState(job=job, cluster=first.cluster, observed_at=when) for job in jobs], batch_size=5000
    )
    table = KubeJobState._meta.db_table
    batch = states[5000:5500]
    for st in batch:
        st.dirty = False  # the rows were made dirty
    update = _update_statement(batch)

    # Statistics made by another session, which cannot see this transaction's rows: "0 rows" on many pages. (It
    # runs before this transaction analyzes: ANALYZE's lock is held to the end of the transaction that took it.)
    _analyze_from_another_session(table)
    stale = _target_scans(update, table)
    assert all(node["Plan Rows"] < 100 for node in stale), stale  # what the cliff was planned from

    with CaptureQueriesContext(connection) as queries:
        assert update_rows(KubeJobState, batch, ["dirty"], batch_size=500) == 500
    statements = [q["sql"] for q in queries.captured_queries]
    assert any(sql.startswith("ANALYZE") for sql in statements)  # update_rows saw the stale statistics
    assert KubeJobState.objects.filter(dirty=False).count() == 500
    fresh = _target_scans(update, table)
    for node in fresh:
        if node["Node Type"] == "Seq Scan":
            assert node["Plan Rows"] >= 10_000, fresh  # a scan of the table is planned for its 20,000 rows
        assert not node.get("outer_of_nested_loop"), fresh  # never a scan of the whole table per row of the batch
    assert not fresh_statistics(KubeJobState)  # up to date: the next batch does not analyze again


class _RolledBack(Exception):
    pass


def _update_statement(batch: list[KubeJobState]) -> str:
    """The UPDATE that update_rows sends for ``batch``, captured in a savepoint rolled back (the rows, and the lock
    of the ANALYZE it may run, are released with it)."""
    try:
        with transaction.atomic(), CaptureQueriesContext(connection) as queries:
            update_rows(KubeJobState, batch, ["dirty"], batch_size=len(batch))
            raise _RolledBack
    except _RolledBack:
        pass
    return next(q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE"))


def _analyze_from_another_session(table: str) -> None:
    settings = connection.settings_dict
    with psycopg.connect(
        dbname=settings["NAME"],
        user=settings["USER"],
        host=settings["HOST"] or None,
        port=settings["PORT"] or None,
        password=settings["PASSWORD"] or None,
        autocommit=True,
        options="-c lock_timeout=20s",  # a lock this transaction holds fails the test, never hangs it
    ) as other:
        other.execute(f'ANALYZE "{table}"')


def _target_scans(statement: str, table: str) -> list[dict]:
    """The scan nodes of ``table`` in the plan of ``statement``; one on the outer side of a nested loop is marked."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + statement)
        plan = cursor.fetchone()[0][0]["Plan"]
    found = []

    def walk(node: dict, outer_of_loop: bool) -> None:
        if node.get("Relation Name") == table:
            found.append({**node, "outer_of_nested_loop": outer_of_loop})
        children = node.get("Plans", [])
        for i, child in enumerate(children):
            walk(child, node["Node Type"] == "Nested Loop" and i == 0)

    walk(plan, False)
    assert found, plan
    return found
