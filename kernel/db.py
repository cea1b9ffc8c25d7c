"""Database helpers the ORM lacks: writing a different value to each of many rows in one statement, and keeping
the planner's statistics of a bulk-loaded table true before the statements that depend on them."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from django.db import connections, router
from django.db.models import Model

#: A table is analyzed before a bulk write when it now has more than this many times the pages its planner
#: statistics were made for (or it was never analyzed): a plan made for the table as it was can be quadratic now.
STALE_GROWTH = 2
#: … and at least this many more pages (a small table is cheap to scan whatever the plan).
STALE_MIN_PAGES = 64


def fresh_statistics(model: type[Model], *, using: str | None = None) -> bool:
    """On PostgreSQL, ``ANALYZE`` ``model``'s table when its planner statistics are missing or were made when it was
    much smaller (a bulk load since; autovacuum comes later, and a transaction's own rows are not seen by it).

    Why: the sync's batched ``UPDATE … FROM (VALUES …)`` once got a nested loop that scanned the whole table for
    each row of a batch — statistics said "0 rows" of a table of 10,000 pages, never analyzed — at ≥ 3 s a batch,
    quadratic in the table. Checked with one catalog query; analyzing samples the table (tens of milliseconds).
    Elsewhere (SQLite) a no-op. Returns whether it analyzed.
    """
    alias = using or router.db_for_write(model)
    connection = connections[alias]
    if connection.vendor != "postgresql":
        return False
    table = model._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.reltuples, c.relpages, pg_relation_size(c.oid) / current_setting('block_size')::int "
            "FROM pg_class c WHERE c.oid = %s::regclass",
            [connection.ops.quote_name(table)],
        )
        row = cursor.fetchone()
        if row is None:
            return False
        reltuples, relpages, pages = row
        never = reltuples < 0 or (reltuples == 0 and pages > 0)
        grown = pages > max(STALE_GROWTH * relpages, relpages + STALE_MIN_PAGES)
        if not (never and pages >= STALE_MIN_PAGES) and not grown:
            return False
        cursor.execute(f"ANALYZE {connection.ops.quote_name(table)}")
    return True


def update_rows(model: type[Model], objs: Sequence[Model], fields: Sequence[str], *, batch_size: int = 500) -> int:
    """Write ``fields`` of saved instances, each row its own values: one ``UPDATE … FROM (VALUES …)`` per batch.

    ``bulk_update`` writes a ``CASE WHEN pk = … THEN …`` per row and field, which Django takes longer to build
    than the database to run; this sends the values once. Only the listed columns are sent (a JSON column left
    out is neither dumped nor decoded). Falls back to ``bulk_update`` where the database lacks ``UPDATE … FROM``.
    Returns the number of rows written. On PostgreSQL the table's statistics are brought up to date first when a
    bulk load left them stale (``fresh_statistics``), so that the join is planned for the table as it is: one
    index probe of the primary key per row.
    """
    objs = list(objs)
    if not objs:
        return 0
    if any(obj.pk is None for obj in objs):
        raise ValueError("update_rows writes saved rows only")
    alias = router.db_for_write(model)
    connection = connections[alias]
    if connection.vendor not in ("postgresql", "sqlite") or (
        connection.vendor == "sqlite" and sqlite3.sqlite_version_info < (3, 33)
    ):
        return model._default_manager.db_manager(alias).bulk_update(objs, list(fields), batch_size=batch_size)
    fresh_statistics(model, using=alias)
    meta = model._meta
    model_fields = [meta.get_field(name) for name in fields]
    qn = connection.ops.quote_name
    table, pk = qn(meta.db_table), qn(meta.pk.column)
    if connection.vendor == "postgresql":  # a column of NULLs alone would be typed text: cast to the column's type
        names = ["id", *(f"v{i}" for i in range(len(model_fields)))]
        sets = [f"{qn(f.column)} = v.v{i}::{f.db_type(connection)}" for i, f in enumerate(model_fields)]
        source, key = f"(VALUES {{rows}}) AS v({', '.join(names)})", "v.id"
    else:  # SQLite names the columns of VALUES column1, column2, …
        sets = [f"{qn(f.column)} = v.column{i + 2}" for i, f in enumerate(model_fields)]
        source, key = "(VALUES {rows}) AS v", "v.column1"
    row = "(" + ", ".join(["%s"] * (len(model_fields) + 1)) + ")"
    written = 0
    with connection.cursor() as cursor:
        for start in range(0, len(objs), batch_size):
            batch = objs[start : start + batch_size]
            params = [
                p
                for obj in batch
                for p in (obj.pk, *(f.get_db_prep_save(getattr(obj, f.attname), connection) for f in model_fields))
            ]
            cursor.execute(
                f"UPDATE {table} SET {', '.join(sets)} FROM {source.format(rows=', '.join([row] * len(batch)))} "
                f"WHERE {table}.{pk} = {key}",
                params,
            )
            written += cursor.rowcount
    return written
