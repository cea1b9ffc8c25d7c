"""``flavorFungibility.preference`` (issue 16, item 2; Kueue pkg/scheduler/flavorassigner ``isPreferred``).

Worked example: queue ``a`` has 4 GPUs of flavor ``f1`` (all used by its own low-priority ``a/low``) and none
of ``f2``, where its cohort peer ``b`` lends 4. ``a/high`` (4 GPUs, priority 10) can run on ``f1`` by
preempting ``a/low`` (no borrowing) or on ``f2`` by borrowing (no preemption). Both fungibility policies are
``TryNextFlavor``, so every flavor is tried and the preference decides: ``BorrowingOverPreemption`` (the
default) borrows ``f2``; ``PreemptionOverBorrowing`` preempts on ``f1``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from queues.engine import ResourceFlavor, schedule
from queues.engine.scenario import ScenarioError, loads_scenario

from .builders import GPU, cq, state, wl


def _state(preference: str):
    a = cq(
        "a",
        {"f1": {GPU: 4}, "f2": {GPU: 0}},
        cohort="c",
        within="LowerPriority",
        when_borrow="TryNextFlavor",
        when_preempt="TryNextFlavor",
    )
    a = replace(a, flavor_fungibility=replace(a.flavor_fungibility, preference=preference))
    b = cq("b", {"f1": {GPU: 0}, "f2": {GPU: 4}}, cohort="c")
    return state(
        [a, b],
        [wl("a/low", 4, admitted="a", flavor="f1"), wl("a/high", 4, priority=10, created=1)],
        flavors=[ResourceFlavor("f1"), ResourceFlavor("f2")],
    )


def test_borrowing_over_preemption_borrows():
    result = schedule(_state("BorrowingOverPreemption"), 5)
    (decision,) = result.admitted
    assert decision.workload == "a/high"
    assert decision.pod_sets[0].flavors == {GPU: "f2"}
    assert not result.preemptions


def test_preemption_over_borrowing_preempts_within_nominal():
    result = schedule(_state("PreemptionOverBorrowing"), 5)
    assert not result.admitted
    assert [(p.victim, p.preemptor) for p in result.preemptions] == [("a/low", "a/high")]


def test_scenario_file_reads_and_validates_the_preference():
    base = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: f1}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: a}
spec:
  namespaceSelector: {}
  flavorFungibility: {FUNG}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: f1
      resources: [{name: nvidia.com/gpu, nominalQuota: 4}]
"""
    ok = loads_scenario(
        base.replace(
            "{FUNG}",
            "{whenCanBorrow: TryNextFlavor, whenCanPreempt: TryNextFlavor, preference: PreemptionOverBorrowing}",
        ),
        source="p.yaml",
    )
    assert ok.state.cluster_queues[0].flavor_fungibility.preference == "PreemptionOverBorrowing"
    with pytest.raises(ScenarioError, match="preference"):
        loads_scenario(base.replace("{FUNG}", "{preference: PreemptionOverBorrowing}"), source="p.yaml")
    with pytest.raises(ScenarioError, match="preference"):
        loads_scenario(
            base.replace(
                "{FUNG}", "{whenCanBorrow: TryNextFlavor, whenCanPreempt: TryNextFlavor, preference: Sometimes}"
            ),
            source="p.yaml",
        )
