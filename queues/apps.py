"""App config for queues."""

from django.apps import AppConfig


class QueuesConfig(AppConfig):
    """Teams, quotas and jobs."""

    name = "queues"
    verbose_name = "Queues"

    def ready(self) -> None:
        """Register the implementations of the ports the lower layers declare; count engine state changes."""
        from pools.ports import quota_reader_register
        from queues import state_version
        from queues.quota_reader import QueuesQuotaReader

        quota_reader_register(QueuesQuotaReader())
        state_version.connect()
