"""The site shell app: base templates, navigation, login, shared domain errors, the metrics endpoint."""

from django.apps import AppConfig


class PortalConfig(AppConfig):
    """Site shell."""

    name = "portal"
    verbose_name = "Portal"

    def ready(self) -> None:
        """Count every Celery task failure (in the worker processes) for ``/metrics``; register the security
        checks (portal.checks); register every app's tasks in every process (the web sends some by name:
        ``queues.policy_preview``, which a web process that had not imported ``queues.tasks`` refused with
        NotRegistered, a 500 on the admin's save)."""
        from celery.signals import task_failure

        from portal import checks  # noqa: F401 (registers the checks)
        from portal.celery import app as celery_app
        from portal.task_failures import on_task_failure

        task_failure.connect(on_task_failure, weak=False, dispatch_uid="portal.task_failures")
        celery_app.autodiscover_tasks(force=True)
