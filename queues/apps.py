"""App config for queues."""

from django.apps import AppConfig


class QueuesConfig(AppConfig):
    """Teams, quotas and jobs."""

    name = "queues"
    verbose_name = "Queues"

    def ready(self) -> None:
        """Register the implementations of the ports the lower layers declare; count engine state changes; keep
        the operator group."""
        from django.db.models.signals import post_migrate

        from pools.ports import job_visibility_register, quota_reader_register, waiting_reader_register
        from queues import state_version
        from queues.privacy import QueuesJobVisibility
        from queues.quota_reader import QueuesQuotaReader, QueuesWaitingReader

        quota_reader_register(QueuesQuotaReader())
        waiting_reader_register(QueuesWaitingReader())
        job_visibility_register(QueuesJobVisibility())
        state_version.connect()
        post_migrate.connect(operator_group_ensure, sender=self)


def operator_group_ensure(sender, using: str = "default", **kwargs) -> None:
    """The read-only ``operator`` group with its permissions: every team's jobs, the pool's health pages (after every
    migrate and flush)."""
    from django.contrib.auth.models import Group, Permission

    from queues.selectors import OPERATOR_GROUP, OPERATOR_PERMISSIONS

    found = []
    for name in OPERATOR_PERMISSIONS:
        app_label, codename = name.split(".")
        permission = (
            Permission.objects.using(using).filter(content_type__app_label=app_label, codename=codename).first()
        )
        if permission is None:  # the permissions are created by the same signal, earlier; absent only if disabled
            return
        found.append(permission)
    group, _ = Group.objects.using(using).get_or_create(name=OPERATOR_GROUP)
    group.permissions.add(*found)
