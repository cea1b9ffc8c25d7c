"""Cases of Kueue's ``TestScheduleForTASPreemption`` and ``TestScheduleForTASCohorts``
(pkg/scheduler/scheduler_tas_test.go), run through one engine cycle.

Transcribed from kubernetes-sigs/kueue main at commit 03efb7f0df84659c34ff0100286eac6491e72836 (Apache-2.0), in
this repository's own builders (``tas_builders``); each test names its upstream case. The last two cases are
where the engine differs from Kueue (an assignment recomputed within the cycle); the tests pin the engine's
behaviour and say what Kueue does, and docs/engine.md ("Known differences") says why it stays.
"""

from __future__ import annotations

from queues.engine import schedule
from queues.engine.model import LocalQueue, Node, Taint, Toleration

from .builders import cq
from .tas_builders import (
    CPU,
    DEFAULT_TAS,
    HOST,
    MEM,
    PODS,
    assignments,
    host,
    main_queue,
    pending,
    pod_set,
    q,
    running,
    tas_flavor,
    tas_state,
)

# --------------------------------------------------------------------------------- TestScheduleForTASPreemption


def _preemption_case(*workloads, queue=None, nodes=None, **kw):
    # Kueue's defaultSingleNode here: x1 with 5 CPUs, 5Gi and 10 pods; tas-main preempts LowerPriority within.
    queue = queue or main_queue(within="LowerPriority")
    return tas_state([queue], workloads, flavors=kw.pop("flavors", [DEFAULT_TAS]), nodes=nodes or [x5("x1")], **kw)


def x5(name: str) -> Node:
    """A node of 5 CPUs, 5Gi and 10 pods."""
    return host(name, "5", "5Gi")


def victims(result) -> set[tuple[str, str]]:
    return {(p.victim, p.reason) for p in result.preemptions}


def test_preempted_by_quota_while_on_a_deleted_node():
    """TestScheduleForTASPreemption/"workload preempted due to quota is using deleted Node": the victim's pod is on
    z1, which no longer exists; it is chosen for quota, and foo waits for it."""
    s = _preemption_case(
        pending("foo", pod_set("one", 10, cpu="1", preferred=HOST), priority=3),
        running(
            "low-priority-admitted",
            "tas-main",
            (pod_set("one", 1, cpu="5", required=HOST), "tas-default", ["z1"]),
            priority=1,
        ),
        queue=main_queue({"tas-default": {CPU: q("10"), MEM: q("10Gi", MEM)}}, within="LowerPriority"),
        nodes=[x5("x1"), x5("y1")],
    )
    result = schedule(s, 10)
    assert victims(result) == {("default/low-priority-admitted", "InClusterQueue")}
    assert not result.admitted
    assert result.preemptions[0].message == (
        "Preempted to accommodate a workload (UID: wl-foo, JobUID: job-foo) due to prioritization in the "
        "ClusterQueue; preemptor path: /tas-main; preemptee path: /tas-main"
    )
    assert result.pending["default/foo"].kueue_message == (
        "couldn't assign flavors to pod set one: insufficient unused quota for cpu in flavor tas-default, 5 more "
        "needed. Pending the preemption of 1 workload(s)"
    )


def test_preemption_frees_enough_pods_under_a_pods_quota():
    """TestScheduleForTASPreemption/"preemption frees enough Pods when the ClusterQueue has pods quota": the node
    would hold foo's 7 pods with low-4 gone, but the pods quota of 7 needs both victims."""
    s = _preemption_case(
        pending("foo", pod_set("one", 7, cpu="1", required=HOST), priority=1),
        running(
            "low-4", "tas-main", (pod_set("one", 4, cpu="1", required=HOST), "tas-default", ["x1"] * 4), pods_quota=True
        ),
        running(
            "low-3", "tas-main", (pod_set("one", 3, cpu="1", required=HOST), "tas-default", ["x1"] * 3), pods_quota=True
        ),
        queue=main_queue({"tas-default": {CPU: q("50"), PODS: 7}}, within="LowerPriority"),
        nodes=[host("x1", "50", "50Gi", pods=10)],
    )
    result = schedule(s, 10)
    assert victims(result) == {("default/low-4", "InClusterQueue"), ("default/low-3", "InClusterQueue")}
    assert result.pending["default/foo"].kueue_message == (
        "couldn't assign flavors to pod set one: insufficient unused quota for pods in flavor tas-default, 7 more "
        "needed. Pending the preemption of 2 workload(s)"
    )


