"""The Celery application; tasks are discovered in each app's ``tasks.py``."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

# Every task's request leaves a message whose channel a lost connection closed to the broker's redelivery
# (portal.broker_safety, docs/operations.md "Worker reconnects").
app = Celery("portal", task_cls="portal.broker_safety:PortalTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
