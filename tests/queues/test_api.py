"""REST API: team-scoped tokens, the same visibility as the pages, error mapping, the OpenAPI schema."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from queues import services
from queues.api.tokens import api_token_create, hash_key
from queues.models import ApiToken, Job
from queues.services import JobSpec
from tests.browser.scenarios import RACK, occupy, research_pool
from tests.factories import JobFactory, MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db

BODY = {"name": "resnet", "image": "registry.example.org/vision/train:1.2", "resource_class": "h100"}


@pytest.fixture
def pool():
    return research_pool()


def token_client(user, team) -> tuple[APIClient, str]:
    issued = api_token_create(user=user, team=team, name="ci")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issued.key}")
    return client, issued.key


@pytest.fixture
def api(pool):
    client, _ = token_client(pool.user, pool.team)
    return client


def submit(pool, **kw) -> Job:
    values = {"name": "train", "image": "python:3.11", "resource_class": pool.rc, **kw}
    return services.job_submit(owner=pool.user, team=pool.team, spec=JobSpec(**values))


def test_anonymous_is_refused(pool):
    response = APIClient().get("/api/jobs/")
    assert response.status_code in (401, 403)


def test_token_is_hashed_at_rest_and_marks_use(pool):
    client, key = token_client(pool.user, pool.team)
    token = ApiToken.objects.get()
    assert token.key_hash == hash_key(key)
    assert key not in (token.key_hash, token.prefix)
    assert key.startswith(token.prefix)
    assert client.get("/api/jobs/").status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None


@pytest.mark.parametrize("change", ["revoked", "expired", "left_team", "wrong"])
def test_dead_tokens_are_refused(pool, change):
    client, _ = token_client(pool.user, pool.team)
    token = ApiToken.objects.get()
    if change == "revoked":
        token.revoked = True
        token.save()
    elif change == "expired":
        token.expires_at = timezone.now() - timedelta(seconds=1)
        token.save()
    elif change == "left_team":
        pool.user.memberships.all().delete()
    else:
        client.credentials(HTTP_AUTHORIZATION="Token gpp_nope")
    response = client.get("/api/jobs/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


def test_token_sees_only_its_team(pool):
    MembershipFactory(team=pool.other_team, user=pool.user)
    mine = submit(pool)
    theirs = JobFactory(team=pool.other_team, owner=pool.other_user, cluster=pool.cluster, resource_class=pool.rc)
    client, _ = token_client(pool.user, pool.team)
    ids = [j["id"] for j in client.get("/api/jobs/").json()["results"]]
    assert ids == [mine.pk]
    assert client.get(f"/api/jobs/{theirs.pk}/").status_code == 404
    assert client.get("/api/jobs/", {"team": "speech"}).status_code == 403
    # The same user in a browser session sees both teams, or one when asked.
    session = APIClient()
    session.force_login(pool.user)
    assert {j["id"] for j in session.get("/api/jobs/").json()["results"]} == {mine.pk, theirs.pk}
    assert [j["id"] for j in session.get("/api/jobs/", {"team": "speech"}).json()["results"]] == [theirs.pk]


def test_session_team_parameter_is_checked_against_membership(pool):
    session = APIClient()
    session.force_login(pool.user)
    response = session.get("/api/jobs/", {"team": "speech"})
    assert response.status_code == 403
    assert "not a member" in response.json()["detail"]


def test_another_teams_job_is_404_everywhere(api, pool):
    theirs = JobFactory(team=pool.other_team, owner=pool.other_user, cluster=pool.cluster, resource_class=pool.rc)
    for path in ("", "wait-reason/", "timeline/"):
        assert api.get(f"/api/jobs/{theirs.pk}/{path}").status_code == 404
    assert api.post(f"/api/jobs/{theirs.pk}/cancel/").status_code == 404


def test_submit_and_get(api, pool):
    response = api.post(
        "/api/jobs/",
        {**BODY, "devices_per_pod": 2, "command": ["python", "train.py"], "env": {"A": "1"}, "sim_runtime_seconds": 60},
        format="json",
    )
    assert response.status_code == 201, response.json()
    data = response.json()
    assert data["team"] == "vision"
    assert data["owner"] == "alice"
    assert data["state"] == "pending"
    assert data["command"] == ["python", "train.py"]
    assert api.get(f"/api/jobs/{data['id']}/").json()["name"] == "resnet"


@pytest.mark.parametrize(
    ("body", "field", "text"),
    [
        ({"name": "Bad_Name"}, "name", "DNS-1123"),
        ({"image": "not an image!"}, "image", "not an image reference"),
        ({"devices_per_pod": 3}, "devices_per_pod", "allows 1, 2, 4, 8"),
        ({"devices_per_pod": 8}, "devices_per_pod", "can never run: asks 8 GPUs per pod, the largest node has 4"),
        ({"resource_class": "nope"}, "resource_class", "does not exist"),
    ],
)
def test_submit_field_errors_are_400(api, body, field, text):
    response = api.post("/api/jobs/", {**BODY, **body}, format="json")
    assert response.status_code == 400
    assert any(text in m for m in response.json()[field]), response.json()
    assert not Job.objects.exists()


def test_another_teams_class_is_not_listed_nor_accepted(api, pool):
    from tests.factories import QuotaLineFactory, ResourceClassFactory, ResourceFlavorFactory

    theirs = ResourceFlavorFactory(name="b200", display_name="B200")
    ResourceClassFactory(slug="b200", name="B200 private", flavors=[theirs], allowed_counts=[1])
    QuotaLineFactory(team_quota=pool.other_team.quotas.get(), flavor=theirs, nominal="8")
    assert [c["slug"] for c in api.get("/api/classes/").json()] == ["h100"]
    assert api.get("/api/classes/b200/").status_code == 404
    for url in ("/api/jobs/", "/api/feasibility/"):
        response = api.post(url, {**BODY, "resource_class": "b200", "name": "Bad_Name"}, format="json")
        assert response.status_code == 400
        errors = response.json()
        assert "is not available to team vision" in errors["resource_class"][0]
        assert "DNS-1123" in errors["name"][0]  # every problem at once
    assert not Job.objects.exists()
    bob, _ = token_client(pool.other_user, pool.other_team)
    assert "b200" in [c["slug"] for c in bob.get("/api/classes/").json()]


def test_only_the_teams_allowed_priorities(api, pool):
    from tests.factories import PriorityClassFactory

    urgent = PriorityClassFactory(name="urgent", value=1000)
    low = PriorityClassFactory(name="low", value=10)
    pool.team.priority_classes.set([low])
    assert api.get("/api/teams/").json()[0]["priorities"] == ["low"]
    response = api.post("/api/jobs/", {**BODY, "priority_class": "urgent"}, format="json")
    assert response.status_code == 400
    assert response.json()["priority_class"] == ["team vision may not use priority urgent (allowed: low)"]
    # Nor the default, when the team's list leaves it out.
    response = api.post("/api/jobs/", BODY, format="json")
    assert response.status_code == 400
    assert "may not use the default priority normal" in response.json()["priority_class"][0]
    assert api.post("/api/jobs/", {**BODY, "priority_class": "low"}, format="json").status_code == 201
    # Bob's team has no list: every priority.
    bob, _ = token_client(pool.other_user, pool.other_team)
    assert bob.get("/api/teams/").json()[0]["priorities"] == ["urgent", "normal", "low"]
    assert urgent.teams.count() == 0


def test_submit_with_a_team_of_another_token_is_403(api):
    response = api.post("/api/jobs/", {**BODY, "team": "speech"}, format="json")
    assert response.status_code == 403


def test_cancel_then_conflict(api, pool):
    job = submit(pool)
    response = api.post(f"/api/jobs/{job.pk}/cancel/")
    assert response.status_code == 200
    assert response.json()["state"] == "cancelled"
    again = api.post(f"/api/jobs/{job.pk}/cancel/")
    assert again.status_code == 409
    assert "already ended" in again.json()["detail"]


def test_wait_reason_and_timeline(api, pool):
    occupy(pool, node=pool.nodes[0], count=4, name="a")
    occupy(pool, node=pool.nodes[2], count=4, name="b", team=pool.other_team)
    job = submit(pool, devices_per_pod=4, pod_count=2, topology_mode="required", topology_level=RACK)
    data = api.get(f"/api/jobs/{job.pk}/wait-reason/").json()
    assert data["waiting"] is True
    assert data["code"] == "topology_fragmented"
    assert data["position"] == 1
    assert data["queue_length"] == 1
    assert data["eta"]["p50"]
    assert data["suggestions"]
    timeline = api.get(f"/api/jobs/{job.pk}/timeline/").json()
    assert timeline[0]["kind"] == "submitted"
    assert timeline[0]["ongoing"] is True


def test_feasibility(api, pool):
    response = api.post("/api/feasibility/", {**BODY, "devices_per_pod": 4}, format="json")
    assert response.status_code == 200
    assert response.json()["admissible"] is True
    assert response.json()["eta"]["starts_now"] is True
    bad = api.post("/api/feasibility/", {**BODY, "devices_per_pod": 8}, format="json")
    assert bad.status_code == 400
    assert "can never run" in bad.json()["devices_per_pod"][0]
    assert not Job.objects.exists()


def test_classes_with_availability_and_quota(api, pool):
    occupy(pool, node=pool.nodes[0], count=3)
    [cls] = api.get("/api/classes/").json()
    assert cls["slug"] == "h100"
    assert cls["availability"]["available"] == 13
    assert cls["quota"] == {"nominal": 16, "borrowing_limit": None, "used": 3}
    assert cls["expected_wait"]["starts_now"] is True
    assert cls["largest_node"] == 4
    assert api.get("/api/classes/h100/").json()["slug"] == "h100"
    assert api.get("/api/classes/nope/").status_code == 404


def test_list_filters_and_cursor_pages(api, pool):
    now = timezone.now()
    for i in range(7):
        JobFactory(
            team=pool.team,
            owner=pool.user,
            cluster=pool.cluster,
            resource_class=pool.rc,
            name=f"j{i}",
            submitted_at=now - timedelta(minutes=i),
            state=Job.State.SUCCEEDED if i % 2 else Job.State.PENDING,
        )
    page = api.get("/api/jobs/", {"limit": 3}).json()
    assert [j["name"] for j in page["results"]] == ["j0", "j1", "j2"]
    assert page["previous"] is None
    page2 = api.get(page["next"]).json()
    assert [j["name"] for j in page2["results"]] == ["j3", "j4", "j5"]
    assert [j["name"] for j in api.get("/api/jobs/", {"state": "succeeded"}).json()["results"]] == ["j1", "j3", "j5"]
    assert api.get("/api/jobs/", {"state": "bogus"}).status_code == 400


@pytest.mark.parametrize("n", [2, 120])
def test_list_query_count_does_not_grow(api, pool, n, django_assert_max_num_queries):
    now = timezone.now()
    for i in range(n):
        JobFactory(
            team=pool.team,
            owner=pool.user,
            cluster=pool.cluster,
            resource_class=pool.rc,
            submitted_at=now - timedelta(seconds=i),
            membership=False,
        )
    with django_assert_max_num_queries(8):
        api.get("/api/jobs/", {"limit": 50})


def test_tokens_endpoint_issues_a_key_once(pool):
    session = APIClient()
    session.force_login(pool.user)
    response = session.post("/api/tokens/", {"team": "vision", "name": "laptop"}, format="json")
    assert response.status_code == 201
    key = response.json()["key"]
    listed = session.get("/api/tokens/").json()
    assert "key" not in listed[0]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/teams/").json() == [
        {"slug": "vision", "name": "Vision", "namespace": "vision", "priorities": ["normal"]}
    ]
    # A token cannot mint tokens.
    assert client.post("/api/tokens/", {"team": "vision", "name": "x"}, format="json").status_code in (401, 403)
    session.post(f"/api/tokens/{listed[0]['id']}/revoke/")
    assert client.get("/api/teams/").status_code == 401


def test_schema_json_and_yaml(client):
    response = client.get(reverse("api:schema") + "?format=json")
    assert response.status_code == 200
    schema = json.loads(response.content)
    assert schema["openapi"].startswith("3.")
    for path in ("/api/jobs/", "/api/jobs/{id}/cancel/", "/api/jobs/{id}/wait-reason/", "/api/feasibility/"):
        assert path in schema["paths"]
    assert "teamToken" in schema["components"]["securitySchemes"]
    yaml = client.get(reverse("api:schema"))
    assert yaml.status_code == 200
    assert b"openapi:" in yaml.content


def test_admin_issues_a_token_and_shows_the_key_once(client, pool):
    admin_user = UserFactory(username="root", is_staff=True, is_superuser=True)
    client.force_login(admin_user)
    response = client.post(
        reverse("admin:queues_apitoken_add"),
        {"team": pool.team.pk, "user": pool.user.pk, "name": "cluster-bot", "expires_at_0": "", "expires_at_1": ""},
        follow=True,
    )
    assert response.status_code == 200
    token = ApiToken.objects.get(name="cluster-bot")
    [message] = [str(m) for m in response.context["messages"] if "Token key" in str(m)]
    key = message.rsplit(" ", 1)[-1]
    assert hash_key(key) == token.key_hash
    refused = client.post(
        reverse("admin:queues_apitoken_add"),
        {"team": pool.other_team.pk, "user": pool.user.pk, "name": "x", "expires_at_0": "", "expires_at_1": ""},
    )
    assert b"is not a member of team speech" in refused.content