def test_preemption_for_podspec_memory():
    """TestScheduleForTASPreemption/"preemption; TAS uses podspec memory for fit": 4Gi does not fit next to 2Gi
    on a 5Gi node."""
    s = _preemption_case(
        pending("foo", pod_set("one", 1, cpu="1", memory="4Gi", preferred=HOST), priority=3),
        running(
            "low-priority-admitted",
            "tas-main",
            (pod_set("one", 1, cpu="1", memory="2Gi", required=HOST), "tas-default", ["x1"]),
            priority=1,
        ),
    )
    result = schedule(s, 10)
    assert victims(result) == {("default/low-priority-admitted", "InClusterQueue")}
    assert result.pending["default/foo"].kueue_message == (
        "couldn't assign flavors to pod set one: topology \"tas-single-level\" doesn't allow to fit any of 1 pod(s). "
        'Total nodes: 1; excluded: resource "memory": 1. Pending the preemption of 1 workload(s)'
    )


def test_pods_count_pressure_only_low_priority_preempted():
    """TestScheduleForTASPreemption/"With pods count usage pressure on nodes: only low priority workload is
    preempted" (x1 allows one pod; its CPUs are what the preemptor lacks)."""
    node = host("x1", "5", "5Gi", pods=1)
    s = _preemption_case(
        pending("high-priority-waiting", pod_set("one", 1, cpu="2", preferred=HOST), priority=3),
        running(
            "low-priority-admitted",
            "tas-main",
            (pod_set("one", 1, cpu="5", required=HOST), "tas-default", ["x1"]),
            priority=1,
        ),
        nodes=[node],
    )
    result = schedule(s, 10)
    assert victims(result) == {("default/low-priority-admitted", "InClusterQueue")}
    assert result.pending["default/high-priority-waiting"].kueue_message == (
        "couldn't assign flavors to pod set one: topology \"tas-single-level\" doesn't allow to fit any of 1 pod(s). "
        'Total nodes: 1; excluded: resource "cpu": 1. Pending the preemption of 1 workload(s)'
    )


def test_low_priority_preempted_mid_priority_survives():
    """TestScheduleForTASPreemption/"low priority workload is preempted, mid-priority workload survives"."""
    two = pod_set("one", 1, cpu="2", required=HOST)
    s = _preemption_case(
        pending("foo", pod_set("one", 1, cpu="2", preferred=HOST), priority=3),
        running("mid-priority-admitted", "tas-main", (two, "tas-default", ["x1"]), priority=2),
        running("low-priority-admitted", "tas-main", (two, "tas-default", ["x1"]), priority=1),
    )
    result = schedule(s, 10)
    assert victims(result) == {("default/low-priority-admitted", "InClusterQueue")}
    assert result.pending["default/foo"].kueue_message == (
        "couldn't assign flavors to pod set one: topology \"tas-single-level\" doesn't allow to fit any of 1 pod(s). "
        'Total nodes: 1; excluded: resource "cpu": 1. Pending the preemption of 1 workload(s)'
    )


def test_low_priority_preempted_for_fragmented_capacity():
    """TestScheduleForTASPreemption/"low priority workload is preempted even though there is enough capacity, but
    fragmented": one CPU free on each node, and both pods must share one node."""
    four = pod_set("one", 1, cpu="4", required=HOST)
    s = _preemption_case(
        pending("foo", pod_set("one", 2, cpu="1", required=HOST), priority=3),
        running("mid-priority-admitted", "tas-main", (four, "tas-default", ["x1"]), priority=2),
        running("low-priority-admitted", "tas-main", (four, "tas-default", ["y1"]), priority=1),
        nodes=[x5("x1"), x5("y1")],
    )
    result = schedule(s, 10)
    assert victims(result) == {("default/low-priority-admitted", "InClusterQueue")}
    assert result.pending["default/foo"].kueue_message == (
        'couldn\'t assign flavors to pod set one: topology "tas-single-level" allows to fit only 1 out of 2 pod(s). '
        "Pending the preemption of 1 workload(s)"
    )


