"""A real Celery worker on a real Redis broker runs the simulated cluster's tick (PostgreSQL, Redis)."""

from __future__ import annotations

import os
import time

import pytest
from celery.contrib.testing.worker import start_worker
from django.utils import timezone
from kombu import pools as kombu_pools

from portal.celery import app
from queues import services
from queues.models import Job
from tests.factories import (
    ClusterFactory,
    DeviceFactory,
    MembershipFactory,
    NodeFactory,
    QuotaLineFactory,
    ResourceClassFactory,
    ResourceFlavorFactory,
    TeamQuotaFactory,
)
from tests.redis_check import redis_answers

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")


pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not redis_answers(REDIS_URL), reason=f"no Redis at {REDIS_URL}"),
    pytest.mark.xdist_group("redis"),  # one Celery queue on one Redis database: one xdist worker at a time
]


def _reset_broker_pools() -> None:
    """Drop the app's cached broker connections so the next send uses the broker configured now.

    ``app.pool`` and the producer pool are created once and cached: a test that ran earlier in the same
    process would otherwise leave this test publishing to the broker *it* configured. kombu keeps the pools in
    process-wide registries keyed by broker URL: closing one without clearing them made the next test that used
    the same URL fail with "Acquire on closed pool".
    """
    kombu_pools.reset()  # closes every cached pool *and* forgets them (a closed pool must not be handed out again)
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def redis_worker(settings):
    """A Celery worker thread consuming from Redis, with tasks sent to the broker (not run eagerly)."""
    saved = {key: app.conf[key] for key in ("broker_url", "task_always_eager")}
    app.conf.update(broker_url=REDIS_URL, task_always_eager=False, broker_connection_retry_on_startup=True)
    settings.CELERY_TASK_ALWAYS_EAGER = False
    _reset_broker_pools()
    with app.connection_for_write() as conn:
        # Messages left by an earlier, interrupted run would be consumed before this test's own.
        conn.default_channel.queue_purge(app.conf.task_default_queue)
    try:
        with start_worker(app, pool="solo", concurrency=1, perform_ping_check=False, shutdown_timeout=10):
            yield
    finally:
        app.conf.update(saved)
        _reset_broker_pools()


def test_worker_on_redis_admits_a_submitted_job(redis_worker):
    cluster = ClusterFactory(name="sim-redis")
    flavor = ResourceFlavorFactory(name="h100", node_labels={"gpu": "h100"})
    DeviceFactory.create_batch(8, node=NodeFactory(cluster=cluster, flavor=flavor))
    rc = ResourceClassFactory(flavors=[flavor])
    member = MembershipFactory()
    quota = TeamQuotaFactory(team=member.team, cluster=cluster)
    QuotaLineFactory(team_quota=quota, flavor=flavor, nominal="8")
    spec = services.JobSpec(name="redis-job", image="registry.example.org/t:1", resource_class=rc, devices_per_pod=4)
    # The service enqueues the tick after commit; the worker thread takes it from Redis.
    job = services.job_submit(owner=member.user, team=member.team, spec=spec, now=timezone.now())
    deadline = time.monotonic() + 60  # generous: CI machines are small and busy
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if job.state != Job.State.PENDING:
            break
        time.sleep(0.2)
    assert job.state == Job.State.ADMITTED
    assert job.allocations.filter(ended_at__isnull=True).count() == 4
