"""The site shell app: base templates, navigation, login, shared domain errors, the metrics endpoint."""

from django.apps import AppConfig


class PortalConfig(AppConfig):
    """Site shell."""

    name = "portal"
    verbose_name = "Portal"

    def ready(self) -> None:
        """Register every app's Celery tasks in this process; count every task failure (workers) for ``/metrics``."""
        from celery.signals import task_failure

        from portal.celery import app
        from portal.task_failures import on_task_failure

        # Web, worker and beat are separate processes. Celery's own discovery runs only in a worker, so a web
        # process that sends a task would otherwise hold only the tasks its views happened to import.
        app.autodiscover_tasks(force=True)
        task_failure.connect(on_task_failure, weak=False, dispatch_uid="portal.task_failures")
