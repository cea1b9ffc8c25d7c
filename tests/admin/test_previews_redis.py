"""A real Celery worker on a real Redis broker replays a what-if preview the admin asked for (PostgreSQL, Redis)."""

from __future__ import annotations

import time
from datetime import timedelta

from django.urls import reverse

from queues.models import PolicyPreview
from tests.admin.test_admin_flow import _line, _quota_post
from tests.factories import UserFactory
from tests.queues.test_worker_redis import pytestmark, redis_worker  # noqa: F401  (markers and the worker fixture)

H = timedelta(hours=1)


def test_worker_on_redis_replays_a_preview(redis_worker, client, pool):  # noqa: F811
    pool.job(pool.vision, devices=4, submitted=-3 * H, started=-3 * H, finished=-1 * H)
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    url = reverse("admin:queues_teamquota_change", args=[pool.vq.pk])
    started = time.perf_counter()
    response = client.post(url, _quota_post(pool.vq, [_line(pool.vline, nominal="4")]))
    took = time.perf_counter() - started
    assert response.status_code == 302
    preview = PolicyPreview.objects.get()
    page = reverse("policy:preview", args=[preview.pk])
    deadline = time.monotonic() + 60  # generous: CI machines are small and busy
    while time.monotonic() < deadline:
        poll = client.get(page, headers={"HX-Request": "true"})
        if poll.status_code == 286:
            break
        assert 'hx-trigger="every 1s"' in poll.content.decode()
        time.sleep(0.2)
    assert poll.status_code == 286, f"not finished after 60 s (request took {took:.3f} s)"
    preview.refresh_from_db()
    assert preview.status == PolicyPreview.Status.DONE, preview.error
    assert "Vision (vision)" in poll.content.decode()
