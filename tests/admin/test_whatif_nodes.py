"""The what-if replay on the nodes the cluster had during the window: joined, left, or gone before it."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.template.loader import render_to_string

from pools.models import Device, Node
from queues.engine_input import ts, window_engine_nodes
from queues.models import TeamQuota
from queues.policy.whatif import WhatIfRequest, policy_configuration, recorded_jobs, replay_policy, whatif_compare
from tests.admin.conftest import T0
from tests.factories import DeviceFactory, NodeFactory

H = timedelta(hours=1)
LONG_AGO = T0 - timedelta(days=30)


@pytest.fixture
def pool(pool):
    """The small pool, its node known since long before the window, and nlp's nominal raised to 4 GPUs."""
    Node.objects.filter(pk=pool.node.pk).update(first_seen_at=LONG_AGO)
    pool.nline.nominal = "4"
    pool.nline.save()
    return pool


def second_node(pool, *, first_seen, gone=None) -> Node:
    """Another node of 4 GPUs; when ``gone``, it and its devices left then."""
    node = NodeFactory(cluster=pool.cluster, flavor=pool.flavor, name="gpu-2", first_seen_at=first_seen, gone_at=gone)
    for index in range(4):
        DeviceFactory(node=node, index=index, gone_at=gone)
    return node


def compare(pool, proposed=None, hours=8):
    config = policy_configuration(cluster=pool.cluster)
    return whatif_compare(
        cluster=pool.cluster,
        current=config,
        proposed=proposed or config,
        request=WhatIfRequest(now=T0 + hours * H, window=hours * H),
    )


def test_whatif_node_joined_halfway_starts_waiting_jobs_when_it_joins(pool):
    second_node(pool, first_seen=T0 + 2 * H)
    pool.job(pool.vision, devices=4, submitted=0 * H, started=0 * H, finished=4 * H)  # fills gpu-1
    pool.job(pool.nlp, devices=2, submitted=H, started=2 * H, finished=3 * H)
    pool.vline.nominal = "3"
    pool.vline.save()
    result = compare(pool, proposed=policy_configuration(cluster=pool.cluster))
    for side in (result.current, result.proposed):
        nlp = side.by_queue()["nlp"]
        # It had quota at 1h but no node until gpu-2 joined at 2h.
        assert (nlp.admitted, nlp.wait_p50_seconds) == (1, 3600)
        assert nlp.used_device_hours == 2


def node_left_halfway(pool):
    """gpu-2 leaves at 2h while two 3-hour jobs of 4 GPUs run, one on each node."""
    second_node(pool, first_seen=LONG_AGO, gone=T0 + 2 * H)
    pool.vline.nominal = "4"
    pool.vline.save()
    pool.job(pool.vision, devices=4, submitted=0 * H, started=0 * H, finished=3 * H)
    pool.job(pool.nlp, devices=4, submitted=0 * H, started=0 * H, finished=3 * H)
    return pool


def test_whatif_node_left_halfway_requeues_the_job_on_it(pool):
    result = compare(node_left_halfway(pool))
    teams = result.current.teams
    # One job ran 2 h on gpu-2 until it left, then waited for gpu-1 (free at 3h) and ran its 3 h again.
    assert sum(t.node_losses for t in teams) == 1
    assert sum(t.preemptions for t in teams) == 0
    assert sum(t.admitted for t in teams) == 2
    assert sum(t.used_device_hours for t in teams) == 4 * 3 + 4 * 2 + 4 * 3
    assert result.proposed == result.current


def test_whatif_node_gone_before_the_window_is_not_replayed(pool):
    second_node(pool, first_seen=LONG_AGO, gone=T0 - H)
    pool.vline.nominal = "4"
    pool.vline.save()
    pool.job(pool.vision, devices=4, submitted=0 * H, started=0 * H, finished=H)
    pool.job(pool.nlp, devices=4, submitted=0 * H, started=0 * H, finished=H)
    start, end = T0, T0 + 4 * H
    assert [w.node.name for w in window_engine_nodes(cluster=pool.cluster, start=start, end=end)] == ["gpu-1"]
    result = compare(pool, hours=4)
    waits = sorted(t.wait_p50_seconds for t in result.current.teams)
    assert waits == [0, 3600]  # one 4-GPU job waits for the other: gpu-2 is not there


def test_window_engine_nodes_times_and_devices(pool):
    joined = second_node(pool, first_seen=T0 + 2 * H)
    left = NodeFactory(cluster=pool.cluster, flavor=pool.flavor, name="gpu-3", first_seen_at=LONG_AGO, gone_at=T0 + H)
    DeviceFactory(node=left, index=0, gone_at=T0 + H)
    DeviceFactory(node=left, index=1, gone_at=T0 - H)  # left before the node did: not part of it at the end
    DeviceFactory(node=pool.node, index=9, gone_at=T0 + H)  # a present node's gone device: not counted
    NodeFactory(cluster=pool.cluster, flavor=pool.flavor, name="gpu-4", first_seen_at=T0 + 5 * H)  # after the window
    window = {w.node.name: w for w in window_engine_nodes(cluster=pool.cluster, start=T0, end=T0 + 4 * H)}
    assert sorted(window) == ["gpu-1", "gpu-2", "gpu-3"]
    assert (window["gpu-1"].joins_at, window["gpu-1"].leaves_at) == (None, None)
    assert (window["gpu-2"].joins_at, window["gpu-2"].leaves_at) == (ts(joined.first_seen_at), None)
    assert (window["gpu-3"].joins_at, window["gpu-3"].leaves_at) == (None, ts(T0 + H))
    gpu = "nvidia.com/gpu"
    assert [window[n].node.allocatable[gpu] for n in ("gpu-1", "gpu-2", "gpu-3")] == [4, 4, 1]
    assert Device.objects.filter(node=left).count() == 2


def test_window_engine_nodes_first_inventory_counts_as_there_all_along(db, pool):
    # A portal installed mid-window first saw every node then: they were there before it looked.
    Node.objects.filter(pk=pool.node.pk).update(first_seen_at=T0 + 2 * H)
    [only] = window_engine_nodes(cluster=pool.cluster, start=T0, end=T0 + 4 * H)
    assert (only.node.name, only.joins_at, only.leaves_at) == ("gpu-1", None, None)


def test_whatif_unchanged_when_no_node_changed(pool):
    pool.job(pool.vision, devices=4, submitted=0 * H, started=0 * H, finished=2 * H)
    pool.job(pool.nlp, devices=2, submitted=H, started=2 * H, finished=3 * H)
    result = compare(pool, hours=4)
    jobs, _ = recorded_jobs(cluster=pool.cluster, start=T0, end=T0 + 4 * H)
    teams = dict(TeamQuota.objects.values_list("cluster_queue_name", "team__name"))
    today = replay_policy(
        config=policy_configuration(cluster=pool.cluster), jobs=jobs, start=ts(T0), end=ts(T0 + 4 * H), teams=teams
    )
    assert result.current == today
    assert today.by_queue()["nlp"].wait_p50_seconds == 3600


def test_preview_page_says_how_often_a_leaving_node_cost_jobs_their_pods(pool):
    result = compare(node_left_halfway(pool))
    assert result.node_losses == (1, 1)
    preview = SimpleNamespace(pk=1, status="done", is_finished=True, error="")
    html = render_to_string(
        "admin/policy/partials/preview_status.html",
        {"preview": preview, "elapsed": 1.0, "results": [{"whatif": result, "chart_id": "c1"}]},
    )
    assert "running jobs lost their pods 1 time under the current policy and 1 time under yours" in html
