"""The audit trail: every policy model records who, when, and each field before → after."""

from __future__ import annotations

import pytest
from django.core.exceptions import FieldDoesNotExist

from pools.models import Cluster, ResourceFlavor
from queues.models import Cohort, PriorityClass
from queues.policy.audit import POLICY_MODELS, audit_csv, audit_entries
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_every_policy_model_has_history():
    from django.apps import apps

    for label in POLICY_MODELS:
        assert hasattr(apps.get_model(label), "history"), label


def test_create_change_delete_are_recorded_with_before_and_after(pool):
    user = UserFactory(username="ops")
    pc = PriorityClass(name="urgent", value=1000)
    pc._history_user = user
    pc.save()
    pc.value = 2000
    pc._history_user = user
    pc.save()
    pc.delete()
    entries = audit_entries(model="queues.PriorityClass")
    assert [(e.action, e.user) for e in entries] == [("deleted", "ops"), ("changed", "ops"), ("created", "ops")]
    changed = entries[1]
    assert [(c.field, c.before, c.after) for c in changed.changes] == [("value", "1000", "2000")]
    assert ("value", "", "1000") in [(c.field, c.before, c.after) for c in entries[2].changes]
    assert ("name", "urgent", "") in [(c.field, c.before, c.after) for c in entries[0].changes]


def test_sync_bookkeeping_of_a_cluster_is_not_audited(pool):
    from django.utils import timezone

    before = pool.cluster.history.count()
    pool.cluster.last_synced_at = timezone.now()
    pool.cluster.save(update_fields=["last_synced_at"])
    pool.cluster.sync_bookmarks = {"Node": "42"}
    pool.cluster.save(update_fields=["sync_bookmarks"])
    assert pool.cluster.history.count() == before
    pool.cluster.display_name = "East"
    pool.cluster.save()
    assert pool.cluster.history.count() == before + 1
    assert Cluster.history.model._meta.get_field("display_name")
    with pytest.raises(FieldDoesNotExist):
        Cluster.history.model._meta.get_field("sync_bookmarks")


def test_audit_is_merged_newest_first_and_bounded_in_queries(pool, django_assert_max_num_queries):
    for n in range(15):
        pool.vline.nominal = str(n + 3)
        pool.vline.save()
    ResourceFlavor.objects.filter(pk=pool.flavor.pk).first().save()
    Cohort.objects.create(name="extra")
    # One list query per model, then per kept entry at most its previous record and its object's label.
    with django_assert_max_num_queries(len(POLICY_MODELS) + 2 * 10 + 2):
        entries = audit_entries(limit=10)
    assert len(entries) == 10
    assert [e.at for e in entries] == sorted((e.at for e in entries), reverse=True)
    assert entries[0].model == "queues.Cohort"
    text = audit_csv(entries)
    assert text.splitlines()[0] == "at,user,model,object_id,object,action,field,before,after,reason"
    assert ",queues.QuotaLine," in text
