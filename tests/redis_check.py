"""Whether a Redis server answers: the worker tests that need a real broker skip without one."""

from __future__ import annotations

import redis


def redis_answers(url: str) -> bool:
    """True when the Redis server at ``url`` answers a PING within a second."""
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False
