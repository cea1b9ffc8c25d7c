"""End to end on the simulated cluster: a lender takes its GPUs back, the borrower is told to checkpoint now, then
what happened; one digest per person (the services, the engine and the outbox together)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from clusters.backends.simulated import simulated_cluster_tick_run
from notify import tasks
from notify.kinds import Kind
from notify.models import Event
from queues import services
from queues.models import Cohort, Job, ReclaimWithinCohort
from tests.factories import (
    ClusterFactory,
    DeviceFactory,
    MembershipFactory,
    NodeFactory,
    PriorityClassFactory,
    QuotaLineFactory,
    ResourceClassFactory,
    ResourceFlavorFactory,
    TeamQuotaFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db


def test_a_reclaimed_borrower_is_told_to_checkpoint_with_the_grace(settings):
    settings.SIMULATED_CHECKPOINT_SECONDS = 600
    cluster = ClusterFactory(name="sim")
    flavor = ResourceFlavorFactory(name="h100")
    DeviceFactory.create_batch(4, node=NodeFactory(cluster=cluster, flavor=flavor))
    rc = ResourceClassFactory(flavors=[flavor], allowed_counts=[1, 2, 4])
    PriorityClassFactory(name="normal", value=100, is_default=True)
    cohort = Cohort.objects.create(name="org")
    ada = MembershipFactory(user=UserFactory(username="ada")).user
    bob = MembershipFactory(user=UserFactory(username="bob")).user
    borrower = ada.memberships.get().team
    lender = bob.memberships.get().team
    for team, nominal in ((borrower, "0"), (lender, "4")):
        quota = TeamQuotaFactory(team=team, cluster=cluster, cohort=cohort,
                                 reclaim_within_cohort=ReclaimWithinCohort.ANY)  # fmt: skip
        QuotaLineFactory(team_quota=quota, flavor=flavor, nominal=nominal)
    t0 = timezone.now() - timedelta(seconds=60)

    def submit(user, team, name, at):
        spec = services.JobSpec(name=name, image="registry.example.org/ml/t:1", resource_class=rc, devices_per_pod=4,
                                checkpoint_path="/ckpt", checkpoint_signal="SIGUSR1", sim_runtime_seconds=86400)  # fmt: skip
        return services.job_submit(owner=user, team=team, spec=spec, now=at, notify_backend=False)

    def tick(seconds):
        simulated_cluster_tick_run(cluster_id=cluster.pk, now=t0 + timedelta(seconds=seconds))

    job = submit(ada, borrower, "borrowing", t0)
    tick(1)
    tick(2)
    job.refresh_from_db()
    assert (job.state, job.borrowing) == (Job.State.RUNNING, True)
    submit(bob, lender, "owner", t0 + timedelta(seconds=10))
    tick(11)
    job.refresh_from_db()
    assert job.state == Job.State.PREEMPTING
    [reclaim] = Event.objects.filter(recipient=ada, kind=Kind.RECLAIM)
    assert "checkpoint now" in reclaim.message
    assert reclaim.details["graceSeconds"] == 600
    tasks.deliver_pending()
    [to_ada] = [m for m in mail.outbox if m.to == [ada.email]]
    assert "borrowed GPUs will be reclaimed: checkpoint now" in to_ada.body
    left = int(to_ada.body.split(" s of grace left")[0].rsplit("(", 1)[1])
    assert 500 < left <= 600 - 49  # made about 50 s after the reclaim (t0 + 11 s, t0 a minute ago)
