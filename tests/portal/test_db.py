"""kernel.db.update_rows: many rows, each its own values, in one statement per batch."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from clusters.models import KubeJobState
from kernel.db import update_rows
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
    assert len(queries) == 3  # batches of 2, 2 and 1
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