def test_equal_priority_waits_for_running_workloads():
    """TestScheduleForTASPreemption/"workload with equal priority awaits for other workloads to complete": the head
    may not preempt its equal, waits for quota, and the smaller workload behind it is not admitted in this cycle."""
    s = _preemption_case(
        pending("low-priority-which-would-fit", pod_set("one", 1, cpu="1", required=HOST), priority=1),
        pending("mid-priority-waiting", pod_set("one", 2, cpu="1", required=HOST), priority=2),
        running(
            "mid-priority-admitted",
            "tas-main",
            (pod_set("one", 1, cpu="4", required=HOST), "tas-default", ["x1"]),
            priority=2,
        ),
    )
    result = schedule(s, 10)
    assert not result.preemptions
    assert not result.admitted
    reason = result.pending["default/mid-priority-waiting"]
    assert reason.kueue_reason == "WaitingForQuota"
    assert reason.kueue_message == (
        'couldn\'t assign flavors to pod set one: topology "tas-single-level" allows to fit only 1 out of 2 pod(s)'
    )


def test_preempts_in_two_resources_after_fit_becomes_preempt_through_fragmentation():
    """TestScheduleForTASPreemption/"preempt in multiple flavors out of which one requires update Fit -> Preempt due
    to fragmentation": memory quota needs low-mem gone; cpu quota fits, but no node has 3 CPUs free until low-cpu
    goes too."""
    s = _preemption_case(
        running(
            "low-cpu",
            "tas-main",
            (pod_set("one", 2, cpu="3", required=HOST), "tas-default", ["x1", "y1"]),
            priority=-1000,
        ),
        running(
            "low-mem",
            "tas-main",
            (pod_set("one", 2, cpu="10m", memory="5Gi", required=HOST), "tas-default", ["x1", "y1"]),
            priority=-1000,
        ),
        pending("high-priority", pod_set("one", 1, cpu="3", memory="5Gi", required=HOST), priority=0),
        queue=main_queue({"tas-default": {CPU: q("10"), MEM: q("10Gi", MEM)}}, within="LowerPriority"),
        nodes=[x5("x1"), x5("y1")],
    )
    result = schedule(s, 10)
    assert victims(result) == {("default/low-cpu", "InClusterQueue"), ("default/low-mem", "InClusterQueue")}
    assert result.pending["default/high-priority"].kueue_message == (
        "couldn't assign flavors to pod set one: insufficient unused quota for memory in flavor tas-default, 5Gi more "
        "needed. Pending the preemption of 2 workload(s)"
    )


def test_sibling_flavor_usage_on_a_shared_node_forces_preemption():
    """TestScheduleForTASPreemption/"sibling-flavor usage on the shared node forces same-flavor preemption": w2 in
    flavor-b uses 3 of x1's 5 CPUs, so w3 in flavor-a preempts w1 (its flavor's only lower-priority workload)."""

    def flavor(v):
        return tas_flavor(f"flavor-{v}", node_taints=(Taint("example.com/flavor", v, "NoSchedule"),))

    def tolerating(v, cpu):
        toleration = Toleration("example.com/flavor", "Equal", v, "NoSchedule")
        return pod_set("one", 1, cpu=cpu, memory=f"{cpu}Gi", preferred=HOST, tolerations=(toleration,))

    both = {CPU: q("5"), MEM: q("5Gi", MEM)}
    s = _preemption_case(
        pending("w3-pending", tolerating("a", "2"), priority=5),
        running("w1-low-prio-a", "tas-main", (tolerating("a", "1"), "flavor-a", ["x1"]), priority=1),
        running("w2-sibling-b", "tas-main", (tolerating("b", "3"), "flavor-b", ["x1"]), priority=1),
        queue=main_queue({"flavor-a": dict(both), "flavor-b": dict(both)}, within="LowerPriority"),
        flavors=[flavor("a"), flavor("b")],
    )
    result = schedule(s, 10)
    assert victims(result) == {("default/w1-low-prio-a", "InClusterQueue")}
    assert result.pending["default/w3-pending"].kueue_message == (
        "couldn't assign flavors to pod set one: topology \"tas-single-level\" doesn't allow to fit any of 1 pod(s). "
        'Total nodes: 1; excluded: resource "cpu": 1. Pending the preemption of 1 workload(s)'
    )


