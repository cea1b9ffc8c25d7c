"""Cases of Kueue's ``TestAssignFlavors`` (pkg/scheduler/flavorassigner/flavorassigner_test.go), run as a cycle.

These cases date from releases where each resource listed its own flavors; they are written here with one
resource group per resource (a flavor may sit in one resource group only, so the memory flavors carry their
own names) and with CPU in tenths so that 4.1 CPUs stays an integer. Each test names its upstream case.
"""

from __future__ import annotations

from queues.engine import schedule

from .builders import cq, group, state, wl

CPU = "cpu"
MEM = "memory"
MI = 1
GI = 1024


def test_single_flavor_used_resources_does_not_fit():
    """TestAssignFlavors/"single flavor, used resources, doesn't fit"."""
    s = state(
        [cq("q", {"default": {CPU: 40}})],
        [wl("q/used", requests={CPU: 30}, admitted="q", flavor="default"), wl("q/wl", requests={CPU: 20}, created=1)],
    )
    result = schedule(s, 10)
    assert not result.admitted
    assert result.pending["q/wl"].kueue_reason


def _two_groups():
    return cq(
        "q",
        groups=[
            group({"one": {CPU: 20}, "two": {CPU: 40}}),
            group({"mem-one": {MEM: 1 * GI}, "mem-two": {MEM: 5 * MI}}),
        ],
    )


def test_multiple_flavors_fits():
    """TestAssignFlavors/"multiple flavors, fits": cpu goes to the second flavor, memory to the first."""
    s = state([_two_groups()], [wl("q/wl", requests={CPU: 30, MEM: 10 * MI})])
    [decision] = schedule(s, 10).admitted
    assert dict(decision.pod_sets[0].flavors) == {CPU: "two", MEM: "mem-one"}


def test_multiple_flavors_does_not_fit():
    """TestAssignFlavors/"multiple flavors, doesn't fit": 4.1 CPUs exceed every flavor."""
    s = state([_two_groups()], [wl("q/wl", requests={CPU: 41, MEM: 10 * MI})])
    result = schedule(s, 10)
    assert not result.admitted
    assert "q/wl" in result.pending
