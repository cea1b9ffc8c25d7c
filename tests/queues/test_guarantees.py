"""Effective quota on the simulated cluster: each shortfall policy applied by the engine, recorded, pushed, told, said
in the wait reason and on the class card, and restored when the devices return from validation."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from clusters.backends.simulated import simulated_cluster_tick_run
from notify.models import Event
from pools.health.services import Actor, device_health_set
from pools.models import Device, HealthState
from queues import services
from queues.engine_input import cluster_engine_input
from queues.guarantees.selectors import cluster_guarantees, team_guarantees
from queues.guarantees.services import effective_quota_refresh
from queues.models import Cohort, Job, Membership, PolicyPush, QuotaShortfall
from queues.services import JobSpec
from tests.factories import (
    ClusterFactory,
    DeviceFactory,
    MembershipFactory,
    NodeFactory,
    QuotaLineFactory,
    ResourceClassFactory,
    ResourceFlavorFactory,
    TeamQuotaFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db
OPS = Actor(label="ops")
GPU = "nvidia.com/gpu"


@pytest.fixture
def org(settings):
    """Cluster sim, flavor h100 on two nodes of 8 GPUs (16); cohort org with vision (10) and nlp (6) guaranteed; a
    platform admin and vision's lead."""
    settings.CELERY_TASK_ALWAYS_EAGER = True
    cluster = ClusterFactory(name="sim")
    flavor = ResourceFlavorFactory(name="h100", display_name="H100", node_labels={"gpu": "h100"})
    nodes = [NodeFactory(cluster=cluster, flavor=flavor, name=f"n{i}") for i in range(2)]
    for node in nodes:
        DeviceFactory.create_batch(8, node=node)
    rc = ResourceClassFactory(slug="h100", flavors=[flavor], allowed_counts=[1, 2, 4, 8])
    cohort = Cohort.objects.create(name="org", shortfall_policy=Cohort.ShortfallPolicy.PROPORTIONAL)
    vision = MembershipFactory(team__slug="vision", team__namespace="vision", role=Membership.Role.LEAD)
    nlp = MembershipFactory(team__slug="nlp", team__namespace="nlp")
    quotas = {}
    for member, nominal in ((vision, "10"), (nlp, "6")):
        quotas[member.team.slug] = TeamQuotaFactory(
            team=member.team, cluster=cluster, cohort=cohort, cluster_queue_name=member.team.slug
        )
        QuotaLineFactory(team_quota=quotas[member.team.slug], flavor=flavor, nominal=nominal)
    admin = UserFactory(username="root", is_staff=True)
    return type(
        "Org",
        (),
        {"cluster": cluster, "flavor": flavor, "rc": rc, "cohort": cohort, "vision": vision, "nlp": nlp, "admin": admin,
         "nodes": nodes},
    )  # fmt: skip


def fail(n: int, *, at) -> list[Device]:
    """Take ``n`` more healthy GPUs of node n0 out for repair (unhealthy, then quarantined)."""
    devices = list(Device.objects.filter(node__name="n0", health=HealthState.HEALTHY).order_by("index", "key")[:n])
    for d in devices:
        device_health_set(d, to=HealthState.UNHEALTHY, reason="XID 79", now=at, actor=OPS)
        device_health_set(d, to=HealthState.QUARANTINED, reason="in repair", now=at, actor=OPS)
    return devices


def back(devices: list[Device], *, at) -> None:
    """The devices pass validation and return to the pool."""
    for d in devices:
        d.refresh_from_db()
        device_health_set(d, to=HealthState.VALIDATING, reason="burn-in", now=at, actor=OPS)
        device_health_set(d, to=HealthState.HEALTHY, reason="validation passed", now=at, actor=OPS)


def quotas_in_engine(cluster) -> dict[str, int]:
    """The nominal GPU quota each ClusterQueue has in the engine's input."""
    state = cluster_engine_input(cluster=cluster, with_nodes=False).state
    return {
        cq.name: sum(r.nominal for g in cq.resource_groups for f in g.flavors for r in f.resources if r.name == GPU)
        for cq in state.cluster_queues
    }


