"""What keeps the worker running through a broker outage: kombu's Redis transport and Celery's task request, each
with one fix (docs/operations.md, *Worker reconnects*).

When the worker loses the broker, Celery's consumer collects and then closes its connection. Collecting detaches
kombu's Redis transport from the connection (``transport.client = None``) but leaves the connection's default
channel open when closing it failed for the lost socket; the close that follows closes that channel again, which
restores its unacknowledged messages (a late-acknowledged task still running, messages reserved for a busy pool),
which builds a Redis connection pool from the detached transport: ``AttributeError: 'NoneType' object has no
attribute 'hostname'``. That is not a connection error, so the worker stopped ("Unrecoverable error") whenever a
message was unacknowledged at the moment of the loss: in about one outage of four.

* :class:`Transport` (``CELERY_BROKER_TRANSPORT`` for a ``redis://`` broker): a channel whose connection is gone
  answers with the connection error it is, which the close path expects and ignores. The unacknowledged messages
  stay in Redis's index of them, and Redis hands them out again after the visibility timeout.
* :class:`BrokerSafeRequest` (the request of every task, :class:`PortalTask`): a task that ends after its message's
  channel was closed leaves the message unacknowledged (Redis redelivers it; every task is idempotent) and says so,
  instead of failing to acknowledge it on a dead channel.
"""

from __future__ import annotations

import logging

from celery import Task
from celery.worker.request import Request
from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError

log = logging.getLogger(__name__)


class Channel(kombu_redis.Channel):
    """kombu's Redis channel; once its connection is closed, it reports a connection error instead of
    ``AttributeError`` when something tries to reach Redis through it."""

    def _connparams(self, asynchronous: bool = False) -> dict:
        transport = self.connection
        if transport is None or transport.client is None:  # the channel, or its kombu Connection, was closed
            raise RedisConnectionError("the broker connection of this channel was closed")
        return super()._connparams(asynchronous=asynchronous)


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`Channel`."""

    Channel = Channel


def _channel_closed(message) -> bool:
    channel = getattr(message, "channel", None)
    return channel is None or bool(getattr(channel, "closed", False))


class BrokerSafeRequest(Request):
    """A task request that does not acknowledge (or reject) a message on a channel closed by a lost connection."""

    def acknowledge(self) -> None:
        """Acknowledge, unless the message's channel is gone: then leave it to the broker's redelivery."""
        if not self.acknowledged and _channel_closed(self.message):
            self._left(what="acknowledged")
            return
        super().acknowledge()

    def reject(self, requeue: bool = False) -> None:
        """Reject, unless the message's channel is gone: then leave it to the broker's redelivery."""
        if not self.acknowledged and _channel_closed(self.message):
            self._left(what="rejected")
            return
        super().reject(requeue=requeue)

    def _left(self, *, what: str) -> None:
        self.acknowledged = True
        log.warning(
            "task %s[%s] ended after the broker connection it came on was lost: its message is left unacknowledged "
            "(not %s); the broker hands it out again after its visibility timeout and the task, idempotent, runs "
            "again",
            self.name,
            self.id,
            what,
        )


class PortalTask(Task):
    """The base of every task of the portal (``Celery(task_cls=…)``): only its request class differs."""

    Request = BrokerSafeRequest
