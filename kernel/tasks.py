"""What every Celery task shares: which errors are transient, and how a task retries them.

A task whose body is idempotent (running it again changes nothing more) retries a database that is unreachable or
restarting with exponential backoff (1, 2, 4 … 60 s, with jitter, for about five minutes) instead of failing: a
PostgreSQL restart costs those tasks a delay, never their effect. Every task that changes state in this project is
idempotent, so every task takes ``**DB_RETRY`` (a task with its own retries adds these errors to them).
"""

from __future__ import annotations

from django.db import InterfaceError, OperationalError

#: A database that is down, restarting or locked: worth another try.
TRANSIENT_DB_ERRORS = (OperationalError, InterfaceError)
#: Celery options: retry TRANSIENT_DB_ERRORS with backoff (1 s doubling to 60 s, jittered), 8 times.
DB_RETRY = {
    "autoretry_for": TRANSIENT_DB_ERRORS,
    "retry_backoff": 1,
    "retry_backoff_max": 60,
    "retry_jitter": True,
    "max_retries": 8,
}
