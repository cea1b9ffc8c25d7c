"""The isolation gaps the audit of issue #17 named, each tested beyond its status code in the matrix.

The HX fragment of another team's job, ``/api/jobs/{id}/…`` by session, token and anonymously, ``POST /api/jobs/``
and ``/api/feasibility/`` in another team, ``/api/classes/?team=<not mine>``, another user's tokens,
``/submit/check/`` across teams, the admin pages for researchers and leads, and the ``next=`` redirects.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import Client
from rest_framework.test import APIClient

from queues.api.tokens import api_token_create
from queues.models import ApiToken, Job, Team
from tests.factories import QuotaLineFactory, ResourceClassFactory, ResourceFlavorFactory
from tests.portal.isolation import ADMIN_LOGIN, World, build_world, describe, fresh
from tests.shared_db import shared_rows

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}
BODY = {"name": "resnet", "image": "registry.example.org/vision/train:1.2", "resource_class": "h100"}
FORM = {**BODY, "devices_per_pod": 1, "pod_count": 1}


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker) -> Iterator[World]:
    """One world for the module, built once; each test's changes roll back to it (tests/shared_db.py)."""
    with shared_rows(django_db_blocker, build_world) as world:
        yield world


@pytest.fixture
def w(world, db) -> World:
    """The module's world, its objects as the database has them now."""
    return fresh(world)


def signed_in(w: World, role: str) -> Client:
    client = Client()
    client.force_login(w.users[role])
    return client


def token_client(user, team: Team) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_create(user=user, team=team, name='probe').key}")
    return client


# --------------------------------------------------------------------------- the HX fragment of another team's job


@pytest.mark.parametrize("suffix", ["", "run/", "cancel/"])
def test_the_htmx_fragment_of_another_teams_job_is_not_found(w, suffix):
    url = f"/jobs/{w.job.pk}/{suffix}"
    theirs = signed_in(w, "outsider").get(url, headers=HTMX)
    assert theirs.status_code == 404
    assert w.job.name not in theirs.content.decode()
    mine = signed_in(w, "member").get(url, headers=HTMX)
    assert mine.status_code == 200
    assert w.job.name in mine.content.decode()


def test_the_member_gets_the_fragment_not_the_page(w):
    fragment = signed_in(w, "member").get(f"/jobs/{w.job.pk}/", headers=HTMX).content.decode()
    assert "<html" not in fragment
    assert w.job.name in fragment


# --------------------------------------------------------------------------- /api/jobs/{id}/…


JOB_READS = ["", "timeline/", "wait-reason/"]


@pytest.mark.parametrize("suffix", JOB_READS)
def test_api_job_reads_anonymously_are_401_with_the_token_scheme(w, suffix):
    response = APIClient().get(f"/api/jobs/{w.job.pk}/{suffix}")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert w.job.name not in response.content.decode()


@pytest.mark.parametrize("suffix", JOB_READS)
def test_api_job_reads_of_another_team_are_404_by_session_and_by_token(w, suffix):
    url = f"/api/jobs/{w.job.pk}/{suffix}"
    session = APIClient()
    session.force_login(w.users["outsider"])
    token = token_client(w.users["outsider"], w.pool.other_team)
    for client in (session, token):
        response = client.get(url)
        assert response.status_code == 404
        assert response.json() == {"detail": "No Job matches the given query."}
    assert token_client(w.users["member"], w.pool.team).get(url).status_code == 200


def test_a_token_of_another_team_of_a_member_does_not_reach_the_job(w):
    # alice in two teams: her speech token does not open vision's job (a token acts in its one team)
    w.pool.other_team.memberships.create(user=w.users["member"])
    response = token_client(w.users["member"], w.pool.other_team).get(f"/api/jobs/{w.job.pk}/")
    assert response.status_code == 404


@pytest.mark.parametrize("how", ["anonymous", "session", "token"])
def test_cancelling_another_teams_job_through_the_api_changes_nothing(w, how):
    client = APIClient()
    if how == "session":
        client.force_login(w.users["outsider"])
    elif how == "token":
        client = token_client(w.users["outsider"], w.pool.other_team)
    response = client.post(f"/api/jobs/{w.job.pk}/cancel/")
    assert response.status_code == {"anonymous": 401, "session": 404, "token": 404}[how]
    w.job.refresh_from_db()
    assert w.job.state == Job.State.PENDING


