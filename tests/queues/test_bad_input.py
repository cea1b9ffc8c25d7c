"""Bad input is a 400 (or a form error) naming the field and its limit, never a 500."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from rest_framework.test import APIClient

from queues.api.tokens import api_token_create
from tests.browser.scenarios import research_pool
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

BODY = {"name": "resnet", "image": "registry.example.org/vision/train:1.2", "resource_class": "h100"}
FORM = {
    "name": "resnet",
    "image": "registry.example.org/vision/train:1.2",
    "resource_class": "h100",
    "devices_per_pod": "1",
    "pod_count": "1",
}


@pytest.fixture
def pool():
    return research_pool()


@pytest.fixture
def api(pool):
    issued = api_token_create(user=pool.user, team=pool.team, name="ci")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issued.key}")
    return client


@pytest.fixture
def web(pool):
    client = Client(raise_request_exception=False)
    client.force_login(pool.user)
    return client


API_CASES = {
    "sim runtime huge": {"sim_runtime_seconds": 10**12},
    "sim runtime negative": {"sim_runtime_seconds": -5},
    "checkpoint interval huge": {"checkpoint_interval_seconds": 10**12, "checkpoint_path": "/ckpt"},
    "max runtime huge": {"max_runtime_seconds": 10**30},
    "pods huge": {"pod_count": 10**30},
    "devices huge": {"devices_per_pod": 10**30},
    "checkpoint path long": {"checkpoint_path": "/" + "p" * 5000},
    "checkpoint signal long": {"checkpoint_signal": "SIG" + "U" * 100, "checkpoint_path": "/c"},
    "env trailing newline": {"env": {"FOO\n": "1"}},
    "env huge": {"env": {f"K{i}": "v" for i in range(5000)}},
    "nul name": {"name": "res\x00net"},
    "nul env value": {"env": {"A": "x\x00"}},
    "nul command": {"command": ["py\x00"]},
    "nul team": {"team": "vis\x00ion"},
    "nul class": {"resource_class": "h1\x0000"},
    "nul priority": {"priority_class": "nor\x00mal"},
    "topology level long": {"topology_level": "x" * 10000, "topology_mode": "required"},
}


@pytest.mark.parametrize("change", API_CASES.values(), ids=API_CASES.keys())
@pytest.mark.parametrize("url", ["/api/jobs/", "/api/feasibility/"])
def test_api_bad_bodies_are_400(api, url, change):
    response = api.post(url, {**BODY, **change}, format="json")
    assert response.status_code == 400, response.content[:300]


@pytest.mark.parametrize(
    "change",
    [
        {"sim_runtime": "25000d"},
        {"checkpoint_interval": "25000d", "checkpoint_path": "/c"},
        {"max_runtime": "25000d"},
        {"sim_runtime": "99999999999999999999"},
        {"checkpoint_path": "/" + "p" * 600},
        {"checkpoint_signal": "SIG" + "U" * 30, "checkpoint_path": "/c"},
        {"env": "FOO\x00=1"},
        {"name": "a\x00b"},
        {"resource_class": "h\x00"},
        {"pod_count": "9" * 40},
        {"devices_per_pod": "9" * 40},
    ],
)
@pytest.mark.parametrize("url", ["/submit/", "/submit/check/"])
def test_form_bad_values_are_not_500(web, url, change):
    response = web.post(url, {**FORM, **change}, HTTP_HX_REQUEST="true" if url.endswith("check/") else "")
    assert response.status_code < 500, response.content[:300]


@pytest.mark.parametrize(
    "url",
    [
        "/jobs/?team=%00",
        "/classes/?team=%00",
        "/submit/?team=%00",
        "/health/?team=%00",
        "/jobs/?state=%00",
        "/api/jobs/?team=%00",
        "/api/classes/?team=%00",
        "/api/jobs/?state=%00&name=%00",
        "/cost/?start=9999-12-30",
        "/cost/?start=9999-12-31&end=9999-12-31",
        "/cost/export.csv?start=9999-12-30",
        "/cost/mine/?start=9999-12-30",
        "/jobs/?submitted_to=9999-12-31",
        "/jobs/?submitted_from=9999-12-31",
        "/jobs/?submitted_from=0001-01-01",
        "/api/jobs/?submitted_to=9999-12-31",
        "/api/jobs/?offset=99999999999999999999999&limit=99999999999999999999",
        "/api/classes/?offset=99999999999999999999999",
        "/pool/?page=99999999999999999999999",
        "/health/?page=99999999999999999999999",
        "/api/jobs/?submitted_from=0001-01-01&submitted_to=0001-01-01",
        "/cost/?start=0001-01-01",
        "/pool/?flavor=%00",
    ],
)
def test_get_bad_query_values_are_not_500(web, url):
    response = web.get(url)
    assert response.status_code < 500, (url, response.content[:300])


def test_team_switch_nul_is_not_500(web):
    assert web.post("/team/", {"team": "\x00"}).status_code < 500


def test_deep_json_is_400(api):
    deep = "[" * 5000 + "]" * 5000
    body = json.dumps(BODY)[:-1] + ', "env": ' + deep + "}"
    response = api.post("/api/jobs/", body, content_type="application/json")
    assert response.status_code == 400


LIMIT_CASES = [
    ("sim_runtime_seconds", "sim_runtime", 10**12, "25000d", "between 0 s and 30 days"),
    ("checkpoint_interval_seconds", "checkpoint_interval", 10**12, "25000d", "between 60 s and 30 days"),
    ("max_runtime_seconds", "max_runtime", 10**12, "25000d", "between 60 s and 30 days"),
]


@pytest.mark.parametrize(("api_field", "form_field", "api_value", "form_value", "limit"), LIMIT_CASES)
def test_page_check_and_api_give_the_same_message(pool, api, web, api_field, form_field, api_value, form_value, limit):
    extra = {"checkpoint_path": "/ckpt"}
    messages = []
    for url in ("/api/jobs/", "/api/feasibility/"):
        response = api.post(url, {**BODY, **extra, api_field: api_value}, format="json")
        assert response.status_code == 400
        (message,) = response.json()[api_field]
        messages.append(message.replace(str(api_value), "N"))
    for url in ("/submit/", "/submit/check/"):
        response = web.post(url, {**FORM, **extra, form_field: form_value}, HTTP_HX_REQUEST="true")
        assert response.status_code in (200, 400)
        text = response.content.decode()
        assert limit in text, url
    assert len(set(messages)) == 1
    assert limit in messages[0]
    assert not pool.team.jobs.exists()


def test_env_name_with_a_trailing_newline_is_refused(api):
    response = api.post("/api/jobs/", {**BODY, "env": {"FOO\n": "1"}}, format="json")
    assert response.status_code == 400
    assert "not a valid environment variable name" in response.json()["env"][0]


def test_nul_is_refused_by_the_middleware_naming_the_parameter(web, api):
    response = web.get("/jobs/?team=%00")
    assert response.status_code == 400
    assert b"'team'" in response.content
    assert api.post("/api/jobs/", {**BODY, "name": "a\x00"}, format="json").status_code == 400
    assert web.post("/team/", {"team": "vis\x00ion"}).status_code == 400
    assert api.get("/api/classes/h1%0000/").status_code == 400  # a slug in the path
    assert api.post("/api/jobs/", '{"name": "a\\u0000"}', content_type="application/json").status_code == 400


@pytest.mark.parametrize("start", ["9999-12-30", "1800-01-01"])
def test_cost_dates_out_of_range_name_the_limit(pool, start):
    admin = Client()
    admin.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    response = admin.get(f"/cost/?start={start}&end={start}")
    assert response.status_code < 500
    assert b"Choose a date between 2000-01-01" in response.content