# ------------------------------------------------------------- cohort cases: the engine differs (docs/engine.md)


def _cohort_queue(name: str, nominal: str, *, borrowing: str | None = None, within: str = "LowerPriority"):
    quota = {CPU: q(nominal) if borrowing is None else (q(nominal), q(borrowing))}
    if borrowing is None:
        quota[MEM] = q("4Gi", MEM)
    return cq(name, {"tas-default": quota}, cohort="tas-cohort-main", within=within, reclaim="Any")


def _cohort_local_queues():
    return [LocalQueue("default", f"tas-lq-{c}", f"tas-cq-{c}") for c in "abc"]


def test_overlapping_preemption_targets_are_skipped_not_recomputed():
    """TestScheduleForTASPreemption/"preempting workload recomputes both overlapping preemption targets and TAS
    topology assignment; both features enabled": wl-high-1 reclaims x1 from wl-low-admitted. Kueue (v0.20+,
    RecomputeAssignmentUponPreemptionTargetsOverlap and TASRecomputeAssignmentWithinSchedulingCycle on by default)
    recomputes wl-high-2's targets and takes wl-mid-admitted on y1; the engine skips wl-high-2 for this cycle with
    "overlapping preemption targets" (a difference kept, docs/engine.md)."""
    three = pod_set("one", 1, cpu="3", required=HOST)
    s = tas_state(
        [
            _cohort_queue("tas-cq-a", "5", borrowing="10"),
            _cohort_queue("tas-cq-b", "5", borrowing="10"),
            _cohort_queue("tas-cq-c", "0", borrowing="10"),
        ],
        [
            running("wl-low-admitted", "tas-cq-c", (three, "tas-default", ["x1"]), priority=1, queue="tas-lq-c"),
            running("wl-mid-admitted", "tas-cq-c", (three, "tas-default", ["y1"]), priority=2, queue="tas-lq-c"),
            pending("wl-high-1", three, priority=10, created=1.0, queue="tas-lq-a"),
            pending("wl-high-2", three, priority=10, created=2.0, queue="tas-lq-b"),
        ],
        flavors=[DEFAULT_TAS],
        nodes=[x5("x1"), x5("y1")],
        local_queues=_cohort_local_queues(),
    )
    result = schedule(s, 10)
    assert victims(result) == {("default/wl-low-admitted", "InCohortReclamation")}  # Kueue: + wl-mid-admitted
    assert result.preemptions[0].message == (
        "Preempted to accommodate a workload (UID: wl-wl-high-1, JobUID: job-wl-high-1) due to reclamation within "
        "the cohort; preemptor path: /tas-cohort-main/tas-cq-a; preemptee path: /tas-cohort-main/tas-cq-c"
    )
    assert result.pending["default/wl-high-1"].kueue_message == (
        "couldn't assign flavors to pod set one: topology \"tas-single-level\" doesn't allow to fit any of 1 pod(s). "
        'Total nodes: 2; excluded: resource "cpu": 2. Pending the preemption of 1 workload(s)'
    )
    assert result.pending["default/wl-high-2"].kueue_message == (
        "Workload has overlapping preemption targets with another workload"
    )