def test_an_operator_may_not_cancel_through_the_api(w):
    client = APIClient()
    client.force_login(w.users["operator"])
    response = client.post(f"/api/jobs/{w.job.pk}/cancel/")
    assert response.status_code == 403
    assert "read-only" in response.json()["detail"]
    w.job.refresh_from_db()
    assert w.job.state == Job.State.PENDING


def test_listing_jobs_never_shows_another_teams_job(w):
    session = APIClient()
    session.force_login(w.users["outsider"])
    token = token_client(w.users["outsider"], w.pool.other_team)
    for client in (session, token):
        listed = client.get("/api/jobs/")
        assert listed.status_code == 200
        assert w.job.pk not in [j["id"] for j in listed.json()["results"]]
    page = signed_in(w, "outsider").get("/jobs/", {"team": "vision", "scope": "team"})
    assert page.status_code == 200
    assert w.job.name not in page.content.decode()


# --------------------------------------------------------------------------- POST /api/jobs/, /api/feasibility/


@pytest.mark.parametrize("path", ["/api/jobs/", "/api/feasibility/"])
def test_posting_in_another_team_is_403_by_session_and_token(w, path):
    session = APIClient()
    session.force_login(w.users["outsider"])
    token = token_client(w.users["outsider"], w.pool.other_team)
    before = Job.objects.count()
    for client in (session, token):
        response = client.post(path, {**BODY, "team": "vision"}, format="json")
        assert response.status_code == 403
    assert Job.objects.count() == before
    assert not Job.objects.filter(team=w.pool.team, owner=w.users["outsider"]).exists()


def test_a_submission_without_a_team_lands_in_the_callers_team(w):
    response = token_client(w.users["outsider"], w.pool.other_team).post("/api/jobs/", BODY, format="json")
    assert response.status_code == 201
    assert Job.objects.get(pk=response.json()["id"]).team == w.pool.other_team


def test_an_admin_outside_the_team_may_not_submit_in_it(w):
    client = APIClient()
    client.force_login(w.users["admin"])
    assert client.post("/api/jobs/", {**BODY, "team": "vision"}, format="json").status_code == 403


# --------------------------------------------------------------------------- /api/classes/?team=<not mine>


@pytest.mark.parametrize("path", ["/api/classes/", "/api/classes/h100/"])
def test_classes_of_a_team_not_mine_are_403_and_tell_nothing_of_it(w, path):
    client = APIClient()
    client.force_login(w.users["outsider"])
    response = client.get(path, {"team": "vision"})
    assert response.status_code == 403
    assert response.json() == {"detail": "you are not a member of team vision"}
    # a team that does not exist answers alike: no probing for team names
    missing = client.get(path, {"team": "no-such-team"})
    assert missing.status_code == 403
    assert missing.json() == {"detail": "you are not a member of team no-such-team"}
    assert client.get(path, {"team": "speech"}).status_code == 200


def test_a_token_asking_for_another_team_is_403(w):
    response = token_client(w.users["member"], w.pool.team).get("/api/classes/", {"team": "speech"})
    assert response.status_code == 403
    assert response.json() == {"detail": "this token is scoped to team vision"}


# --------------------------------------------------------------------------- another user's tokens


def test_a_teammate_sees_none_of_my_tokens(w):
    carol = signed_in(w, "lead")
    assert w.token.prefix not in carol.get("/tokens/").content.decode()
    assert carol.get("/api/tokens/").json() == []
    alice = signed_in(w, "member")
    assert [t["prefix"] for t in alice.get("/api/tokens/").json()] == [w.token.prefix]


@pytest.mark.parametrize("role", ["outsider", "lead", "staff", "admin"])
def test_nobody_else_revokes_my_token(w, role):
    client = signed_in(w, role)
    assert client.post(f"/tokens/{w.token.pk}/revoke/").status_code == 404
    assert client.post(f"/api/tokens/{w.token.pk}/revoke/").status_code == 404
    w.token.refresh_from_db()
    assert not w.token.revoked


def test_tokens_are_not_managed_with_a_token(w):
    client = token_client(w.users["member"], w.pool.team)
    assert client.get("/api/tokens/").status_code == 403
    assert client.post(f"/api/tokens/{w.token.pk}/revoke/").status_code == 403
    assert client.post("/api/tokens/", {"team": "vision", "name": "more"}, format="json").status_code == 403
    assert ApiToken.objects.filter(name="more").count() == 0


