"""The worker-reconnect fix at the seam where it lives (the real-process test is tests/system/test_worker_reconnect.py):
a channel of a collected (detached) connection answers with a connection error, not AttributeError; a task request
leaves a message of a closed channel unacknowledged."""

from __future__ import annotations

import os

import pytest
from kombu import Connection
from kombu.transport.redis import Transport as KombuTransport
from redis.exceptions import ConnectionError as RedisConnectionError

from portal.broker_safety import BrokerSafeRequest, Transport, _channel_closed
from tests.redis_check import redis_answers

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/2")
needs_redis = pytest.mark.skipif(not redis_answers(REDIS_URL), reason=f"no Redis at {REDIS_URL}")


def _detached_channel(transport):
    """A channel in the state the crash met: still open, its pools dropped, its transport detached from the kombu
    Connection (what collecting the connection does when closing the channel failed on the dead socket)."""
    conn = Connection(REDIS_URL, transport=transport)
    channel = conn.default_channel
    channel._disconnect_pools()
    conn._do_close_transport()
    return channel


@needs_redis
def test_kombus_own_channel_raises_attribute_error_once_its_connection_is_collected():
    channel = _detached_channel(KombuTransport)
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'hostname'"):
        channel._connparams()


@needs_redis
def test_the_portals_channel_answers_a_connection_error_instead():
    channel = _detached_channel(Transport)
    with pytest.raises(RedisConnectionError, match="the broker connection of this channel was closed"):
        channel._connparams()
    assert RedisConnectionError in Transport.connection_errors  # what the close path catches


@needs_redis
def test_a_closed_channel_answers_a_connection_error_too():
    conn = Connection(REDIS_URL, transport=Transport)
    channel = conn.default_channel
    conn.close()
    with pytest.raises(RedisConnectionError):
        channel._connparams()


def test_a_message_of_a_closed_channel_is_not_acknowledged():
    class Channel:
        closed = True

    class Message:
        channel = Channel()

    assert _channel_closed(Message()) is True
    Channel.closed = False
    assert _channel_closed(Message()) is False
    assert BrokerSafeRequest.acknowledge is not BrokerSafeRequest.__mro__[1].acknowledge