def test_capacity_reserved_by_a_preemptor_is_not_recomputed_into_a_new_preemption():
    """TestScheduleForTASCohorts/"reclaim within cohort; capacity reserved by preempting workload does not allow to
    schedule last workload; TASRecomputeAssignmentWithinSchedulingCycle enabled": b1 reclaims a2 and a3 to get 3
    CPUs on y1, as in Kueue. c1 had been nominated the last free CPU of y1, which b1 now holds: Kueue (v0.19+)
    recomputes c1's assignment and reclaims a1 for it; the engine leaves c1 with "no longer fits" for this cycle
    (a difference kept, docs/engine.md)."""

    def one(n):
        return pod_set("one", n, cpu="1", required=HOST)

    s = tas_state(
        [
            _cohort_queue("tas-cq-a", "4"),
            _cohort_queue("tas-cq-b", "4", within="Never"),
            _cohort_queue("tas-cq-c", "4", within="Never"),
        ],
        [
            running(
                "a1-admitted",
                "tas-cq-a",
                (one(5), "tas-default", ["x1"] * 3 + ["y1"] * 2),
                priority=2,
                queue="tas-lq-a",
            ),
            running("a2-admitted", "tas-cq-a", (one(1), "tas-default", ["y1"]), priority=1, queue="tas-lq-a"),
            running("a3-admitted", "tas-cq-a", (one(1), "tas-default", ["y1"]), priority=1, queue="tas-lq-a"),
            pending("b1", one(3), priority=3, queue="tas-lq-b"),
            pending("c1", pod_set("one", 1, cpu="1", preferred=HOST), priority=1, queue="tas-lq-c"),
        ],
        flavors=[DEFAULT_TAS],
        nodes=[host("x1", "3", "5Gi"), host("y1", "5", "3Gi")],
        local_queues=_cohort_local_queues(),
    )
    result = schedule(s, 10)
    by_preemptor = {(p.victim, p.preemptor, p.reason) for p in result.preemptions}
    assert by_preemptor == {
        ("default/a2-admitted", "default/b1", "InCohortReclamation"),
        ("default/a3-admitted", "default/b1", "InCohortReclamation"),
    }  # Kueue: + (a1-admitted, c1, InCohortReclamation)
    assert result.pending["default/b1"].kueue_message == (
        'couldn\'t assign flavors to pod set one: topology "tas-single-level" allows to fit only 1 out of 3 pod(s). '
        'Total nodes: 2; excluded: resource "cpu": 1. Pending the preemption of 2 workload(s)'
    )
    assert not result.admitted
    assert result.pending["default/c1"].kueue_message == "Workload no longer fits after processing another workload"


# ------------------------------------------------------------------------------- TestScheduleForTASCohorts


def _two_node_cohort(*workloads, queues=None, nodes=None, flavors=(DEFAULT_TAS,)):
    # x1: 3 CPUs / 5Gi, y1: 5 CPUs / 3Gi; tas-cq-a (withinClusterQueue LowerPriority) and tas-cq-b, 4 CPUs and 4Gi
    # each, reclaimWithinCohort Any, in tas-cohort-main.
    queues = queues or [_cohort_queue("tas-cq-a", "4"), _cohort_queue("tas-cq-b", "4", within="Never")]
    return tas_state(
        queues,
        workloads,
        flavors=list(flavors),
        nodes=nodes or [host("x1", "3", "5Gi"), host("y1", "5", "3Gi")],
        local_queues=_cohort_local_queues(),
    )


def _plain_cohort_queue(name: str, flavors: dict):
    return cq(name, {f: {CPU: q(v)} for f, v in flavors.items()}, cohort="tas-cohort-main")


