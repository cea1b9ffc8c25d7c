"""Reservations as quota (``queues.engine.reservations``): the arithmetic, the engine at a window's edges, the ETA
that knows windows, and the wait reason that names a reservation (``reservation_reasons``)."""

from __future__ import annotations

from dataclasses import replace

from queues.engine import estimate_admission, explain, explain_many, settle
from queues.engine.model import Cohort, QuotaHold
from queues.engine.reservations import edges_after, hold_quota, in_force
from queues.engine.scheduler import Engine
from queues.engine.simulation import Replay
from tests.engine.builders import GPU, cq, group, node, state, wl


def hold(name="r", queue="speech", count=8, start=100.0, end=200.0, flavor="f", **kw) -> QuotaHold:
    return QuotaHold(
        name=name, cluster_queue=queue, flavor=flavor, resource=GPU, count=count, start=start, end=end, **kw
    )


def quotas(held) -> dict[str, tuple]:
    """Queue or cohort name → (nominal, borrowing limit, lending limit) of f/GPU."""
    out = {}
    for owner in (*held.cluster_queues, *held.cohorts):
        for g in owner.resource_groups:
            for fq in g.flavors:
                for r in fq.resources:
                    if (fq.name, r.name) == ("f", GPU):
                        out[owner.name] = (r.nominal, r.borrowing_limit, r.lending_limit)
    return out


def three_teams(vision=8, nlp=8, speech=0, *, nlp_lending=None):
    return [
        cq("vision", {"f": {GPU: vision}}, cohort="org", reclaim="Any"),
        cq("nlp", {"f": {GPU: (nlp, None, nlp_lending)}}, cohort="org"),
        cq("speech", {"f": {GPU: (speech, 0)}}, cohort="org"),
    ]


# --------------------------------------------------------------------------- the arithmetic


def test_hold_moves_the_count_from_the_rest_of_the_cohort_in_proportion():
    # vision 8 and nlp 8 give 8 in proportion: 4 each; speech 0 → 8 with lending limit 0 (its old nominal): all
    # 8 guaranteed. The total stays 16.
    held = hold_quota(three_teams(), [], [hold()])
    assert quotas(held) == {"vision": (4, None, None), "nlp": (4, None, None), "speech": (8, 0, 0)}
    (outcome,) = held.outcomes
    assert outcome.moved == 8
    assert outcome.problem == ""
    assert {(s.name, s.delta) for s in outcome.shifts} == {("vision", -4), ("nlp", -4), ("speech", 8)}
    speech = next(q for q in held.cluster_queues if q.name == "speech")
    assert speech.preemption.reclaim_within_cohort == "Any"
    assert sum(v[0] for v in quotas(held).values()) == 16


def test_hold_split_rounds_by_largest_remainder_then_name():
    # 5 from vision 8 and nlp 4: 5·8/12 = 3.33 → 3, 5·4/12 = 1.67 → 1, one left: nlp's remainder (0.67) is larger.
    held = hold_quota(three_teams(nlp=4), [], [hold(count=5)])
    assert quotas(held)["vision"][0] == 5
    assert quotas(held)["nlp"][0] == 2
    # 2 from 8 and 8: 1 each; 1 from 8 and 8: equal remainders, the first by name (nlp) gives it
    assert quotas(hold_quota(three_teams(), [], [hold(count=2)]))["nlp"][0] == 7
    one = quotas(hold_quota(three_teams(), [], [hold(count=1)]))
    assert (one["nlp"][0], one["vision"][0]) == (7, 8)


def test_hold_keeps_the_holders_lending_limit_and_caps_donors_lending_limits():
    # nlp lends at most 6 of its 8; after giving 4 its nominal is 4 and its lending limit comes down to 4.
    queues = [
        cq("vision", {"f": {GPU: (8, None, 2)}}, cohort="org"),
        cq("nlp", {"f": {GPU: (8, None, 6)}}, cohort="org"),
    ]
    held = hold_quota(queues, [], [hold(queue="vision", count=8)])
    # vision's lending limit 2 stays: its guaranteed part (nominal − lending) grows from 6 to 14
    assert quotas(held) == {"vision": (16, None, 2), "nlp": (0, None, 0)}