def test_a_token_is_issued_only_in_ones_own_team(w):
    client = signed_in(w, "outsider")
    assert client.post("/tokens/", {"team": "vision", "name": "sneak"}).status_code == 400
    api = APIClient()
    api.force_login(w.users["outsider"])
    assert api.post("/api/tokens/", {"team": "vision", "name": "sneak"}, format="json").status_code == 403
    assert not ApiToken.objects.filter(name="sneak").exists()


# --------------------------------------------------------------------------- /submit/check/ across teams


@pytest.fixture
def vision_only_class(w):
    """A class only team vision has quota for."""
    flavor = ResourceFlavorFactory(name="a100")
    QuotaLineFactory(team_quota=w.pool.quota, flavor=flavor, nominal="4")
    return ResourceClassFactory(slug="a100", name="A100", flavors=[flavor], allowed_counts=[1])


def test_the_check_runs_in_the_callers_team_whatever_they_try(w, vision_only_class):
    bob = signed_in(w, "outsider")
    switched = bob.post("/team/", {"team": "vision", "next": "/submit/"})
    assert switched.status_code == 302
    response = bob.post("/submit/check/", {**FORM, "resource_class": "a100", "team": "vision"})
    assert response.status_code == 200
    assert response.context["team"] == w.pool.other_team
    assert response.context["feasibility"] is None  # a100 is not among speech's classes: no check for vision
    assert "resource_class" in response.context["form"].errors
    alice = signed_in(w, "member")
    checked = alice.post("/submit/check/", {**FORM, "resource_class": "a100"})
    assert checked.context["team"] == w.pool.team
    assert checked.context["feasibility"] is not None


def test_the_submit_page_does_not_prefill_from_another_teams_job(w):
    assert signed_in(w, "outsider").get("/submit/", {"from": w.job.pk}).status_code == 404


# --------------------------------------------------------------------------- admin pages for researchers and leads


@pytest.mark.parametrize("role", ["outsider", "member", "lead", "operator"])
def test_researchers_and_leads_are_sent_to_the_admin_sign_in(w, role):
    client = signed_in(w, role)
    urls = [
        "/admin/",
        "/admin/queues/teamquota/",
        f"/admin/queues/job/{w.job.pk}/change/",
        f"/admin/queues/apitoken/{w.token.pk}/change/",
        "/admin/policy/dashboard/",
    ]
    for url in urls:
        assert describe(client.get(url)) == ADMIN_LOGIN, url
    response = client.post(f"/admin/queues/job/{w.job.pk}/change/", {"name": "renamed"})
    assert describe(response) == ADMIN_LOGIN
    w.job.refresh_from_db()
    assert w.job.name == "secret-run"


def test_a_lead_cannot_sign_in_to_the_admin(w):
    response = Client().post("/admin/login/", {"username": "carol", "password": "password", "next": "/admin/"})
    assert response.status_code == 200
    assert "staff account" in response.content.decode()
    assert "_auth_user_id" not in response.wsgi_request.session


# --------------------------------------------------------------------------- next= redirects


OFF_SITE = [
    "https://evil.example/",
    "http://evil.example/jobs/",
    "//evil.example/",
    "///evil.example/",
    "/\\evil.example/",
    "\\\\evil.example/",
    "https:evil.example",
    "https://testserver.evil.example/",
    "javascript:alert(1)",
    " https://evil.example/",
]


@pytest.mark.parametrize("target", OFF_SITE)
def test_sign_in_refuses_an_off_site_next(w, target):
    response = Client().post("/accounts/login/", {"username": "alice", "password": "password", "next": target})
    assert response.status_code == 302
    assert response["Location"] == "/"


def test_sign_in_follows_a_local_next(w):
    response = Client().post(
        "/accounts/login/?next=/jobs/%3Fstate%3Dpending", {"username": "alice", "password": "password"}
    )
    assert response.status_code == 302
    assert response["Location"] == "/jobs/?state=pending"


@pytest.mark.parametrize("target", OFF_SITE[:4])
def test_the_admin_sign_in_refuses_an_off_site_next(w, target):
    response = Client().post("/admin/login/", {"username": "root", "password": "password", "next": target})
    assert response.status_code == 302
    assert response["Location"] == "/"  # LOGIN_REDIRECT_URL (home sends staff on to the pool)


@pytest.mark.parametrize("target", OFF_SITE[:4])
def test_sign_out_and_team_switch_refuse_an_off_site_next(w, target):
    client = signed_in(w, "member")
    switched = client.post("/team/", {"team": "vision", "next": target})
    assert switched["Location"] == "/classes/"
    out = client.post("/accounts/logout/", {"next": target})
    assert out.status_code == 302
    assert "evil.example" not in out["Location"]
