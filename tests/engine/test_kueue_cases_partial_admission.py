"""Kueue's partial admission (``minCount``): its search for the largest counts that fit
(pkg/scheduler/flavorassigner/podset_reducer_test.go, ``TestSearch``, at ff69552e) and the job integration test
that admits a Job with fewer pods (test/integration/singlecluster/controller/jobs/job/job_controller_test.go,
"Should schedule jobs with partial admission"), run as a scenario with a timeline. Each test names its case.
"""

from __future__ import annotations

import pytest

from queues.engine import explain, schedule
from queues.engine.model import PodSet
from queues.engine.partial_admission import largest_counts
from queues.engine.scenario import ScenarioError, loads_scenario

from .builders import GPU, cq, node, state, wl
from .timeline_builders import World, cluster_queue, flavor, flavor_quotas, history, local_queue, row, workload

INSTANCE = "cloud.provider.com/instance"


def _ps(name: str, count: int, minimum: int | None = None) -> PodSet:
    return PodSet(name=name, count=count, min_count=minimum)


def _search(pod_sets: list[PodSet], limit: int) -> tuple[int, bool]:
    counts = largest_counts(pod_sets, lambda c: sum(c) <= limit)
    return (sum(counts), True) if counts is not None else (0, False)


FIVE_FOUR = [_ps("ps1", 5, 3), _ps("ps2", 5, 4), _ps("ps3", 5, 1), _ps("ps4", 5, 2)]


@pytest.mark.parametrize(
    ("case", "pod_sets", "limit", "want"),
    [
        ("empty", [], 10, (0, False)),
        ("partial not available", [_ps("ps1", 1), _ps("ps2", 2, 2)], 2, (0, False)),
        ("partial available", FIVE_FOUR, 15, (15, True)),
        ("one partial available", [_ps("ps1", 5, 3), _ps("ps2", 5), _ps("ps3", 5), _ps("ps4", 5)], 19, (19, True)),
        ("to min", FIVE_FOUR, 10, (10, True)),
        ("to max", FIVE_FOUR, 20, (20, True)),
        ("no overflow", [_ps(f"ps{i}", 150_000, 1) for i in range(1, 9)], 150_000, (150_000, True)),
        (
            "max pods on 1.27",
            [_ps("ps1", 150_000, 1), *[_ps(f"ps{i}", 1) for i in range(2, 9)]],
            150_000,
            (150_000, True),
        ),
        ("podset with replica count 0", [_ps("ps1", 0, 0)], 0, (0, False)),
    ],
)
def test_search(case, pod_sets, limit, want):
    """TestSearch/<case> (the reducer walks the variable pod sets down together, by binary search)."""
    assert _search(pod_sets, limit) == want, case


def job_suite() -> World:
    """The job controller suite's prod-cq (cohort prod): spot-tainted (5 CPUs, borrowingLimit 0, its taint not
    tolerated) and on-demand (5 CPUs)."""
    return World(
        flavor("on-demand", **{INSTANCE: "on-demand"}),
        flavor("spot-tainted", {"key": INSTANCE, "value": "spot-tainted", "effect": "NoSchedule"}),
        cluster_queue(
            "prod-cq",
            flavor_quotas("spot-tainted", cpu=("5", "0")),
            flavor_quotas("on-demand", cpu="5"),
            cohort="prod",
        ),
        local_queue("prod-queue", "prod-cq"),
    )


def test_job_admitted_with_fewer_pods_once_partial_admission_is_enabled():
    """Job controller/"Should schedule jobs with partial admission": a Job of parallelism 5 × 2 CPUs stays suspended
    (10 CPUs, on-demand has 5); with the annotation ``kueue.x-k8s.io/job-min-parallelism: "1"`` Kueue re-creates its
    workload with ``minCount: 1`` and admits it with 2 pods (4 CPUs of on-demand, usage 4)."""
    world = job_suite()
    world.at("0s", create=workload("job-job1", "prod-queue", "2", count=5))
    world.at("10s", "min-parallelism", delete="Workload/ns/job-job1")
    world.at("10s", create=workload("job-job1", "prod-queue", "2", count=5, min_count=1))
    suspended = world.run(until="9s")
    assert row(suspended, "job-job1")["state"] == "pending"
    doc = world.run()
    job = row(doc, "job-job1")
    assert job["state"] == "admitted"
    assert job["podSets"] == [{"name": "main", "count": 2, "flavors": {"cpu": "on-demand"}, "nodes": []}]
    assert job["admittedAt"] == 10.0
    assert doc["summary"]["clusterQueues"]["prod-cq"]["utilization"] is not None


