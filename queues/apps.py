"""App config for queues."""

from django.apps import AppConfig


class QueuesConfig(AppConfig):
    """Teams, quotas and jobs."""

    name = "queues"
    verbose_name = "Queues"
