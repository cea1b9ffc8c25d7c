"""Why a job waits, from what real Kueue and kube-scheduler write: quota, borrowing limit, no matching flavor,
capacity — the code, the sentence on the job page, and Kueue's own text kept beside it."""

from __future__ import annotations

import html

import pytest
from django.urls import reverse

from queues.models import Cohort
from testbed import kwok
from tests.factories import ResourceClassFactory, ResourceFlavorFactory

pytestmark = pytest.mark.django_db

LONG = ["sleep", "3600"]
A100 = "NVIDIA-A100-SXM4-80GB"


def _waiting(world, job):
    """Sync until the job has a wait reason; the job."""
    return world.until(f"{job.name} to wait", lambda: (j := world.job(job)).state == "pending" and j.wait_reason and j)


def _page(client, world, job) -> str:
    client.force_login(world.user)
    return html.unescape(client.get(reverse("queues:job_detail", args=[job.pk])).content.decode())


def test_quota_exhausted(world, client):
    running = [world.submit(f"run{i}", gpus=8, command=LONG) for i in range(2)]
    for job in running:
        world.until_state(job, "running")
    waiting = _waiting(world, world.submit("third", gpus=8, command=LONG))
    assert waiting.wait_reason == "quota_exhausted"
    assert waiting.kueue_message.startswith("couldn't assign flavors to pod set main: insufficient unused quota")
    assert waiting.wait_details["resource"] == "nvidia.com/gpu"  # Kueue names cpu and memory first
    assert "16 GPUs on H100" in waiting.wait_message
    assert waiting.wait_message in _page(client, world, waiting)


def test_borrowing_limit_with_idle_capacity_in_the_cohort(world, client):
    cohort = Cohort.objects.create(name=f"{world.prefix}-research")
    world.quota.cohort = cohort
    world.quota.save()
    world.quota.lines.filter(resource_name="nvidia.com/gpu").update(nominal="8", borrowing_limit="8")
    world.quota.lines.filter(resource_name="cpu").update(nominal="64", borrowing_limit="64")
    world.quota.lines.filter(resource_name="memory").update(nominal="512Gi", borrowing_limit="512Gi")
    world.add_team("nlp", gpus=16, cohort=cohort)
    assert world.push().errors == []
    own, borrowed = world.submit("own", gpus=8, command=LONG), world.submit("borrowed", gpus=8, command=LONG)
    world.until_state(own, "running")
    assert world.until_state(borrowed, "running").borrowing
    waiting = _waiting(world, world.submit("third", gpus=8, command=LONG))
    assert waiting.wait_reason == "borrow_limit", (waiting.wait_reason, waiting.wait_message, waiting.kueue_message)
    assert "borrowing limit" in waiting.wait_message
    assert waiting.kueue_message  # Kueue's own text is kept beside the sentence
    assert "borrowing limit" in _page(client, world, waiting)


def test_no_matching_flavor_when_the_quota_is_on_other_hardware(world, kubectl):
    """A class on A100s for a team whose ClusterQueue has H100 quota only: Kueue tries the H100 flavor and says
    it does not match the pods' node affinity."""
    kubectl.apply(kwok.gpu_node(f"{world.prefix}-a100", product=A100, rack="rack-9"))
    try:
        flavor = ResourceFlavorFactory(
            name=f"a100-{world.prefix}", display_name="A100", node_labels={"nvidia.com/gpu.product": A100}
        )
        a100 = ResourceClassFactory(
            slug=f"a100-{world.prefix}",
            name="A100 80GB",
            flavors=[flavor],
            cpu_per_device="8",
            memory_per_device="64Gi",
        )
        world.sync()
        waiting = _waiting(world, world.submit("wrong-hw", gpus=8, command=LONG, resource_class=a100))
        assert waiting.wait_reason == "no_matching_flavor", (waiting.wait_reason, waiting.kueue_message)
        assert f"flavor {world.flavor.name} doesn't match node affinity" in waiting.kueue_message
    finally:
        kubectl.delete("Node", f"{world.prefix}-a100")


def test_capacity_when_quota_admits_more_than_the_nodes_hold(world, kubectl):
    """Quota of 48 GPUs on 32: Kueue admits the fifth job of 8, kube-scheduler finds no node for its pod."""
    world.quota.lines.filter(resource_name="nvidia.com/gpu").update(nominal="48")
    world.quota.lines.filter(resource_name="cpu").update(nominal="384")
    world.quota.lines.filter(resource_name="memory").update(nominal="3Ti")
    assert world.push().errors == []
    jobs = [world.submit(f"fill{i}", gpus=8, command=LONG) for i in range(4)]
    for job in jobs:
        world.until_state(job, "running")
    extra = world.submit("extra", gpus=8, command=LONG)
    extra = world.until(
        "extra blocked by capacity", lambda: (j := world.job(extra)).wait_reason == "class_exhausted" and j
    )
    assert extra.state in ("pending", "admitted")
    assert "Insufficient nvidia.com/gpu" in extra.kueue_message or "nvidia.com/gpu" in str(extra.wait_details)