def test_preempted_workload_comes_back_with_the_largest_count_that_fits():
    """A workload with ``minCount`` is admitted whole while it fits (6 of 6 CPUs); preempted by a higher-priority
    one of 2 CPUs, it is admitted again at once with the largest count that fits then (4 pods): Kueue searches from
    the spec's count each time it evaluates the workload, and a partially admitted workload keeps its count while
    it runs."""
    world = job_suite()
    world.add(
        cluster_queue(
            "preempting-cq", flavor_quotas("on-demand", cpu="6"), preemption={"withinClusterQueue": "LowerPriority"}
        ),
        local_queue("preempting", "preempting-cq"),
    )
    world.at("0s", create=workload("big", "preempting", "1", count=6, min_count=2))
    world.at("1s", create=workload("blocker", "preempting", "1", count=2, priority=10))
    world.at("2s", finish="Workload/ns/blocker")
    whole = world.run(until="0s")
    assert row(whole, "big")["podSets"][0]["count"] == 6
    doc = world.run()
    assert history(doc, "big") == [(0.0, "created"), (0.0, "admitted"), (1.0, "preempted"), (1.0, "admitted")]
    assert row(doc, "big")["podSets"] == [{"name": "main", "count": 4, "flavors": {"cpu": "on-demand"}, "nodes": []}]


def test_min_count_out_of_range_is_an_input_error():
    """Kueue's webhook (test/integration/singlecluster/webhook/core/workload_test.go, "invalid podSet minCount (too
    big)"): a minCount above the pod set's count is refused, naming the field."""
    bad = workload("wl", "prod-queue", "1", count=3, min_count=4)
    with pytest.raises(ScenarioError) as info:
        loads_scenario(World(bad).text())
    assert str(info.value) == "Workload/ns/wl: spec.podSets[0].minCount: must be an integer from 0 to count (3), got 4"


# ------------------------------------------------------------------------------------------------ the engine's API


def _reducible(key: str, count: int, minimum: int, *, priority: int = 0, created: float = 1.0):
    return wl(key, pod_sets=[PodSet("main", count, {GPU: 1}, min_count=minimum)], priority=priority, created=created)


def test_explain_and_schedule_agree_on_the_reduced_count():
    """``explain`` says a workload that fits only with fewer pods is admissible, with the counts ``schedule`` then
    admits it with (and on nodes, the pods of that count)."""
    s = state(
        [cq("team", {"f": {"nvidia.com/gpu": 8}})],
        [wl("team/running", 4, admitted="team", created=0.0, nodes=["n1"]), _reducible("team/sweep", 6, 2)],
        nodes=[node("n1", 8, labels={})],
    )
    seen = explain(s, "team/sweep", 10)
    assert seen.admissible
    assert [p.count for p in seen.assignment.pod_sets] == [4]
    result = schedule(s, 10)
    (decision,) = result.admitted
    assert decision.workload == "team/sweep"
    assert [(p.count, len(p.nodes), p.usage) for p in decision.pod_sets] == [(4, 4, {"nvidia.com/gpu": 4})]


def test_reduced_count_reached_by_preemption():
    """No reduction fits, but one within ``minCount`` can preempt a lower-priority workload: Kueue's search takes
    an assignment that has preemption targets too (``fits`` with targets); ``explain`` names the victims."""
    s = state(
        [cq("team", {"f": {"nvidia.com/gpu": 4}}, within="LowerPriority")],
        [wl("team/low", 4, admitted="team", created=0.0), _reducible("team/sweep", 6, 2, priority=10)],
    )
    seen = explain(s, "team/sweep", 10)
    assert seen.reason.code == "preemption_in_progress"
    assert seen.preemption_targets == ("team/low",)
    assert "fewer pods (main: 4 of 6, partial admission)" in seen.reason.message
    result = schedule(s, 10)
    assert [p.victim for p in result.preemptions] == ["team/low"]
