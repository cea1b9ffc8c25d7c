"""Clusters that random property runs found, replayed as fixed cases of the property they were drawn for."""

from __future__ import annotations

from dataclasses import replace

from queues.engine import settle

from .regressions import preemption_settles_20261204
from .test_properties import _check_preemptions_settle


def test_capacity_freed_for_a_preemptor_may_go_to_a_higher_priority_preemptor_first():
    first, later = preemption_settles_20261204.DRAWN
    first = replace(first, nodes=())
    before = settle(first, 10.0)
    _check_preemptions_settle(first, before)
    s = replace(before.state, workloads=before.state.workloads + later)
    final = settle(s, 30.0)
    _check_preemptions_settle(s, final)
    admitted = [d.workload for c in final.cycles for d in c.admitted]
    victims = [(p.victim, p.preemptor) for c in final.cycles for p in c.preemptions]
    # q0/w7 evicted q0/w2; q1/w5 (priority 2 > 1) then reclaimed its own queue and took the capacity.
    assert ("q0/w2", "q0/w7") in victims
    assert "q1/w5" in admitted
    assert "q0/w7" not in admitted
