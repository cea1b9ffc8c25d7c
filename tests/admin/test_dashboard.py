"""Dashboard reads (cohort tree, borrowed/lent, class utilisation, queues) and the pure chart builders."""

from __future__ import annotations

from datetime import timedelta

import plotly.graph_objects as go
import pytest

from pools.models import Allocation
from queues.models import Cohort, Job, QuotaLine
from queues.policy import charts
from queues.policy.selectors import class_utilisation, cohort_tree, flatten, queue_figures, team_queues
from queues.policy.whatif import ReplayOutcome, TeamOutcome, WhatIf
from tests.admin.conftest import T0

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)


def _hold(pool, team, devices: int):
    job = pool.job(team, devices=devices, submitted=0 * H, started=0 * H, finished=None)
    Job.objects.filter(pk=job.pk).update(assigned_flavor=pool.flavor)
    return job


def test_cohort_tree_sums_quota_and_usage_under_each_cohort(pool):
    org = Cohort.objects.create(name="org")
    pool.cohort.parent = org
    pool.cohort.save()
    QuotaLine.objects.create(cohort=org, flavor=pool.flavor, resource_name="nvidia.com/gpu", nominal="4")
    QuotaLine.objects.create(team_quota=pool.vq, flavor=pool.flavor, resource_name="cpu", nominal="64")
    _hold(pool, pool.vision, 3)
    nodes = {n.name: n for n in flatten(cohort_tree())}
    assert [(n.name, n.depth) for n in flatten(cohort_tree())] == [
        ("org", 0),
        ("research", 1),
        ("sim-east/nlp", 2),
        ("sim-east/vision", 2),
    ]
    assert dict(nodes["org"].nominal) == {"nvidia.com/gpu": 8}  # 4 own + 2 + 2; cpu is not a device
    assert dict(nodes["research"].nominal) == {"nvidia.com/gpu": 4}
    assert nodes["org"].used_total == 3
    assert nodes["research"].summary == "nvidia.com/gpu 3/4"


def test_borrowed_and_lent_now(pool):
    _hold(pool, pool.vision, 3)  # nominal 2: borrows 1 from nlp
    figures = {f.quota.cluster_queue_name: f for f in queue_figures()}
    assert (figures["vision"].used, figures["vision"].borrowed, figures["vision"].lent) == (3, 1, 0)
    assert (figures["nlp"].used, figures["nlp"].borrowed, figures["nlp"].lent) == (0, 0, 1)


def test_lent_is_capped_by_lending_limit_and_shared(pool):
    pool.nline.lending_limit = "1"
    pool.nline.save()
    _hold(pool, pool.vision, 3)
    assert {f.quota.cluster_queue_name: f.lent for f in queue_figures()} == {"nlp": 1, "vision": 0}


def test_class_utilisation_over_buckets(pool):
    job = _hold(pool, pool.vision, 2)
    devices = list(pool.node.devices.order_by("pk")[:2])
    for d in devices:
        Allocation.objects.create(job=job, device=d, started_at=T0 + 30 * timedelta(minutes=1), ended_at=T0 + 2 * H)
    series = class_utilisation(start=T0, end=T0 + 2 * H, bucket=H)
    # 4 devices in the class: 2 held for the second half of hour 1 and all of hour 2.
    assert series["H100"] == [(T0, 0.25), (T0 + H, 0.5)]


def test_team_queues(pool):
    pool.job(pool.nlp, devices=1, submitted=0 * H, started=None, finished=None)
    rows = {r.team: r for r in team_queues(now=T0 + 2 * H)}
    assert (rows["NLP"].pending, rows["NLP"].oldest_wait_hours) == (1, 2.0)
    assert rows["Vision"].pending == 0


def test_whatif_figure_has_a_panel_per_metric():
    def outcome(wait):
        return TeamOutcome("vision", "Vision", 2, 2, 1, wait, wait, 8.0, 8.0, 4.0, 1)

    whatif = WhatIf("c", T0, T0 + H, 2, 0, 0, ReplayOutcome((outcome(3600.0),)), ReplayOutcome((outcome(0.0),)))
    fig = charts.whatif_figure(whatif.rows())
    assert len(fig["data"]) == 2 * len(charts.WHATIF_METRICS)
    first, second = fig["data"][0], fig["data"][1]
    assert (first["name"], first["y"], second["y"]) == ("current policy", [1.0], [0.0])
    assert fig["data"][4]["y"] == [100.0]  # utilisation in percent
    assert fig["layout"]["grid"]["rows"] * fig["layout"]["grid"]["columns"] >= len(charts.WHATIF_METRICS)


def test_cohort_tree_figure_values_are_totals(pool):
    _hold(pool, pool.vision, 3)
    fig = charts.cohort_tree_figure(flatten(cohort_tree()))
    trace = fig["data"][0]
    assert trace["branchvalues"] == "total"
    assert dict(zip(trace["ids"], trace["values"], strict=True)) == {
        "cohort:research": 4,
        "queue:sim-east/nlp": 2,
        "queue:sim-east/vision": 2,
    }
    assert trace["parents"] == ["", "cohort:research", "cohort:research"]


def test_whatif_figure_leaves_out_the_panels_that_are_zero_everywhere():
    def outcome(p90, preemptions):
        return TeamOutcome("vision", "Vision", 2, 2, 0, 0.0, p90, 8.0, 8.0, 4.0, preemptions)

    current = ReplayOutcome((outcome(7200.0, 0),))
    proposed = ReplayOutcome((outcome(3600.0, 2),))
    rows = WhatIf("c", T0, T0 + H, 2, 0, 0, current, proposed).rows()
    assert charts.whatif_zero_metrics(rows) == ["Wait p50 (hours)", "Jobs still waiting at the end"]
    fig = charts.whatif_figure(rows)
    titles = [a["text"] for a in fig["layout"]["annotations"]]
    assert titles == [
        "<b>Wait p90 (hours)</b>",
        "<b>Utilisation of nominal quota (%)</b>",
        "<b>Borrowed GPU-hours</b>",
        "<b>Preemptions</b>",
    ]
    assert len(fig["data"]) == 2 * 4
    assert fig["data"][0]["y"] == [2.0]
    assert (fig["layout"]["grid"]["rows"], fig["layout"]["grid"]["columns"]) == (2, 3)
    go.Figure(fig["data"], fig["layout"])  # a valid figure for plotly


def test_whatif_figure_with_every_panel_zero_has_no_data():
    zero = TeamOutcome("vision", "Vision", 1, 1, 0, 0.0, 0.0, 0.0, 8.0, 0.0, 0)
    rows = WhatIf("c", T0, T0 + H, 1, 0, 0, ReplayOutcome((zero,)), ReplayOutcome((zero,))).rows()
    assert len(charts.whatif_zero_metrics(rows)) == len(charts.WHATIF_METRICS)
    assert charts.whatif_figure(rows)["data"] == []
