"""The site shell app: base templates, navigation, login, shared domain errors, the metrics endpoint."""

from django.apps import AppConfig


class PortalConfig(AppConfig):
    """Site shell."""

    name = "portal"
    verbose_name = "Portal"

    def ready(self) -> None:
        """Count every Celery task failure (in the worker processes) for ``/metrics``; register the security
        checks (portal.checks); register every app's tasks in this process too (a web process sends some tasks by
        their registered name, e.g. a preview's replay: Celery's discovery alone imports them in workers only)."""
        from celery.signals import task_failure

        from portal import checks  # noqa: F401 (registers the checks)
        from portal.celery import app
        from portal.task_failures import on_task_failure

        app.autodiscover_tasks(force=True)

        task_failure.connect(on_task_failure, weak=False, dispatch_uid="portal.task_failures")