def test_re_evaluation_sticks_to_the_first_flavor():
    """TestScheduleForTASCohorts/"two flavors in cohort; re-evaluation is sticky and does not switch to second
    flavor; TASRecomputeAssignmentWithinSchedulingCycle enabled": a1 takes node-1, the only node of tas-flavor-1
    that both were nominated; b1 stays pending instead of moving to tas-flavor-2 in this cycle. (Kueue's message for
    b1 is the topology text it recomputed; the engine's is "no longer fits".)"""

    def node(name, flavor):
        return host(name, "8", **{"tas-flavor": flavor})

    flavors = [
        tas_flavor("tas-flavor-1", labels={"tas-flavor": "f1"}),
        tas_flavor("tas-flavor-2", labels={"tas-flavor": "f2"}),
    ]
    eight = pod_set("one", 1, cpu="8", required=HOST)
    s = _two_node_cohort(
        pending("a1", eight, priority=10, created=0.0, queue="tas-lq-a"),
        pending("b1", eight, priority=5, created=60.0, queue="tas-lq-b"),
        queues=[
            _plain_cohort_queue("tas-cq-a", {"tas-flavor-1": "8"}),
            _plain_cohort_queue("tas-cq-b", {"tas-flavor-1": "8", "tas-flavor-2": "8"}),
        ],
        nodes=[node("node-1", "f1"), node("node-2", "f2")],
        flavors=flavors,
    )
    result = schedule(s, 100)
    assert assignments(result) == {"default/a1": {"one": ("tas-flavor-1", {"node-1": 1})}}
    assert "default/b1" in result.pending


def test_two_workloads_nominated_to_the_same_node_both_admitted():
    """TestScheduleForTASCohorts/"two workloads in cohort nominated to the same node; enough capacity to admit both;
    TASRecomputeAssignmentWithinSchedulingCycle enabled": b1 is placed again, on node-2."""
    eight = pod_set("one", 1, cpu="8", required=HOST)
    s = _two_node_cohort(
        pending("a1", eight, priority=10, created=0.0, queue="tas-lq-a"),
        pending("b1", eight, priority=5, created=60.0, queue="tas-lq-b"),
        queues=[
            _plain_cohort_queue("tas-cq-a", {"tas-default": "8"}),
            _plain_cohort_queue("tas-cq-b", {"tas-default": "8"}),
        ],
        nodes=[host("node-1", "8"), host("node-2", "8")],
    )
    assert assignments(schedule(s, 100)) == {
        "default/a1": {"one": ("tas-default", {"node-1": 1})},
        "default/b1": {"one": ("tas-default", {"node-2": 1})},
    }


def test_two_workloads_overlapping_in_the_initial_assignment_both_admitted():
    """TestScheduleForTASCohorts/"two workloads considered; both overlapping in the initial flavor assignment;
    TASRecomputeAssignmentWithinSchedulingCycle enabled"."""
    two = pod_set("one", 1, cpu="2", preferred=HOST)
    s = _two_node_cohort(pending("a1", two, priority=2, queue="tas-lq-a"), pending("b1", two, queue="tas-lq-b"))
    assert assignments(schedule(s, 10)) == {
        "default/a1": {"one": ("tas-default", {"x1": 1})},
        "default/b1": {"one": ("tas-default", {"y1": 1})},
    }


def test_room_for_one_on_the_initial_node_the_other_moves():
    """TestScheduleForTASCohorts/"two small workloads considered; there is only space for one of them on the initial
    node; TASRecomputeAssignmentWithinSchedulingCycle enabled"."""
    s = _two_node_cohort(
        pending("a1", pod_set("one", 1, cpu="1", preferred=HOST), priority=2, queue="tas-lq-a"),
        pending("b1", pod_set("one", 3, cpu="1", preferred=HOST), priority=1, queue="tas-lq-b"),
    )
    assert assignments(schedule(s, 10)) == {
        "default/a1": {"one": ("tas-default", {"x1": 1})},
        "default/b1": {"one": ("tas-default", {"y1": 3})},
    }


def _y1_only(a1_priority: int, reclaim: str, *workloads):
    queue_a = cq(
        "tas-cq-a",
        {"tas-default": {CPU: (q("8"), 0), MEM: (q("4Gi", MEM), 0)}},
        cohort="tas-cohort-main",
        within="LowerPriority",
        reclaim=reclaim,
    )
    a1 = running(
        "a1-admitted",
        "tas-cq-a",
        (pod_set("one", 2, cpu="1", required=HOST), "tas-default", ["y1", "y1"]),
        priority=a1_priority,
        queue="tas-lq-a",
    )
    return _two_node_cohort(
        a1,
        pending("a2", pod_set("one", 4, cpu="1", preferred=HOST), priority=2, queue="tas-lq-a"),
        pending("b1", pod_set("one", 3, cpu="1", preferred=HOST), priority=1, queue="tas-lq-b"),
        queues=[queue_a, _cohort_queue("tas-cq-b", "4", within="Never")],
        nodes=[host("y1", "5", "3Gi")],
    )