@pytest.mark.parametrize(
    ("policy", "spare", "in_force", "backed"),
    [
        # 16 guaranteed on 14 healthy: 2 short, split 10:6 → exact 1.25, .75 → floors 1, 0, the unit left to nlp
        (Cohort.ShortfallPolicy.PROPORTIONAL, None, {"vision": 9, "nlp": 5}, {"vision": 9, "nlp": 5}),
        # nlp is the spare team: it gives both
        (Cohort.ShortfallPolicy.SPARE_FIRST, "nlp", {"vision": 10, "nlp": 4}, {"vision": 10, "nlp": 4}),
        # warn only: the quotas stay; the backing is reduced as in proportion
        (Cohort.ShortfallPolicy.WARN, None, {"vision": 10, "nlp": 6}, {"vision": 9, "nlp": 5}),
    ],
)
def test_each_policy_is_applied_by_the_engine_recorded_told_and_restored(org, policy, spare, in_force, backed):
    org.cohort.shortfall_policy = policy
    org.cohort.spare_team = org.nlp.team if spare else None
    org.cohort.save()
    t0 = timezone.now() - timedelta(hours=1)
    assert quotas_in_engine(org.cluster) == {"vision": 10, "nlp": 6}
    assert effective_quota_refresh(cluster=org.cluster, now=t0).opened == []

    devices = fail(2, at=t0)
    assert quotas_in_engine(org.cluster) == in_force
    g = cluster_guarantees(org.cluster)
    assert {g.lines[k].team_quota.team.slug: e.backed for k, e in g.result.claims.items()} == backed
    report = effective_quota_refresh(cluster=org.cluster, now=t0 + timedelta(minutes=1))
    row = QuotaShortfall.objects.get(pk=report.opened[0])
    assert (row.cohort, row.guaranteed, row.backed, row.healthy, row.policy) == (org.cohort, 16, 14, 14, policy)
    # the quota in force changed: pushed through the audited path (not under warn-only)
    assert (report.push_id is not None) == (policy != Cohort.ShortfallPolicy.WARN)
    if report.push_id:
        assert PolicyPush.objects.get(pk=report.push_id).reason.startswith("Effective quota: guarantees reduced")
    # the admin is told, and vision's lead where vision's guarantee is reduced (nlp's member is no lead)
    told = set(Event.objects.filter(kind="shortfall").values_list("recipient__username", flat=True))
    vision_reduced = backed["vision"] < 10
    assert told == {org.admin.username, *([org.vision.user.username] if vision_reduced else [])}
    # a second refresh with nothing changed records nothing
    again = effective_quota_refresh(cluster=org.cluster, now=t0 + timedelta(minutes=2))
    assert (again.opened, again.changed, again.closed, again.push_id) == ([], [], [], None)

    back(devices, at=t0 + timedelta(hours=1))
    assert quotas_in_engine(org.cluster) == {"vision": 10, "nlp": 6}
    closed = effective_quota_refresh(cluster=org.cluster, now=t0 + timedelta(hours=1, minutes=1))
    assert closed.closed == [row.pk]
    row.refresh_from_db()
    assert row.ended_at is not None
    assert (closed.push_id is not None) == (policy != Cohort.ShortfallPolicy.WARN)
    assert Event.objects.filter(kind="shortfall", title__endswith="guarantees backed again").count() == len(told)


def test_a_second_failure_updates_the_open_shortfall(org):
    t0 = timezone.now() - timedelta(hours=1)
    fail(2, at=t0)
    first = effective_quota_refresh(cluster=org.cluster, now=t0)
    fail(2, at=t0 + timedelta(minutes=5))  # two more of n0
    second = effective_quota_refresh(cluster=org.cluster, now=t0 + timedelta(minutes=6))
    assert second.changed == first.opened
    row = QuotaShortfall.objects.get()
    assert (row.backed, row.healthy) == (12, 12)
    # 4 short split 10:6 → exact 2.5, 1.5 → floors 2, 1; the remainders tie (8/16 each): the unit left goes to the
    # first line (vision's): vision gives 3, nlp 1
    assert {r["team"]: r["applied"] for r in row.reductions} == {"vision": 7, "nlp": 5}


def submit(member, rc, name, *, devices, at) -> Job:
    spec = JobSpec(name=name, image="registry.example.org/t:1", resource_class=rc, devices_per_pod=devices,
                   sim_runtime_seconds=7200)  # fmt: skip
    return services.job_submit(owner=member.user, team=member.team, spec=spec, now=at)


def test_a_wait_due_to_quota_reduced_by_repairs_says_so(org):
    t0 = timezone.now() - timedelta(hours=1)
    fail(2, at=t0)  # vision's quota in force: 9, nlp's 5 (proportional)
    running = [
        submit(org.nlp, org.rc, "n4", devices=4, at=t0),
        submit(org.nlp, org.rc, "n1", devices=1, at=t0),
        submit(org.vision, org.rc, "v", devices=8, at=t0),
    ]
    simulated_cluster_tick_run(cluster_id=org.cluster.pk, now=t0 + timedelta(seconds=1))
    for job in running:
        job.refresh_from_db()
        assert job.state == Job.State.ADMITTED
    # vision holds 8 of its 9, nlp all its 5: 13 of the 14 healthy; vision asks 2 more: 1 is left of its quota in
    # force and nlp has nothing to lend — with its whole guarantee of 10 it would fit
    waiting = submit(org.vision, org.rc, "w", devices=2, at=t0 + timedelta(seconds=2))
    simulated_cluster_tick_run(cluster_id=org.cluster.pk, now=t0 + timedelta(seconds=3))
    waiting.refresh_from_db()
    assert waiting.state == Job.State.PENDING
    assert waiting.wait_reason in ("quota_exhausted", "borrow_limit", "quota_lent_out")
    assert "guaranteed quota of 10 GPUs of H100 is reduced to 9 while 2 GPUs of H100 are out for repair" in (
        waiting.wait_message
    )
    assert waiting.wait_details["quotaReducedByRepair"]["applied"] == 9


def test_the_class_card_says_what_backs_the_guarantee(org):
    t0 = timezone.now() - timedelta(hours=1)
    fail(2, at=t0)
    effective_quota_refresh(cluster=org.cluster, now=t0)
    (g,) = team_guarantees(team=org.vision.team, cluster=org.cluster).values()
    assert (g.guaranteed, g.backed, g.applied, g.in_repair, g.reduced) == (10, 9, 9, 2, True)
    assert g.since == t0
    assert team_guarantees(team=org.nlp.team, cluster=org.cluster)  # nlp is reduced too (5 of 6)
