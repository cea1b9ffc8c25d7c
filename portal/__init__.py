"""GPU Pool Portal: the Django project (settings, URLs, Celery app, site shell)."""

from .celery import app as celery_app

__all__ = ("celery_app",)
