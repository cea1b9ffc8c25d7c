"""A reservation's window on a Kubernetes cluster: the ClusterQueues the portal applies (over HTTP, validated
against Kueue's CRDs) change at the window's edges through the audited push path, ahead of the start, are not
mistaken for drift while the window is open, cannot be adopted then, and return at its end."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from clusters.kube_sync.config import kube_config_adopt, kube_config_push
from clusters.models import KubeConfigObject
from clusters.push import policy_push_run
from kernel.errors import Conflict
from queues.diagnosis import job_diagnosis
from queues.models import Cohort, Job, Membership, PolicyPush, QuotaLine, Reservation, TeamQuota
from queues.reservations.services import reservation_edges_apply, reservation_request
from tests.factories import MembershipFactory, TeamFactory, UserFactory
from tests.kube.cluster import at

pytestmark = pytest.mark.django_db

GPU = "nvidia.com/gpu"


@pytest.fixture
def teams(portal, cluster, world):
    """vision (16 H100) and speech (4) in cohort org, each reclaiming what it lent; frank leads speech (the inventory
    synced: 16 H100 on two nodes)."""
    org = Cohort.objects.create(name="org")
    portal.quota.cohort = org
    portal.quota.reclaim_within_cohort = "LowerPriority"
    portal.quota.save()
    speech = TeamFactory(slug="speech", name="Speech", namespace="team-speech", local_queue_name="main")
    quota = TeamQuota.objects.create(team=speech, cluster=cluster, cluster_queue_name="speech", cohort=org)
    QuotaLine.objects.create(team_quota=quota, flavor=portal.flavor, resource_name=GPU, nominal="4")
    frank = UserFactory(username="frank")
    MembershipFactory(team=speech, user=frank, role=Membership.Role.LEAD)
    return type("Teams", (), {"speech": speech, "frank": frank, "org": org})


def _gpu(emulator, name: str) -> dict:
    spec = emulator.get_obj("ClusterQueue", name)["spec"]
    resources = spec["resourceGroups"][0]["flavors"][0]["resources"]
    entry = next(r for r in resources if r["name"] == GPU)
    return {**entry, "reclaimWithinCohort": spec["preemption"]["reclaimWithinCohort"]}


def test_the_window_edges_reach_kueue_through_the_audited_push(portal, teams, cluster, api, emulator):
    now = timezone.now()
    kube_config_push(cluster=cluster, api=api, now=now)
    assert _gpu(emulator, "speech") == {"name": GPU, "nominalQuota": "4", "reclaimWithinCohort": "Never"}
    row = reservation_request(
        team=teams.speech,
        user=teams.frank,
        resource_class=portal.rc,
        count=8,
        starts_at=now + timedelta(hours=1),
        ends_at=now + timedelta(hours=3),
        purpose="evaluation run",
        now=now,
    )
    assert row.state == Reservation.State.APPROVED, row.reasons
    lead = timedelta(seconds=settings.RESERVATION_LEAD_SECONDS)

    # nothing is pushed before the lead; at start − lead the opening is recorded and pushed through PolicyPush
    assert reservation_edges_apply(now=row.starts_at - lead - timedelta(seconds=1)) == []
    opened = row.starts_at - lead
    reservation_edges_apply(now=opened)
    push = PolicyPush.objects.get()
    assert "opens" in push.reason
    policy_push_run(push_id=push.pk, now=opened)
    assert PolicyPush.objects.get(pk=push.pk).state == PolicyPush.State.SUCCEEDED
    assert emulator.rejected == []  # every object valid against Kueue's CRDs
    # speech's guaranteed quota rose by 8 (nominal 12, lending limit 4: its own 4 stay lendable), vision gave 8
    assert _gpu(emulator, "speech") == {
        "name": GPU,
        "nominalQuota": "12",
        "lendingLimit": "4",
        "reclaimWithinCohort": "Any",
    }
    assert _gpu(emulator, "vision") == {"name": GPU, "nominalQuota": "8", "reclaimWithinCohort": "LowerPriority"}

    # the drift check during the window: the held quota is the portal's own, not drift; a second push writes nothing
    writes = len([r for r in emulator.requests if r["method"] != "GET"])
    report = kube_config_push(cluster=cluster, api=api, now=opened + timedelta(minutes=30))
    assert report.drifted == []
    assert report.updated == []
    assert len([r for r in emulator.requests if r["method"] != "GET"]) == writes
    # a live edit during the window is drift as always, and adopting the held queue is refused
    live = emulator.get_obj("ClusterQueue", "vision")
    groups = live["spec"]["resourceGroups"]
    for res in groups[0]["flavors"][0]["resources"]:
        if res["name"] == GPU:
            res["nominalQuota"] = "9"
    emulator.edit("ClusterQueue", "vision", manager="kubectl-edit", spec={"resourceGroups": groups})
    report = kube_config_push(cluster=cluster, api=api, now=opened + timedelta(minutes=31))
    assert report.drifted == ["ClusterQueue vision"]
    drifted = KubeConfigObject.objects.get(cluster=cluster, kind="ClusterQueue", name="vision")
    with pytest.raises(Conflict, match="changed by a reservation in force"):
        kube_config_adopt(row=drifted, api=api, now=opened + timedelta(minutes=32))
    assert QuotaLine.objects.get(team_quota=portal.quota, resource_name=GPU).nominal == "16"

    # the end: closed and pushed; the portal's own quota is back (the admin's drift is left for the admin)
    reservation_edges_apply(now=row.ends_at)
    closing = PolicyPush.objects.order_by("-pk").first()
    assert "closes" in closing.reason
    policy_push_run(push_id=closing.pk, now=row.ends_at)
    assert _gpu(emulator, "speech") == {"name": GPU, "nominalQuota": "4", "reclaimWithinCohort": "Never"}
    assert emulator.rejected == []


QUOTA_SHORT = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, 8 more needed"


def test_a_wait_kueue_reads_as_quota_names_the_reservation_that_holds_it(portal, teams, cluster, world, kube, emulator):
    """Speech's window of 8 H100 is open: vision's quota in force is 8 of its 16 and it runs 8. Kueue says vision's
    next job lacks quota; the stored reason reads the quota Kueue has (8, not the configured 16); without the hold
    the job would start, so the job page and the API name the reservation (with Kueue's words and reason kept
    underneath), as the simulated cluster's tick does."""
    ns = portal.team.namespace
    now = timezone.now()  # the sync reads the reservations in force at the wall clock
    row = reservation_request(
        team=teams.speech,
        user=teams.frank,
        resource_class=portal.rc,
        count=8,
        starts_at=now - timedelta(minutes=5),
        ends_at=now + timedelta(hours=8),
        purpose="evaluation run",
        now=now - timedelta(minutes=10),
    )
    assert row.state == Reservation.State.APPROVED, row.reasons
    running = world.submit("running", gpus=8, minute=1)
    kube.create_workload(running.k8s_name, ns, when=at(1))
    kube.admit(
        running.k8s_name, ns, cluster_queue="vision", flavor="h100", nodes=["gpu-a1"], gpus_per_pod=8, when=at(1)
    )
    kube.run_pods(running.k8s_name, ns, ["gpu-a1"], when=at(2))
    cq = emulator.get_obj("ClusterQueue", "vision")  # Kueue's figures: vision holds 8
    cq["status"] = {
        "flavorsReservation": [{"name": "h100", "resources": [{"name": GPU, "total": "8", "borrowed": "0"}]}]
    }
    emulator.put(cq)
    waiting = world.submit("waiting", gpus=8, minute=12)
    kube.create_workload(waiting.k8s_name, ns, when=at(12))
    kube.pending(waiting.k8s_name, ns, QUOTA_SHORT, when=at(12))
    world.sync()
    assert Job.objects.get(pk=running.pk).state == Job.State.RUNNING
    waiting = Job.objects.get(pk=waiting.pk)
    # the stored translation weighs Kueue's words against the quota Kueue has in the window (8 of the 16)
    assert (waiting.state, waiting.wait_reason) == (Job.State.PENDING, "quota_exhausted"), waiting.wait_message
    assert waiting.wait_message.startswith("Your team's quota of 8 GPUs on H100 is in use"), waiting.wait_message

    diagnosis = job_diagnosis(waiting, now=now, recompute=True)
    assert diagnosis.code == "capacity_reserved", diagnosis.message
    assert diagnosis.message.startswith("8 H100 GPUs are reserved for Speech until "), diagnosis.message
    assert diagnosis.message.endswith("without that reservation this job would start now."), diagnosis.message
    assert diagnosis.kueue_message == waiting.kueue_message  # Kueue's own words are still shown
    assert diagnosis.details["underlying"]["code"] == "quota_exhausted"
    assert [r["holder"] for r in diagnosis.details["reservations"]] == ["Speech"]

    after = job_diagnosis(waiting, now=now + timedelta(hours=8, minutes=5), recompute=True)  # the window is over
    assert after.code == "quota_exhausted", after.message
