"""REST API and workload kinds: kind and pod sets in and out, refusals by field, the OpenAPI schema."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from queues.api.tokens import api_token_create
from queues.models import Job
from tests.browser.scenarios import research_pool

pytestmark = pytest.mark.django_db

BODY = {"name": "tune", "image": "registry.example.org/ml/ray:2", "resource_class": "h100"}


@pytest.fixture
def pool():
    """The research pool, its h100 class allowing batch, rayjob and session."""
    pool = research_pool()
    pool.rc.allowed_kinds = ["batch", "rayjob", "session"]
    pool.rc.save(update_fields=["allowed_kinds"])
    return pool


@pytest.fixture
def api(pool):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_create(user=pool.user, team=pool.team, name='ci').key}")
    return client


def test_api_submits_a_rayjob_and_shows_every_pod_set(api, pool):
    body = {**BODY, "kind": "rayjob", "devices_per_pod": 2, "pod_count": 2, "pod_sets": [{"name": "head", "cpu": "8"}]}
    response = api.post("/api/jobs/", body, format="json")
    assert response.status_code == 201, response.json()
    data = response.json()
    assert data["kind"] == "rayjob"
    assert [(p["name"], p["primary"], p["count"], p["devices_per_pod"], p["cpu"]) for p in data["pod_sets"]] == [
        ("head", False, 1, 0, "8"),
        ("workers", True, 2, 2, data["pod_sets"][1]["cpu"]),
    ]
    assert data["pod_sets"][0]["flavors"] == []
    listed = api.get("/api/jobs/").json()["results"][0]
    assert listed["kind"] == "rayjob"
    # every pod set counted in the list too (issue 32: the CLI listed a gang by its primary pod set only)
    assert (listed["total_devices"], listed["pod_set_count"], listed["state_label"]) == (4, 2, "Pending")
    assert Job.objects.get().companion_pod_sets[0]["cpu"] == "8"


def test_api_session_needs_no_image(api, pool):
    body = {"name": "nb", "resource_class": "h100", "kind": "session"}
    response = api.post("/api/jobs/", body, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["image"].startswith("quay.io/jupyter/")


@pytest.mark.parametrize(
    ("body", "field", "text"),
    [
        ({"kind": "pytorchjob"}, "kind", "does not allow the kind pytorchjob"),
        ({"kind": "teapot"}, "kind", "is not a valid choice"),
        ({"kind": "rayjob", "pod_sets": [{"name": "head"}, {"name": "head"}]}, "pod_sets", "listed twice"),
        ({"kind": "rayjob", "pod_sets": [{"name": "head", "memory": "lots"}]}, "pod_sets", "memory invalid quantity"),
        ({"kind": "session", "max_runtime_seconds": 3600}, "max_runtime_seconds", "runs until it is stopped"),
    ],
)
def test_api_refuses_bad_kinds_and_pod_sets_by_field(api, pool, body, field, text):
    response = api.post("/api/jobs/", {**BODY, **body}, format="json")
    assert response.status_code == 400
    problems = response.json()["fields"][field] if "fields" in response.json() else response.json()[field]
    assert text in str(problems), response.json()
    assert not Job.objects.exists()


def test_schema_documents_kind_and_pod_sets(api):
    schema = api.get("/api/schema/", {"format": "json"}).json()
    components = schema["components"]["schemas"]
    submit = components["JobSubmit"]["properties"]
    assert "kind" in submit
    assert submit["pod_sets"]["items"]["$ref"].endswith("/PodSetIn")
    job = components["Job"]["properties"]
    assert job["pod_sets"]["items"]["$ref"].endswith("/PodSet")
    assert set(components["PodSet"]["properties"]) == {
        "name",
        "primary",
        "count",
        "devices_per_pod",
        "cpu",
        "memory",
        "flavors",
        "nodes",
    }


def test_a_stopped_session_reads_stopped_not_cancelled(api, pool, client):
    """Issue 32: a development session that was stopped showed as "Cancelled"."""
    made = api.post("/api/jobs/", {"name": "nb", "resource_class": "h100", "kind": "session"}, format="json").json()
    assert api.post(f"/api/jobs/{made['id']}/cancel/").status_code == 200
    listed = api.get("/api/jobs/").json()["results"][0]
    assert (listed["state"], listed["state_label"]) == ("cancelled", "Stopped")
    client.force_login(pool.user)
    html = client.get(f"/jobs/{made['id']}/").content.decode()
    assert 'data-state="cancelled">Stopped</span>' in html
    assert "Cancelled" not in html
