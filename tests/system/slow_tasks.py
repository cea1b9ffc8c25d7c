"""A task for the worker-reconnect test: acknowledged late, it runs long enough to span a broker outage.

Loaded into the deployed worker with ``--include tests.system.slow_tasks``; sent from ``manage.py shell``.
"""

from __future__ import annotations

import time

from celery import shared_task


@shared_task(name="tests.system.slow", ignore_result=True, acks_late=True)
def slow(seconds: float) -> None:
    """Sleep; acknowledged when done (as clusters.job_create and every acks_late task of the portal is)."""
    time.sleep(seconds)