def test_preemptor_with_targets_holds_its_nodes_against_a_lower_priority_workload():
    """TestScheduleForTASCohorts/"preempting workload with targets reserves capacity so that lower priority workload
    cannot use it; TASRecomputeAssignmentWithinSchedulingCycle enabled"."""
    result = schedule(_y1_only(1, "Any"), 10)
    assert victims(result) == {("default/a1-admitted", "InClusterQueue")}
    assert result.preemptions[0].message == (
        "Preempted to accommodate a workload (UID: wl-a2, JobUID: job-a2) due to prioritization in the ClusterQueue; "
        "preemptor path: /tas-cohort-main/tas-cq-a; preemptee path: /tas-cohort-main/tas-cq-a"
    )
    assert result.pending["default/a2"].kueue_message == (
        'couldn\'t assign flavors to pod set one: topology "tas-single-level" allows to fit only 3 out of 4 pod(s). '
        "Pending the preemption of 1 workload(s)"
    )
    assert not result.admitted  # b1 does not get y1's room


def test_preemptor_without_targets_holds_quota_only():
    """TestScheduleForTASCohorts/"preempting workload without targets reserves capacity so that lower priority
    workload cannot use it; TASRecomputeAssignmentWithinSchedulingCycle enabled": a2 may not preempt its equal and
    reclaimWithinCohort is LowerPriority, so Kueue reserves the quota and the empty-cluster TAS placement a2 would
    get, and b1 (3 pods) is not admitted. The engine reserves the quota only, so b1 gets y1's 3 free CPUs (a
    difference kept, docs/engine.md)."""
    result = schedule(_y1_only(2, "LowerPriority"), 10)
    assert not result.preemptions
    # Kueue: "... allows to fit only 3 out of 4 pod(s)"; the engine explains a2 after the cycle, with b1 on y1.
    assert result.pending["default/a2"].kueue_reason == "WaitingForQuota"
    assert assignments(result) == {"default/b1": {"one": ("tas-default", {"y1": 3})}}  # Kueue: b1 stays pending


def test_preemptor_with_a_stale_nominated_node_is_placed_again():
    """TestScheduleForTASCohorts/"workload with preemption target recomputes stale TAS assignment in cohort;
    TASRecomputeAssignmentWithinSchedulingCycle enabled": a1 takes node-2, which b1 was nominated; b1 is placed
    again on node-3 and preempts b-low-admitted for its queue's quota."""
    queue_b = cq("tas-cq-b", {"tas-default": {CPU: (q("2"), 0)}}, cohort="tas-cohort-main", within="LowerPriority")
    two = pod_set("one", 1, cpu="2", preferred=HOST)
    s = _two_node_cohort(
        running(
            "b-low-admitted",
            "tas-cq-b",
            (pod_set("one", 1, cpu="1", required=HOST), "tas-default", ["node-1"]),
            priority=1,
            queue="tas-lq-b",
        ),
        pending("a1", two, priority=2, created=0.0, queue="tas-lq-a"),
        pending("b1", two, priority=2, created=60.0, queue="tas-lq-b"),
        queues=[_plain_cohort_queue("tas-cq-a", {"tas-default": "2"}), queue_b],
        nodes=[host("node-1", "1"), host("node-2", "2"), host("node-3", "2")],
    )
    result = schedule(s, 100)
    assert assignments(result) == {"default/a1": {"one": ("tas-default", {"node-2": 1})}}
    assert {(p.victim, p.preemptor, p.reason) for p in result.preemptions} == {
        ("default/b-low-admitted", "default/b1", "InClusterQueue")
    }


