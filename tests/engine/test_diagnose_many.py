"""Diagnosis of many workloads at once: shared explanations per queue and shape, one engine for reasons and ETAs."""

from __future__ import annotations

from queues.engine import (
    WhatIf,
    diagnose_many,
    estimate_admission,
    estimate_admissions,
    explain,
    explain_many,
    needs_replay,
    reasons,
)

from .builders import GPU, cq, node, state, wl


def _mixed_state():
    """Three cohort queues, full nodes: same-shape pending workloads in a plain queue (some fit now, most wait), in a
    queue that preempts (the answer depends on each one's priority and time) and in a StrictFIFO queue; one request
    that never fits."""
    queues = [
        cq("plain", {"f": {GPU: (8, 8)}}, cohort="c"),
        cq("preempts", {"f": {GPU: (8, 0)}}, cohort="c", within="LowerPriority", reclaim="Any"),
        cq("strict", {"f": {GPU: (8, 0)}}, cohort="c", strategy="StrictFIFO"),
    ]
    nodes = [node(f"n{i}", 8) for i in range(3)]
    workloads = [
        wl("plain/run", 6, admitted="plain", nodes=["n0"]),
        wl("preempts/run", 8, admitted="preempts", nodes=["n1"], priority=1),
        wl("strict/run", 4, admitted="strict", nodes=["n2"]),
    ]
    for i in range(6):
        workloads.append(wl(f"plain/p{i}", 2 if i % 2 else 4, created=1 + i, runtime=100 + 10 * i))
        workloads.append(wl(f"preempts/p{i}", 2, created=1 + i, priority=i % 3, runtime=50))
        workloads.append(wl(f"strict/p{i}", 2, created=1 + i, runtime=70))
    workloads.append(wl("plain/huge", 64, created=9))
    return state(queues, workloads, nodes=nodes)


END_TIMES = {"plain/run": 300.0, "preempts/run": 200.0, "strict/run": 250.0}


def _pending(s) -> list[str]:
    return sorted(w.key for w in s.workloads if w.admission is None)


def test_shared_explanations_equal_one_by_one(monkeypatch):
    s = _mixed_state()
    keys = _pending(s)
    calls = []
    original = reasons.explain_wl
    monkeypatch.setattr(reasons, "explain_wl", lambda engine, w, **kw: calls.append(w.key) or original(engine, w, **kw))
    many = explain_many(s, keys, 10)
    monkeypatch.undo()
    # The plain queue's two shapes (and its huge one) are explained once each; the other queues one by one.
    assert sorted(k for k in calls if k.startswith("plain/")) == ["plain/huge", "plain/p0", "plain/p1"]
    assert len(calls) == len(keys) - 4
    for key in keys:
        assert many[key] == explain(s, key, 10), key
    admissible = [k for k in keys if many[k].admissible]
    assert admissible
    assert all(many[k].assignment.workload == k for k in admissible)


def test_diagnose_many_equals_explaining_and_estimating_apart():
    s = _mixed_state()
    keys = _pending(s)
    found = diagnose_many(s, keys, 10, END_TIMES, horizon=10_000, default_runtime=60)
    assert found.explanations == explain_many(s, keys, 10)
    waiting = [k for k in keys if needs_replay(found.explanations[k])]
    assert set(found.admitted_at) == set(waiting)
    assert "plain/huge" not in waiting  # never fits: no replay needed
    apart = estimate_admissions(s, waiting, 10, END_TIMES, horizon=10_000, default_runtime=60)
    assert dict(found.admitted_at) == apart
    for key in waiting:
        alone = estimate_admission(s, key, 10, END_TIMES, horizon=10_000, default_runtime=60)
        assert found.admitted_at[key] == alone, key
    assert sum(v is not None for v in found.admitted_at.values()) >= 6


def test_whatif_answers_equal_explaining_each_copy_alone():
    s = _mixed_state()
    copies = [
        wl("plain/new", 3, created=20),
        wl("plain/new", 3, created=20),  # the same key, shape and times again: its first entry must be gone
        wl("plain/new", 2, created=20),
        wl("plain/new", 8, created=20, priority=3),
        wl("preempts/new", 4, created=20, priority=5),
        wl("preempts/new", 4, created=20, priority=0),
        wl("strict/new", 2, created=0.5),  # would be the StrictFIFO head
        wl("strict/new", 2, created=20),
        wl("plain/new", 64, created=20),
    ]
    whatif = WhatIf(s, 10)
    for copy in copies:
        assert whatif.explain(copy) == explain(s, copy, 10), copy
    codes = {explain(s, copy, 10).reason.code for copy in copies if explain(s, copy, 10).reason is not None}
    assert len(codes) >= 3  # the copies meet different answers
