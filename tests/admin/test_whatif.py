"""The what-if replay on a scenario small enough to compute by hand."""

from __future__ import annotations

from datetime import timedelta

import pytest

from queues.policy.whatif import WhatIfRequest, policy_configuration, recorded_jobs, whatif_compare
from tests.admin.conftest import T0

H = timedelta(hours=1)


@pytest.fixture
def history(pool):
    """vision ran 4 GPUs (2 borrowed) 0h-2h; nlp asked for 2 GPUs at 1h and got them at 2h, ran 1h."""
    pool.job(pool.vision, devices=4, submitted=0 * H, started=0 * H, finished=2 * H)
    pool.job(pool.nlp, devices=2, submitted=1 * H, started=2 * H, finished=3 * H)
    return pool


def test_whatif_reclaim_within_cohort_computed_by_hand(history):
    pool = history
    current = policy_configuration(cluster=pool.cluster)
    pool.nq.reclaim_within_cohort = "Any"
    pool.nq.save()
    proposed = policy_configuration(cluster=pool.cluster)
    result = whatif_compare(
        cluster=pool.cluster,
        current=current,
        proposed=proposed,
        request=WhatIfRequest(now=T0 + 4 * H, window=4 * H),
    )
    assert result.jobs == 2
    cur, new = result.current.by_queue(), result.proposed.by_queue()
    # Current policy: nlp waits for vision's job to end at 2h: 1 h of wait; vision borrowed 2 GPUs for 2 h.
    assert cur["nlp"].wait_p50_seconds == 3600
    assert cur["nlp"].wait_p90_seconds == 3600
    assert cur["nlp"].used_device_hours == 2
    assert cur["nlp"].utilisation == 0.25  # 2 GPU-h of 2 GPUs x 4 h
    assert cur["vision"].wait_p50_seconds == 0
    assert cur["vision"].used_device_hours == 8
    assert cur["vision"].borrowed_device_hours == 4
    assert cur["vision"].utilisation == 1.0
    assert cur["vision"].preemptions == 0
    # Proposed: nlp reclaims its 2 GPUs at 1h; vision's job is preempted, requeued, restarts at 2h and runs
    # 2 h more (to 4h): used 4 GPUs x (1 h + 2 h) = 12 GPU-h, of which 2 x 3 h = 6 borrowed.
    assert new["nlp"].wait_p50_seconds == 0
    assert new["nlp"].used_device_hours == 2
    assert new["vision"].preemptions == 1
    assert new["vision"].used_device_hours == 12
    assert new["vision"].borrowed_device_hours == 6
    assert new["vision"].utilisation == 1.5
    assert new["vision"].wait_p50_seconds == 0


def test_recorded_jobs_runtime_carry_in_and_cancelled(pool):
    pool.job(pool.vision, devices=1, submitted=-2 * H, started=-1 * H, finished=1 * H)  # carried in
    pool.job(pool.vision, devices=1, submitted=-5 * H, started=-4 * H, finished=-3 * H)  # before the window
    cancelled = pool.job(pool.nlp, devices=1, submitted=H, started=None, finished=None)
    cancelled.state = "cancelled"
    cancelled.finished_at = T0 + 2 * H
    cancelled.save()
    pending = pool.job(pool.nlp, devices=1, submitted=2 * H, started=None, finished=None)
    pending.sim_runtime_seconds = 1800
    pending.save()
    jobs, left_out = recorded_jobs(cluster=pool.cluster, start=T0, end=T0 + 4 * H)
    assert left_out == 1
    assert [(j.job.pk == pending.pk, j.carried_in, j.runtime) for j in jobs] == [
        (False, True, 3600.0),
        (True, False, 1800.0),
    ]


def test_whatif_job_still_waiting_counts_its_wait_so_far(pool):
    pool.job(pool.vision, devices=4, submitted=0 * H, started=0 * H, finished=None)  # holds all 4 GPUs
    pool.job(pool.nlp, devices=4, submitted=H, started=None, finished=None)
    config = policy_configuration(cluster=pool.cluster)
    result = whatif_compare(
        cluster=pool.cluster, current=config, proposed=config, request=WhatIfRequest(now=T0 + 4 * H, window=4 * H)
    )
    nlp = result.current.by_queue()["nlp"]
    assert (nlp.jobs, nlp.admitted, nlp.still_waiting) == (1, 0, 1)
    assert nlp.wait_p50_seconds == 3 * 3600


def test_whatif_past_its_time_budget_says_so(history, settings):
    from queues.policy.whatif import WhatIfTooSlow

    settings.WHATIF_MAX_SECONDS = 1e-9
    config = policy_configuration(cluster=history.cluster)
    with pytest.raises(WhatIfTooSlow, match="the replay took longer than 1e-09 s"):
        whatif_compare(
            cluster=history.cluster,
            current=config,
            proposed=config,
            request=WhatIfRequest(now=T0 + 4 * H, window=4 * H),
        )