def test_hold_reaches_sibling_subtrees_and_cohort_quota_of_the_whole_tree():
    # org ─┬─ research (vision 8, nlp 8)    product (speech 0), and org itself holds 8: 24 in the tree.
    cohorts = [
        Cohort("org", resource_groups=(group({"f": {GPU: 8}}),)),
        Cohort("research", parent="org"),
        Cohort("product", parent="org"),
    ]
    queues = [
        cq("vision", {"f": {GPU: 8}}, cohort="research"),
        cq("nlp", {"f": {GPU: 8}}, cohort="research"),
        cq("speech", {"f": {GPU: (0, 0)}}, cohort="product"),
        cq("outsider", {"f": {GPU: 8}}, cohort="elsewhere"),
    ]
    held = hold_quota(queues, cohorts, [hold(count=12)])
    assert quotas(held) == {
        "vision": (4, None, None),
        "nlp": (4, None, None),
        "speech": (12, 0, 0),
        "outsider": (8, None, None),
        "org": (4, None, None),
    }


def test_later_holds_do_not_take_what_earlier_ones_reserved():
    # vision reserves 8 (all of nlp's 8: vision 16, lending limit 8), then nlp reserves 8: of vision's 16 only the 8
    # not reserved may go, so each ends with 8, all of it its reservation's (nlp's lending limit: its old nominal, 0).
    queues = [cq("vision", {"f": {GPU: 8}}, cohort="org"), cq("nlp", {"f": {GPU: 8}}, cohort="org")]
    first = hold(name="a", queue="vision", count=8, start=0)
    second = hold(name="b", queue="nlp", count=8, start=1)
    held = hold_quota(queues, [], [first, second])
    assert quotas(held) == {"vision": (8, None, 8), "nlp": (8, None, 0)}
    assert [o.moved for o in held.outcomes] == [8, 8]


def test_hold_that_the_tree_cannot_give_moves_what_it_can_and_says_why():
    held = hold_quota(three_teams(vision=2, nlp=2), [], [hold(count=8)])
    (outcome,) = held.outcomes
    assert outcome.moved == 4
    assert "has 4 of f/nvidia.com/gpu to give, 8 reserved" in outcome.problem
    assert quotas(held)["speech"][0] == 4
    lonely = hold_quota([cq("speech", {"f": {GPU: 4}})], [], [hold()])
    assert lonely.outcomes[0].moved == 0
    assert "in no cohort" in lonely.outcomes[0].problem
    missing = hold_quota(three_teams(), [], [hold(flavor="g")])
    assert "has no quota of g/nvidia.com/gpu" in missing.outcomes[0].problem


def test_in_force_and_edges():
    a, b = hold(name="a", start=10, end=20), hold(name="b", start=20, end=30)
    assert in_force([a, b], 9.9) == ()
    assert in_force([a, b], 10) == (a,)
    assert in_force([a, b], 20) == (b,)  # the end is exclusive
    assert edges_after([a, b], 10) == [
        (20.0, "reservation a closes; reservation b opens"),
        (30.0, "reservation b closes"),
    ]


# --------------------------------------------------------------------------- the engine at the edges


def _world(*, speech_jobs=(), start_holds=None):
    """16 GPUs on two nodes; vision runs three 4-GPU jobs (one borrowed from nlp's idle quota), nlp one."""
    start_holds = (hold(),) if start_holds is None else start_holds
    workloads = [wl(f"vision/train-{i}", 4, created=0.0, runtime=10_000.0) for i in "abc"]
    workloads.append(wl("nlp/pretrain", 4, created=0.0, runtime=10_000.0))
    workloads += list(speech_jobs)
    base = state(three_teams(), workloads, nodes=[node("n1"), node("n2")])
    return replace(base, reservations=tuple(start_holds))


def test_engine_applies_only_the_holds_in_force_at_its_time():
    world = _world()
    assert Engine(world, 50.0).holds == ()
    engine = Engine(world, 150.0)
    assert [h.name for h in engine.holds] == ["r"]
    assert engine.cqs["speech"].spec.resource_groups[0].flavors[0].resources[0].nominal == 8
    # the state keeps its quota without the holds: an export rebuilt later applies those then in force
    assert engine.export_state().cluster_queues == world.cluster_queues


def test_no_reservation_decides_exactly_as_before():
    world = _world(start_holds=())
    plain = replace(world, reservations=())
    far = replace(world, reservations=(hold(start=1e9, end=2e9),))
    assert settle(plain, 0.0).cycles == settle(far, 0.0).cycles
    assert settle(plain, 0.0).pending == settle(far, 0.0).pending


