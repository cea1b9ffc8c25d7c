"""Validation jobs get a queue by construction: the validation team's queue covers every flavor of the cluster.

Issue 32: the burn-in job of a repair ticket was submitted in a team with no queue in the cluster, so in a cluster
run by Kueue it waited for ever ("the queue 'main' does not exist in namespace platform-validation") and the GPU
never left validation. Starting a validation now makes (or widens) the queue first, in the same transaction; a
queue that cannot serve is an admin error on the action, and the ticket stays in repair.
"""

from __future__ import annotations

import pytest

from kernel.errors import Conflict
from pools.health import tickets
from pools.health.ingest import health_ingest_scrape
from pools.health.services import Actor
from pools.models import HealthState, RepairTicket
from queues.diagnosis import job_diagnosis
from queues.health_jobs import validation_queue_ensure
from queues.models import PolicyPush, QuotaLine, Team, TeamQuota
from queues.policy.whatif import policy_configuration
from tests.factories import DeviceFactory, NodeFactory, ResourceFlavorFactory, TeamFactory, TeamQuotaFactory
from tests.health.scrapes import exposition, gpu

pytestmark = pytest.mark.django_db
SLUG = "platform-validation"


def _in_repair(pool) -> RepairTicket:
    health_ingest_scrape(text=exposition([gpu(pool.devices[0], DCGM_FI_DEV_XID_ERRORS=79)]), now=pool.at(0))
    ticket = RepairTicket.objects.get()
    assert ticket.state == RepairTicket.State.IN_REPAIR
    return ticket


def test_starting_validation_gives_the_job_a_queue_in_its_cluster(pool, django_capture_on_commit_callbacks):
    assert not Team.objects.filter(slug=SLUG).exists()
    ticket = _in_repair(pool)
    with django_capture_on_commit_callbacks() as callbacks:
        run = tickets.ticket_start_validation(ticket=ticket, actor=Actor.of(pool.admin), now=pool.at(100))
    quota = TeamQuota.objects.get(team__slug=SLUG, cluster=pool.cluster)
    assert quota.cohort is None  # its own queue: it lends nothing and borrows nothing
    assert list(quota.lines.values_list("flavor__name", "resource_name", "nominal")) == [
        ("h100", "nvidia.com/gpu", "4")  # the largest node has four GPUs: a whole-node burn-in fits
    ]
    push = PolicyPush.objects.get(cluster=pool.cluster)
    assert push.reason == f"validation queue {SLUG} created: nvidia.com/gpu 4"
    assert callbacks  # the push and the job go to the cluster after commit

    # What the cluster is told: the job's LocalQueue exists in its namespace and points at that ClusterQueue.
    config = policy_configuration(cluster=pool.cluster, nodes=False)
    [local] = [lq for lq in config.local_queues if lq.namespace == SLUG]
    assert (local.name, local.cluster_queue) == ("main", SLUG)
    # The job page's diagnosis of the pending burn-in job is not "Queue misconfigured".
    diagnosis = job_diagnosis(run.job, now=pool.at(100))
    assert diagnosis.code != "misconfigured", diagnosis.message


def test_the_queue_is_ensured_idempotently_and_widened_never_narrowed(pool):
    first = validation_queue_ensure(slug=SLUG, cluster=pool.cluster)
    assert validation_queue_ensure(slug=SLUG, cluster=pool.cluster) == first
    assert PolicyPush.objects.count() == 1  # nothing changed the second time: no push

    # A new flavor joins the cluster (an 8-GPU node): the queue covers it, at its size, and pushes once.
    mi = ResourceFlavorFactory(name="mi300x")
    node = NodeFactory(cluster=pool.cluster, flavor=mi, name="mi-0")
    for index in range(8):
        DeviceFactory(node=node, index=index, vendor="amd", resource_name="amd.com/gpu")
    validation_queue_ensure(slug=SLUG, cluster=pool.cluster)
    assert set(first.lines.values_list("flavor__name", "resource_name", "nominal")) == {
        ("h100", "nvidia.com/gpu", "4"),
        ("mi300x", "amd.com/gpu", "8"),
    }
    assert PolicyPush.objects.count() == 2
    # An admin raised the H100 line: ensuring again keeps the admin's larger figure.
    QuotaLine.objects.filter(team_quota=first, resource_name="nvidia.com/gpu").update(nominal="6")
    validation_queue_ensure(slug=SLUG, cluster=pool.cluster)
    assert first.lines.get(resource_name="nvidia.com/gpu").nominal == "6"


def test_a_queue_that_cannot_serve_is_an_admin_error_and_the_ticket_stays_in_repair(pool):
    ticket = _in_repair(pool)
    validation_queue_ensure(slug=SLUG, cluster=pool.cluster)
    TeamQuota.objects.filter(team__slug=SLUG).update(stop_policy=TeamQuota.StopPolicy.HOLD)
    with pytest.raises(Conflict, match=r"validation queue platform-validation on cluster sim is stopped \(Hold\)"):
        tickets.ticket_start_validation(ticket=ticket, actor=Actor.of(pool.admin), now=pool.at(100))
    ticket.refresh_from_db()
    pool.devices[0].refresh_from_db()
    assert ticket.state == RepairTicket.State.IN_REPAIR
    assert pool.devices[0].health == HealthState.QUARANTINED
    assert not ticket.validation_runs.exists()


def test_a_queue_name_taken_by_another_team_is_named(pool):
    TeamQuotaFactory(team=TeamFactory(slug="ml", name="ML"), cluster=pool.cluster, cluster_queue_name=SLUG)
    with pytest.raises(Conflict, match="is team ML's queue"):
        validation_queue_ensure(slug=SLUG, cluster=pool.cluster)
