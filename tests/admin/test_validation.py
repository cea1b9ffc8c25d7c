"""Policy validation rules: each message names the line, the value and the limit."""

from __future__ import annotations

import pytest

from pools.services import resource_class_check
from queues.models import Cohort
from queues.policy.validation import LineSpec, cohort_parent_check, quota_lines_check
from tests.factories import DeviceFactory, NodeFactory, ResourceFlavorFactory

pytestmark = pytest.mark.django_db


def _line(flavor, resource="nvidia.com/gpu", nominal="8", borrowing="", lending=""):
    return LineSpec(
        flavor=flavor, resource_name=resource, nominal=nominal, borrowing_limit=borrowing, lending_limit=lending
    )


def test_valid_lines_pass(pool):
    check = quota_lines_check(
        lines=[_line(pool.flavor, nominal="4", borrowing="4", lending="2")],
        in_cohort=True,
        owner="queue",
        cluster=pool.cluster,
    )
    assert (check.errors, check.warnings) == ([], [])


def test_lending_limit_above_nominal(pool):
    check = quota_lines_check(lines=[_line(pool.flavor, nominal="4", lending="6")], in_cohort=True, owner="queue")
    assert check.errors == [
        "h100 / nvidia.com/gpu: lending limit 6 is above the nominal quota 4; a queue can lend at most the quota it owns."
    ]


def test_lending_limit_compares_quantities_not_strings(pool):
    check = quota_lines_check(
        lines=[_line(pool.flavor, resource="memory", nominal="1Ti", lending="512Gi")], in_cohort=True, owner="queue"
    )
    assert check.errors == []


def test_borrowing_and_lending_without_cohort(pool):
    check = quota_lines_check(
        lines=[_line(pool.flavor, borrowing="8", lending="2")], in_cohort=False, owner="queue", cluster=pool.cluster
    )
    assert check.errors == [
        "h100 / nvidia.com/gpu: borrowing limit 8 has nobody to borrow from: the queue is in no cohort. "
        "Put it in a cohort, or clear the limit.",
        "h100 / nvidia.com/gpu: lending limit 2 has nobody to lend to: the queue is in no cohort. "
        "Put it in a cohort, or clear the limit.",
    ]
    cohort_check = quota_lines_check(lines=[_line(pool.flavor, borrowing="8")], in_cohort=False, owner="cohort")
    assert "the cohort has no parent" in cohort_check.errors[0]


def test_flavor_listed_twice(pool):
    check = quota_lines_check(
        lines=[_line(pool.flavor), _line(pool.flavor, nominal="2")], in_cohort=True, owner="queue"
    )
    assert check.errors == [
        "h100 / nvidia.com/gpu: the flavor is listed 2 times for this resource; give each (flavor, resource) one line."
    ]


def test_flavors_of_one_group_must_cover_the_same_resources(pool):
    other = ResourceFlavorFactory(name="a100")
    check = quota_lines_check(
        lines=[_line(pool.flavor), _line(pool.flavor, resource="cpu", nominal="64"), _line(other)],
        in_cohort=True,
        owner="queue",
    )
    assert check.errors == [
        "nvidia.com/gpu: flavors quote different resource sets ({cpu, nvidia.com/gpu} vs {nvidia.com/gpu}); Kueue "
        "needs every flavor of a resource group to cover the same resources: add the missing lines (nominal 0 is fine)."
    ]


def test_bad_and_negative_quantities_name_the_field(pool):
    check = quota_lines_check(lines=[_line(pool.flavor, nominal="-1", borrowing="lots")], in_cohort=True, owner="queue")
    assert check.errors[0] == "h100 / nvidia.com/gpu: nominal quota: invalid quantity '-1': must not be negative"
    assert check.errors[1].startswith("h100 / nvidia.com/gpu: borrowing limit: invalid quantity 'lots'")


def test_flavor_without_nodes_is_a_warning_not_an_error(pool):
    empty = ResourceFlavorFactory(name="mi300x", node_labels={"amd.com/gpu.product": "MI300X"})
    check = quota_lines_check(
        lines=[_line(empty, resource="amd.com/gpu")], in_cohort=True, owner="queue", cluster=pool.cluster
    )
    assert check.errors == []
    assert check.warnings == [
        "mi300x: no node of this flavor in cluster sim-east (labels {'amd.com/gpu.product': 'MI300X'}); "
        "its quota cannot be used until such nodes join."
    ]
    # Nodes of the flavor in another cluster do not count for this cluster's queue.
    NodeFactory(flavor=empty, name="amd-1")
    assert quota_lines_check(
        lines=[_line(empty, resource="amd.com/gpu")], in_cohort=True, owner="queue", cluster=pool.cluster
    ).warnings
    assert not quota_lines_check(lines=[_line(empty, resource="amd.com/gpu")], in_cohort=True, owner="cohort").warnings


def test_cohort_cycle(pool):
    a = pool.cohort
    b = Cohort.objects.create(name="b", parent=a)
    c = Cohort.objects.create(name="c", parent=b)
    assert cohort_parent_check(cohort=a, name="research", parent=c).errors == [
        "parent: cohort cycle research → c → b → research; a cohort cannot be its own ancestor."
    ]
    assert cohort_parent_check(cohort=a, name="research", parent=a).errors == [
        "parent: cohort cycle research → research; a cohort cannot be its own ancestor."
    ]
    assert cohort_parent_check(cohort=c, name="c", parent=a).errors == []
    assert cohort_parent_check(cohort=None, name="new", parent=c).errors == []


def test_class_whose_flavors_do_not_carry_its_resource(pool):
    from pools.models import ResourceClass
    from tests.admin.test_validation_support import spec_for

    mig = ResourceFlavorFactory(name="a100-mig", node_labels={"nvidia.com/gpu.product": "A100-MIG"})
    node = NodeFactory(cluster=pool.cluster, flavor=mig, name="mig-1")
    DeviceFactory(node=node, mig=True)
    check = resource_class_check(spec_for(slug="h100-on-mig", resource="nvidia.com/gpu", flavors=[mig]))
    assert check.errors["flavors"] == ["flavor a100-mig has nodes but none offers nvidia.com/gpu"]
    ok = resource_class_check(spec_for(slug="h100-ok", resource="nvidia.com/gpu", flavors=[pool.flavor]))
    assert ok.errors == {}
    assert ResourceClass.objects.filter(slug="h100-on-mig").count() == 0
