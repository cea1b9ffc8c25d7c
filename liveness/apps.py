"""App config for liveness."""

from django.apps import AppConfig


class LivenessConfig(AppConfig):
    """Heartbeats and periodic-task records, written by the worker and beat processes."""

    name = "liveness"
    verbose_name = "Liveness"

    def ready(self) -> None:
        """Listen to Celery's worker and task signals (they fire only in worker processes)."""
        from liveness import celery_hooks

        celery_hooks.connect()