def test_two_pod_sets_exceed_the_node_pods_capacity():
    """TestScheduleForTASCohorts/"workload with two PodSets exceeds node pods capacity": x1 allows one pod, so pod
    set two does not fit next to pod set one. Kueue: TopologyPlacementFailed (the empty-cluster probe keeps the
    workload's own first pod set); the engine's probe places each pod set alone, so it reports WaitingForQuota
    (a difference kept, docs/engine.md). The message is Kueue's."""
    one, two = pod_set("one", 1, cpu="1", required=HOST), pod_set("two", 1, cpu="1", required=HOST)
    s = _two_node_cohort(
        pending("foo", one, two, queue="tas-lq-a"),
        queues=[_cohort_queue("tas-cq-a", "4")],
        nodes=[host("x1", "2", pods=1)],
    )
    result = schedule(s, 10)
    assert not result.admitted
    reason = result.pending["default/foo"]
    assert reason.kueue_message == (
        "couldn't assign flavors to pod set two: topology \"tas-single-level\" doesn't allow to fit any of 1 pod(s). "
        'Total nodes: 1; excluded: resource "pods": 1'
    )
    assert reason.kueue_reason == "WaitingForQuota"  # Kueue: TopologyPlacementFailed


def test_workload_that_borrows_gets_scheduled():
    """TestScheduleForTASCohorts/"workload which requires borrowing gets scheduled": 6 pods in a queue of 4 CPUs,
    spread as Kueue does, 5 on y1 and 1 on x1."""
    s = _two_node_cohort(pending("a1", pod_set("one", 6, cpu="1", preferred=HOST), queue="tas-lq-a"))
    result = schedule(s, 10)
    assert assignments(result) == {"default/a1": {"one": ("tas-default", {"x1": 1, "y1": 5})}}
    assert result.admitted[0].borrowing


def _cpus(name: str, queue: str, nodes: list[str], priority: int = 0):
    return running(
        name,
        f"tas-cq-{queue}",
        (pod_set("one", len(nodes), cpu="1", required=HOST), "tas-default", nodes),
        priority=priority,
        queue=f"tas-lq-{queue}",
    )


def test_reclaim_within_cohort_single_borrowing_workload_preempted():
    """TestScheduleForTASCohorts/"reclaim within cohort; single borrowing workload gets preempted" (Kueue's fixture
    puts a1-admitted's 5 pods on the 3-CPU x1; the engine takes the admission as given)."""
    s = _two_node_cohort(
        _cpus("a1-admitted", "a", ["x1"] * 5),
        pending("b1", pod_set("one", 4, cpu="1", preferred=HOST), queue="tas-lq-b"),
    )
    result = schedule(s, 10)
    assert victims(result) == {("default/a1-admitted", "InCohortReclamation")}
    assert result.preemptions[0].message == (
        "Preempted to accommodate a workload (UID: wl-b1, JobUID: job-b1) due to reclamation within the cohort; "
        "preemptor path: /tas-cohort-main/tas-cq-b; preemptee path: /tas-cohort-main/tas-cq-a"
    )
    assert result.pending["default/b1"].kueue_message == (
        "couldn't assign flavors to pod set one: insufficient unused quota for cpu in flavor tas-default, 1 more "
        "needed. Pending the preemption of 1 workload(s)"
    )


def test_reclaim_within_cohort_one_of_three_candidates():
    """TestScheduleForTASCohorts/"reclaim within cohort; single workload is preempted out three candidates": the
    lowest-priority borrower alone frees both the quota and a node."""
    s = _two_node_cohort(
        _cpus("a1-admitted", "a", ["x1"] * 5, priority=1),
        _cpus("a2-admitted", "a", ["y1"] * 2, priority=2),
        _cpus("a3-admitted", "a", ["y1"], priority=2),
        pending("b1", pod_set("one", 3, cpu="1", preferred=HOST), priority=3, queue="tas-lq-b"),
    )
    result = schedule(s, 10)
    assert victims(result) == {("default/a1-admitted", "InCohortReclamation")}
    assert result.pending["default/b1"].kueue_message == (
        "couldn't assign flavors to pod set one: insufficient unused quota for cpu in flavor tas-default, 3 more "
        "needed. Pending the preemption of 1 workload(s)"
    )
