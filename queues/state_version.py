"""Receivers that count changes of the queues models the engine reads (see ``pools.state_version``)."""

from __future__ import annotations

from django.db.models.signals import m2m_changed, post_delete, post_save

from pools.state_version import bump
from queues.models import Cohort, Job, PriorityClass, QuotaLine, Reservation, Team, TeamQuota

#: Job fields the engine input never reads: a save of only these (the tick's stored wait reason) changes nothing.
JOB_BOOKKEEPING_FIELDS = frozenset({"wait_reason", "wait_message", "kueue_message", "wait_details", "wait_since"})


def _global(sender, **kwargs) -> None:  # type: ignore[no-untyped-def]
    bump()


def _job(sender, instance: Job, update_fields=None, **kwargs) -> None:  # type: ignore[no-untyped-def]
    if update_fields is not None and set(update_fields) <= JOB_BOOKKEEPING_FIELDS:
        return
    bump(cluster_ids=[instance.cluster_id], jobs=[instance.pk])


def _team_quota(sender, instance: TeamQuota, **kwargs) -> None:  # type: ignore[no-untyped-def]
    bump(cluster_ids=[instance.cluster_id])


def _reservation(sender, instance: Reservation, **kwargs) -> None:  # type: ignore[no-untyped-def]
    # a decision, a cancellation or an edge applied: the holds in the engine input (and the ETAs' windows) changed
    bump(cluster_ids=[instance.cluster_id])


def _quota_line(sender, instance: QuotaLine, **kwargs) -> None:  # type: ignore[no-untyped-def]
    if instance.team_quota_id is None:
        bump()  # a cohort's own quota is shared by every cluster's engine input
        return
    cluster_id = TeamQuota.objects.filter(pk=instance.team_quota_id).values_list("cluster_id", flat=True).first()
    if cluster_id is None:  # deleted with its team quota (which counted the change)
        bump()
    else:
        bump(cluster_ids=[cluster_id])


def _team_priorities(sender, action: str, **kwargs) -> None:  # type: ignore[no-untyped-def]
    if action in ("post_add", "post_remove", "post_clear"):
        bump()


def connect() -> None:
    """Connect the receivers (``QueuesConfig.ready``)."""
    post_save.connect(_job, sender=Job, dispatch_uid="state_version_job_save")
    post_delete.connect(_job, sender=Job, dispatch_uid="state_version_job_delete")
    for model, receiver in ((TeamQuota, _team_quota), (QuotaLine, _quota_line), (Reservation, _reservation)):
        post_save.connect(receiver, sender=model, dispatch_uid=f"state_version_{model.__name__}_save")
        post_delete.connect(receiver, sender=model, dispatch_uid=f"state_version_{model.__name__}_delete")
    for model in (Cohort, Team, PriorityClass):
        post_save.connect(_global, sender=model, dispatch_uid=f"state_version_{model.__name__}_save")
        post_delete.connect(_global, sender=model, dispatch_uid=f"state_version_{model.__name__}_delete")
    m2m_changed.connect(_team_priorities, sender=Team.priority_classes.through, dispatch_uid="state_version_team_pc")