def test_replay_reclaims_borrowers_when_the_window_opens_and_returns_quota_at_its_end():
    eval_job = replace(wl("speech/eval", 4, count=2, created=30.0, runtime=50.0), submit_at=30.0)
    world = _world()
    engine = Engine(replace(world, workloads=world.workloads), 0.0)
    replay = Replay(engine, start=0.0)
    replay.decisions = []
    replay.submit_at(eval_job, 30.0)
    replay.run(until=400.0)
    by = [(t, k, what, after) for t, k, what, _, after in replay.decisions]
    # at 100 the window opens: two of vision's borrowing jobs are reclaimed and eval starts at that instant
    opened = [d for d in by if d[0] == 100.0]
    assert "speech/eval" in {d[1] for d in opened if d[2] == "admitted"}
    assert len([d for d in opened if d[2] == "preempted"]) == 2
    assert all(d[3] == "reservation r opens" for d in opened)
    # at 200 it closes: quota is back and the preempted vision jobs start again
    closed = [d for d in by if d[0] == 200.0]
    assert {d[2] for d in closed} == {"admitted"}
    assert all(d[1].startswith("vision/") for d in closed)
    assert [(t, label) for t, label, *_ in replay.reservation_log] == [
        (100.0, "reservation r opens"),
        (200.0, "reservation r closes"),
    ]
    assert engine.cqs["speech"].spec.resource_groups[0].flavors[0].resources[0].nominal == 0


def test_eta_of_the_holders_job_is_the_windows_opening_and_of_a_blocked_job_its_end():
    eval_job = wl("speech/eval", 4, count=2, created=30.0, runtime=50.0)
    world = _world(speech_jobs=[eval_job])
    running = {f"vision/train-{i}": 10_000.0 for i in "abc"} | {"nlp/pretrain": 10_000.0}
    settled = settle(replace(world, reservations=()), 0.0).state
    at_30 = replace(settled, reservations=world.reservations)
    assert estimate_admission(at_30, "speech/eval", 30.0, running) == 100.0
    # inside the window, after eval ended, a vision job waiting behind the reserved GPUs starts when it closes
    engine = Engine(at_30, 30.0)
    Replay(engine, start=30.0, end_times=running).run(until=160.0)
    inside = engine.export_state()
    waiting = sorted(w.key for w in inside.workloads if w.admission is None and w.namespace == "vision")
    assert len(waiting) == 2
    ends = {w.key: 10_000.0 for w in inside.workloads if w.admission is not None}
    assert estimate_admission(inside, waiting[0], 160.0, ends) == 200.0


def test_wait_reason_names_the_reservation_only_when_it_is_the_cause():
    # the window is open, speech's eval has ended: its 8 reserved GPUs are idle but not lendable
    base = state(three_teams(), [], nodes=[node("n1"), node("n2")])
    running = [
        wl("vision/train-a", 4, admitted="vision", nodes=["n1"], admitted_at=0.0),
        wl("nlp/pretrain", 4, admitted="nlp", nodes=["n1"], admitted_at=0.0),
    ]
    waiting = wl("nlp/finetune", 4, created=120.0)
    world = replace(base, workloads=(*running, waiting), reservations=(hold(until="17:00 UTC", holder="Speech"),))
    reason = explain(world, "nlp/finetune", 150.0).reason
    assert reason.code == "capacity_reserved"
    assert reason.message == (
        "8 f GPUs are reserved for Speech until 17:00 UTC (reservation r); without that reservation this job would "
        "start now."
    )
    assert reason.details["underlying"]["code"] in ("quota_exhausted", "borrow_limit", "class_exhausted")
    assert reason.details["reservations"][0]["name"] == "r"
    assert reason.kueue_message.startswith("couldn't assign flavors")
    # outside the window the same job starts now; a job too big to start without the hold keeps its own reason
    assert explain(world, "nlp/finetune", 250.0).admissible
    big = wl("nlp/big", 16, created=120.0)
    other = explain(replace(world, workloads=(*running, big)), "nlp/big", 150.0).reason
    assert other.code != "capacity_reserved"
    # the holder's own jobs never blame its reservation; many explanations agree with one
    many = explain_many(world, ["nlp/finetune"], 150.0)
    assert many["nlp/finetune"].reason == reason


def test_settle_pending_reasons_carry_the_reservation():
    # 12 reserved: vision 8 → 2 and nlp 8 → 2; nlp runs 4 (borrowing 2), vision's new 4-GPU job cannot borrow the
    # reserved (guaranteed) 12 although 12 GPUs are free; without the hold it would fit vision's own 8
    base = state(three_teams(), [], nodes=[node("n1"), node("n2")])
    running = [wl("nlp/pretrain", 4, admitted="nlp", nodes=["n1"], admitted_at=0.0)]
    world = replace(base, workloads=(*running, wl("vision/new", 4, created=120.0)), reservations=(hold(count=12),))
    result = settle(world, 150.0)
    assert result.pending["vision/new"].code == "capacity_reserved"
    assert not result.cycles or all(not c.admitted for c in result.cycles)
