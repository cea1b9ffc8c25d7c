"""Platform admins and operators: every team's jobs with a team filter, job pages read-only for operators, no dead
ends for someone outside any team, the staff navigation, the class filter's choices and the session API's team."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from queues import selectors as sel
from queues import services
from queues.models import Job
from queues.services import JobSpec
from queues.views import SESSION_TEAM
from tests.browser.scenarios import research_pool
from tests.factories import MembershipFactory, ResourceClassFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def pool():
    return research_pool()


@pytest.fixture
def jobs(pool):
    """One pending job in each team."""
    mine = services.job_submit(
        owner=pool.user, team=pool.team, spec=JobSpec(name="vision-train", image="python:3.11", resource_class=pool.rc)
    )
    theirs = services.job_submit(
        owner=pool.other_user,
        team=pool.other_team,
        spec=JobSpec(name="speech-train", image="python:3.11", resource_class=pool.rc),
    )
    return mine, theirs


@pytest.fixture
def admin_user():
    return UserFactory(username="root", is_staff=True, is_superuser=True)


@pytest.fixture
def operator():
    user = UserFactory(username="watcher")
    user.groups.add(Group.objects.get(name=sel.OPERATOR_GROUP))
    return user


def job_names(html: str) -> set[str]:
    return set(re.findall(r'/jobs/\d+/">([a-z0-9-]+)</a>', html))


def test_operator_group_holds_the_view_permission():
    group = Group.objects.get(name="operator")
    # every team's jobs, and the pool's health pages (issue 32: an operator got 403 on Health and Capacity)
    assert sorted(group.permissions.values_list("content_type__app_label", "codename")) == [
        ("pools", "view_repairticket"),
        ("queues", "view_job"),
    ]


def test_roles(pool, admin_user, operator):
    assert sel.sees_every_team(admin_user)
    assert sel.is_platform_admin(admin_user)
    assert sel.sees_every_team(operator)
    assert not sel.is_platform_admin(operator)
    assert not sel.sees_every_team(pool.user)
    staff_only = UserFactory(username="staffer", is_staff=True)
    assert sel.sees_every_team(staff_only)


def test_researcher_sees_only_their_team(client, pool, jobs):
    _mine, theirs = jobs
    client.force_login(pool.user)
    html = client.get(reverse("queues:jobs")).content.decode()
    assert job_names(html) == {"vision-train"}
    assert 'name="team"' not in html
    assert client.get(reverse("queues:job_detail", args=[theirs.pk])).status_code == 404


@pytest.mark.parametrize("who", ["admin", "operator"])
def test_every_team_list_with_team_filter(client, pool, jobs, admin_user, operator, who):
    client.force_login(admin_user if who == "admin" else operator)
    response = client.get(reverse("queues:jobs"))
    assert response.status_code == 200
    html = response.content.decode()
    assert job_names(html) == {"vision-train", "speech-train"}
    assert "Every team&#x27;s jobs" in html or "Every team's jobs" in html
    assert "Jobs of every team." in html
    assert '<select name="team" id="id_team">' in html
    assert '<option value="speech">Speech</option>' in html
    assert '<th scope="col">Team</th>' in html
    narrowed = client.get(reverse("queues:jobs"), {"team": "speech"}).content.decode()
    assert job_names(narrowed) == {"speech-train"}
    assert "Jobs of team <strong>Speech</strong>" in narrowed
    assert '<option value="speech" selected>Speech</option>' in narrowed
    # the user filter follows the team
    assert '<option value="bob">bob</option>' in narrowed
    assert '<option value="alice">alice</option>' not in narrowed


def test_operator_opens_any_job_read_only(client, pool, jobs, operator):
    _mine, theirs = jobs
    client.force_login(operator)
    response = client.get(reverse("queues:job_detail", args=[theirs.pk]))
    assert response.status_code == 200
    html = response.content.decode()
    assert "speech-train" in html
    assert 'id="queues-job-wait-' in html  # the wait reason a user sees
    assert "Read-only" in html
    assert reverse("queues:job_cancel", args=[theirs.pk]) not in html
    assert "Resubmit" not in html
    assert client.get(reverse("queues:job_cancel", args=[theirs.pk])).status_code == 403
    assert client.post(reverse("queues:job_cancel", args=[theirs.pk])).status_code == 403
    theirs.refresh_from_db()
    assert theirs.state == Job.State.PENDING


def test_admin_may_cancel_any_job(client, pool, jobs, admin_user):
    _mine, theirs = jobs
    client.force_login(admin_user)
    html = client.get(reverse("queues:job_detail", args=[theirs.pk])).content.decode()
    assert reverse("queues:job_cancel", args=[theirs.pk]) in html
    assert "Read-only" not in html
    response = client.post(reverse("queues:job_cancel", args=[theirs.pk]))
    assert response.status_code == 302
    theirs.refresh_from_db()
    assert theirs.state == Job.State.CANCELLED
    assert theirs.events.last().message == "Cancelled by root."


def test_the_service_still_refuses_a_non_member(pool, jobs, operator):
    from kernel.errors import ValidationFailed

    _mine, theirs = jobs
    with pytest.raises(ValidationFailed, match="not a member of team speech"):
        services.job_cancel(job=theirs, user=operator)


def test_staff_navigation_links_the_health_pages(client, pool, admin_user):
    client.force_login(admin_user)
    html = client.get(reverse("queues:jobs")).content.decode()
    nav = html[html.index('<nav class="mainnav"') : html.index("</nav>")]
    for url in ("/health/", "/health/tickets/", "/health/capacity/", "/admin/"):
        assert f'href="{url}"' in nav
    # not in a team: no Submit link to a page that refuses them
    assert 'href="/submit/"' not in nav
    tickets = client.get("/health/tickets/").content.decode()
    nav = tickets[tickets.index('<nav class="mainnav"') : tickets.index("</nav>")]
    assert '<a href="/health/tickets/" aria-current="page">Repair queue</a>' in nav
    assert '<a href="/health/">Health</a>' in nav  # the map is current on its own page only


def test_researcher_navigation_has_no_staff_links(client, pool):
    client.force_login(pool.user)
    html = client.get(reverse("queues:classes")).content.decode()
    nav = html[html.index('<nav class="mainnav"') : html.index("</nav>")]
    assert 'href="/submit/"' in nav
    assert "/health/" not in nav
    assert "/admin/" not in nav


def test_admin_outside_any_team_sees_every_class_and_a_way_on(client, pool, admin_user):
    ResourceClassFactory(slug="l4", name="L4 inference", flavors=[pool.flavor])
    client.force_login(admin_user)
    html = client.get(reverse("queues:classes")).content.decode()
    assert "You are not in a team yet" not in html
    assert "this shows every active class" in html
    assert "H100 80GB" in html
    assert "L4 inference" in html
    submit = client.get(reverse("queues:job_submit"))
    assert submit.status_code == 403
    text = submit.content.decode()
    assert "Jobs are submitted by a team&#x27;s members" in text or "Jobs are submitted by a team's members" in text
    assert 'href="/jobs/"' in text
    jobs_page = client.get(reverse("queues:jobs")).content.decode()
    assert "You are not in a team yet" not in jobs_page


def test_operator_outside_any_team_sees_every_class_and_no_admin_link(client, pool, admin_user, operator):
    client.force_login(operator)
    html = client.get(reverse("queues:classes")).content.decode()
    assert "this shows every active class" in html
    assert "/admin/" not in html  # the admin would send an operator to its login page
    client.force_login(admin_user)
    assert reverse("admin:queues_teamquota_changelist") in client.get(reverse("queues:classes")).content.decode()


def test_researcher_outside_any_team_is_told_so(client):
    client.force_login(UserFactory(username="newcomer"))
    assert "You are not in a team yet" in client.get(reverse("queues:job_submit")).content.decode()


# --------------------------------------------------------------------------- the class filter


def class_options(html: str) -> list[str]:
    select = html[html.index('<select name="resource_class"') :]
    select = select[: select.index("</select>")]
    return re.findall(r'<option value="([^"]*)"', select)


def test_class_filter_offers_the_teams_classes_and_those_its_jobs_used(client, pool):
    retired = ResourceClassFactory(slug="v100", name="V100 (retired)", flavors=[pool.flavor], active=False)
    ResourceClassFactory(slug="unused-retired", name="Old", flavors=[pool.flavor], active=False)
    other_flavor_class = ResourceClassFactory(slug="tpu", name="TPU", resource_name="google.com/tpu")
    from tests.factories import JobFactory

    JobFactory(team=pool.team, owner=pool.user, cluster=pool.cluster, resource_class=retired, name="old-run")
    JobFactory(
        team=pool.other_team, owner=pool.other_user, cluster=pool.cluster, resource_class=other_flavor_class, name="x"
    )
    client.force_login(pool.user)
    options = class_options(client.get(reverse("queues:jobs")).content.decode())
    assert options == ["", "h100", "v100"]  # by name: H100 80GB, V100 (retired); not the unused or other team's
    response = client.get(reverse("queues:jobs"), {"resource_class": "v100"})
    assert job_names(response.content.decode()) == {"old-run"}


def test_class_filter_offers_every_class_to_admins(client, pool, admin_user):
    ResourceClassFactory(slug="tpu", name="TPU", resource_name="google.com/tpu")
    ResourceClassFactory(slug="old", name="Old", flavors=[pool.flavor], active=False)
    client.force_login(admin_user)
    assert class_options(client.get(reverse("queues:jobs")).content.decode()) == ["", "h100", "old", "tpu"]


# --------------------------------------------------------------------------- the API in the browser session


def test_session_api_uses_the_team_chosen_in_the_portal(client, pool, jobs):
    third = TeamFactory(slug="audio", name="Audio")
    MembershipFactory(team=third, user=pool.user)
    MembershipFactory(team=pool.other_team, user=pool.user)
    client.force_login(pool.user)
    # several teams, none chosen: the list spans them, a submission must say which
    names = {j["name"] for j in client.get("/api/jobs/").json()["results"]}
    assert names == {"vision-train", "speech-train"}
    client.post(reverse("queues:team_switch"), {"team": "speech"})
    assert client.session[SESSION_TEAM] == pool.other_team.pk
    names = {j["name"] for j in client.get("/api/jobs/").json()["results"]}
    assert names == {"speech-train"}
    # an explicit team still wins
    names = {j["name"] for j in client.get("/api/jobs/", {"team": "vision"}).json()["results"]}
    assert names == {"vision-train"}


def test_token_api_keeps_its_team(client, pool, jobs):
    from queues.api.tokens import api_token_create

    MembershipFactory(team=pool.other_team, user=pool.user)
    key = api_token_create(user=pool.user, team=pool.team, name="ci").key
    names = {j["name"] for j in client.get("/api/jobs/", HTTP_AUTHORIZATION=f"Token {key}").json()["results"]}
    assert names == {"vision-train"}


def test_operator_reads_any_team_through_the_api(client, pool, jobs, operator):
    client.force_login(operator)
    names = {j["name"] for j in client.get("/api/jobs/", {"team": "speech"}).json()["results"]}
    assert names == {"speech-train"}
    assert client.get("/api/jobs/", {"team": "nope"}).status_code == 404
