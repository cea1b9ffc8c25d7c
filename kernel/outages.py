"""Which errors mean that a dependency is down (the database, the message broker, the cache), for the one place
each interface turns them into an answer: 503 with ``Retry-After`` (JSON for the API), never an HTML 500.
"""

from __future__ import annotations

from django.db import InterfaceError, OperationalError
from kombu.exceptions import OperationalError as BrokerOperationalError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

#: Seconds a client is told to wait before trying again.
RETRY_AFTER_SECONDS = 30
#: Errors of an unreachable, restarting or locked dependency.
DATABASE_ERRORS = (OperationalError, InterfaceError)
BROKER_ERRORS = (BrokerOperationalError,)
CACHE_ERRORS = (RedisConnectionError, RedisTimeoutError)


def outage_of(exc: BaseException | None) -> str:
    """The dependency ``exc`` says is down ("database", "message broker", "cache"), or "" when it says no such
    thing (the error itself, or what it was raised from)."""
    seen = 0
    while exc is not None and seen < 4:
        if isinstance(exc, DATABASE_ERRORS):
            return "database"
        if isinstance(exc, BROKER_ERRORS):
            return "message broker"
        if isinstance(exc, CACHE_ERRORS):
            return "cache"
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return ""
