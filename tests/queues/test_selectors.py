"""Researcher selectors: visibility, keyset pagination, filters, queue position, timeline, catalogue, hardware."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from django.utils import timezone

from queues import selectors as sel
from queues import services
from queues.models import Job, JobEvent
from queues.services import JobSpec
from tests.browser.scenarios import BLOCK, HOST, RACK, occupy, research_pool
from tests.factories import (
    ClusterFactory,
    DeviceFactory,
    JobFactory,
    MembershipFactory,
    NodeFactory,
    PriorityClassFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db


def test_jobs_visible_to_members_only():
    pool = research_pool()
    mine = JobFactory(team=pool.team, owner=pool.user, cluster=pool.cluster, resource_class=pool.rc)
    theirs = JobFactory(team=pool.other_team, owner=pool.other_user, cluster=pool.cluster, resource_class=pool.rc)
    assert list(sel.jobs_visible_to(pool.user)) == [mine]
    assert list(sel.jobs_visible_to(pool.other_user)) == [theirs]
    assert list(sel.jobs_visible_to(UserFactory())) == []
    # A member of both teams sees both, or one team when asked.
    MembershipFactory(team=pool.other_team, user=pool.user)
    assert set(sel.jobs_visible_to(pool.user)) == {mine, theirs}
    assert list(sel.jobs_visible_to(pool.user, team=pool.other_team)) == [theirs]
    # Asking for a team one is not in gives nothing.
    assert list(sel.jobs_visible_to(pool.other_user, team=pool.team)) == []


def test_team_for_checks_membership():
    pool = research_pool()
    assert sel.team_for(pool.user, slug="vision") == pool.team
    assert sel.team_for(pool.user, slug="speech") is None


def _many_jobs(pool, n: int, *, ties: bool = True) -> list[Job]:
    base = timezone.now() - timedelta(days=1)
    jobs = []
    for i in range(n):
        # Several jobs share a timestamp: the id breaks the tie.
        at = base + timedelta(minutes=(i // 3) if ties else i)
        jobs.append(
            JobFactory(
                team=pool.team,
                owner=pool.user,
                cluster=pool.cluster,
                resource_class=pool.rc,
                submitted_at=at,
                state=Job.State.SUCCEEDED if i % 2 else Job.State.PENDING,
            )
        )
    return sorted(jobs, key=lambda j: (j.submitted_at, j.pk), reverse=True)


def test_keyset_pages_walk_forward_and_back_without_gaps_or_repeats():
    pool = research_pool()
    expected = _many_jobs(pool, 23)
    qs = sel.jobs_visible_to(pool.user)
    seen, cursor, pages = [], None, []
    while True:
        page = sel.job_list_page(qs, cursor=sel.Cursor.decode(cursor), per_page=5)
        pages.append(page)
        seen.extend(page.jobs)
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    assert [j.pk for j in seen] == [j.pk for j in expected]
    assert len(pages) == 5
    assert pages[0].is_first
    assert not pages[1].is_first
    # Back from the last page: the previous page is exactly the 4th.
    back = sel.job_list_page(qs, cursor=sel.Cursor.decode(pages[-1].prev_cursor), per_page=5)
    assert [j.pk for j in back.jobs] == [j.pk for j in pages[3].jobs]
    # Back from the 2nd page reaches the first page.
    first = sel.job_list_page(qs, cursor=sel.Cursor.decode(pages[1].prev_cursor), per_page=5)
    assert first.is_first
    assert [j.pk for j in first.jobs] == [j.pk for j in pages[0].jobs]


def test_bad_cursor_means_first_page():
    assert sel.Cursor.decode("not-a-cursor") is None
    assert sel.Cursor.decode("") is None


def test_filters():
    pool = research_pool()
    _many_jobs(pool, 6, ties=False)
    other = UserFactory(username="carol")
    MembershipFactory(team=pool.team, user=other)
    carols = JobFactory(team=pool.team, owner=other, cluster=pool.cluster, resource_class=pool.rc)
    qs = sel.jobs_visible_to(pool.user, team=pool.team)
    assert sel.filter_jobs(qs, sel.JobFilters(mine=True), user=pool.user).count() == 6
    assert list(sel.filter_jobs(qs, sel.JobFilters(owner=other))) == [carols]
    assert sel.filter_jobs(qs, sel.JobFilters(state="succeeded")).count() == 3
    today = timezone.localdate()
    assert sel.filter_jobs(qs, sel.JobFilters(submitted_from=today)).count() == 1
    yesterday = today - timedelta(days=1)
    assert sel.filter_jobs(qs, sel.JobFilters(submitted_to=yesterday)).count() == 6
    assert sel.filter_jobs(qs, sel.JobFilters(submitted_from=date(2000, 1, 1), resource_class=pool.rc)).count() == 7


def test_queue_position_by_priority_then_queue_time():
    pool = research_pool()
    high = PriorityClassFactory(name="high", value=1000)
    now = timezone.now()

    def pending(name, minutes_ago, pc):
        return JobFactory(
            team=pool.team,
            owner=pool.user,
            cluster=pool.cluster,
            resource_class=pool.rc,
            name=name,
            priority_class=pc,
            priority=pc.value,
            submitted_at=now - timedelta(minutes=minutes_ago),
        )

    old = pending("old", 30, pool.normal)
    new = pending("new", 5, pool.normal)
    urgent = pending("urgent", 1, high)
    JobFactory(team=pool.other_team, owner=pool.other_user, cluster=pool.cluster, resource_class=pool.rc)
    assert sel.queue_position(urgent) == (1, 3)
    assert sel.queue_position(old) == (2, 3)
    assert sel.queue_position(new) == (3, 3)
    assert sel.queue_position(occupy(pool, node=pool.nodes[0], count=1)) is None


def test_timeline_durations_and_wait_reason_codes():
    pool = research_pool()
    t0 = timezone.now() - timedelta(minutes=30)
    job = services.job_submit(
        owner=pool.user,
        team=pool.team,
        spec=JobSpec(name="t", image="python:3.11", resource_class=pool.rc),
        now=t0,
    )
    services.job_set_wait_reason(job, code="quota_exhausted", message="quota", now=t0 + timedelta(minutes=1))
    services.record_event(job, JobEvent.Kind.NOTE, "a note", at=t0 + timedelta(minutes=2))
    services.job_set_wait_reason(job, code="class_exhausted", message="busy", now=t0 + timedelta(minutes=5))
    entries = sel.job_timeline(job, now=t0 + timedelta(minutes=20))
    kinds = [e.event.kind for e in entries]
    assert kinds == ["submitted", "wait_reason", "note", "wait_reason"]
    assert entries[1].code == "quota_exhausted"
    assert entries[1].duration == timedelta(minutes=4)  # a note does not end a wait reason
    assert entries[3].ongoing
    assert entries[3].duration == timedelta(minutes=15)


def test_class_hardware_node_and_domain_sizes():
    pool = research_pool(racks={"rack-a": [4, 4], "rack-b": [2]})
    hw = sel.class_hardware(pool.rc)
    assert hw.total_units == 10
    assert hw.largest_node == 4
    assert hw.largest_domain == {BLOCK: 10, RACK: 8, HOST: 4}
    assert hw.topology_levels == [BLOCK, RACK, HOST]
    assert hw.products[0].count == 10
    assert sel.allowed_topology_levels(pool.rc, hw) == [BLOCK, RACK, HOST]
    pool.rc.topology_mode, pool.rc.topology_level = "required", RACK
    assert sel.allowed_topology_levels(pool.rc, hw) == [RACK, HOST]


def test_class_catalogue_quota_and_use():
    pool = research_pool(nominal="8")
    occupy(pool, node=pool.nodes[0], count=3)
    occupy(pool, node=pool.nodes[2], count=4, team=pool.other_team)
    [card] = sel.class_catalogue(team=pool.team, cluster=pool.cluster)
    assert card.capacity.exists == 16
    assert card.capacity.available == 9
    assert (card.nominal, card.used) == (8, 3)
    assert card.smallest_count == 1
    assert not card.in_cohort


@pytest.mark.parametrize(
    ("overrides", "field", "text"),
    [
        ({"devices_per_pod": 8}, "devices_per_pod", "can never run: asks 8 GPUs per pod, the largest node has 4"),
        ({"devices_per_pod": 4, "pod_count": 5}, "pod_count", "can never run: asks 20 GPUs in all, H100 80GB has 16"),
        (
            {"devices_per_pod": 4, "pod_count": 3, "topology_mode": "required", "topology_level": RACK},
            "topology_level",
            "can never run: asks 12 GPUs in one rack, the largest rack has 8",
        ),
        ({"topology_mode": "required", "topology_level": "zone"}, "topology_level", "not a topology level"),
    ],
)
def test_submit_refuses_what_can_never_run(overrides, field, text):
    pool = research_pool()
    values = {"name": "big", "image": "python:3.11", "resource_class": pool.rc, **overrides}
    with pytest.raises(services.ValidationFailed) as exc:
        services.job_submit(owner=pool.user, team=pool.team, spec=JobSpec(**values))
    assert any(text in m for m in exc.value.errors[field]), exc.value.errors


def test_class_with_required_topology_keeps_it():
    pool = research_pool()
    pool.rc.topology_mode, pool.rc.topology_level = "required", RACK
    pool.rc.save()
    errors = services.job_spec_errors(JobSpec(name="x", image="python:3.11", resource_class=pool.rc), team=pool.team)
    assert "requires its pods within one rack" in errors["topology_mode"][0]
    errors = services.job_spec_errors(
        JobSpec(name="x", image="python:3.11", resource_class=pool.rc, topology_mode="required", topology_level=BLOCK),
        team=pool.team,
    )
    assert "not a topology level" in errors["topology_level"][0]


def test_never_run_is_judged_on_the_teams_cluster():
    """Bigger nodes of the same flavor in another cluster do not make a request possible in the team's cluster."""
    pool = research_pool()
    elsewhere = ClusterFactory(name="elsewhere")
    big = NodeFactory(cluster=elsewhere, flavor=pool.flavor, name="big-n0", capacity={"nvidia.com/gpu": "8"})
    for index in range(8):
        DeviceFactory(node=big, index=index)
    values = {"name": "big", "image": "python:3.11", "resource_class": pool.rc, "devices_per_pod": 8}
    errors = services.job_spec_errors(JobSpec(**values), team=pool.team)
    assert errors["devices_per_pod"] == ["can never run: asks 8 GPUs per pod, the largest node has 4"]
    assert services.job_spec_errors(JobSpec(**values), team=pool.team, cluster=elsewhere) == {}
    [card] = sel.class_catalogue(team=pool.team, cluster=pool.cluster)
    assert (card.hardware.total_units, card.hardware.largest_node) == (16, 4)
