"""Every form and API field, fed hypothesis-generated junk, gives a 4xx or a page: never a server error.

Junk: text with NUL and control characters, huge and negative numbers, wrong types, deep JSON. The examples are
derandomized (the "repeatable" profile of tests/conftest.py) and bounded so the module runs in well under a minute.
"""

from __future__ import annotations

import json

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from billing.forms import CostFilterForm
from pools.views import PoolFilterForm
from queues.api.serializers import JobSubmitSerializer
from queues.api.tokens import api_token_create
from queues.forms import JobFilterForm, JobSubmitForm
from tests.browser.scenarios import research_pool
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

EXAMPLES = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

API_BASE = {"name": "resnet", "image": "registry.example.org/vision/train:1.2", "resource_class": "h100"}
FORM_BASE = {**API_BASE, "devices_per_pod": "1", "pod_count": "1"}
API_FIELDS = sorted(JobSubmitSerializer().fields)
FORM_FIELDS = [*sorted(JobSubmitForm.base_fields), "team", "action", "next"]

texts = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.sampled_from("a-\x00\n\r\t\u202e\ufeff0Z%;'\"<>"), max_size=30),
    st.sampled_from(
        [
            "",
            "\x00",
            "25000d",
            "99999999d",
            "2024-13-45",
            "2024-02-30",
            "9" * 40,
            "-1",
            "1e400",
            "NaN",
            "9999-12-31",
            "0001-01-01",
            "a" * 5000,
        ]
    ),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
)
#: Boundaries where storage breaks: negative, past a 32-bit or 64-bit column, and absurdly large.
edge_numbers = st.sampled_from([-1, 0, 1, 59, 2**31, 2**63, 10**12, 10**30, -(10**30)])
scalars = st.one_of(
    edge_numbers,
    texts,
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
)
json_values = st.recursive(scalars, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(texts, kids, max_size=3))


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


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


@pytest.fixture
def staff(pool):
    client = Client(raise_request_exception=False)
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def ok(response) -> None:
    assert response.status_code < 500, (response.status_code, response.content[:500])


EVERY_FIELD = settings(EXAMPLES, max_examples=12)


@EVERY_FIELD
@given(values=st.fixed_dictionaries(dict.fromkeys(API_FIELDS, json_values)))
@pytest.mark.parametrize("url", ["/api/jobs/", "/api/feasibility/"])
def test_api_submission_every_field(api, url, values):
    for field, value in values.items():  # one field wrong at a time: the others valid, so it reaches the services
        ok(api.post(url, {**API_BASE, field: value}, format="json"))


@EXAMPLES
@given(fields=st.dictionaries(st.sampled_from(API_FIELDS), json_values, min_size=2, max_size=4))
def test_api_submission_fields_together(api, fields):
    ok(api.post("/api/jobs/", {**API_BASE, **fields}, format="json"))


@EXAMPLES
@given(field=st.sampled_from(API_FIELDS), depth=st.sampled_from([40, 1500, 5000]))
def test_api_deep_json(api, field, depth):
    body = json.dumps(API_BASE)[:-1] + f', "{field}": {deep(depth)}}}'
    ok(api.post("/api/jobs/", body, content_type="application/json"))


@EVERY_FIELD
@given(values=st.fixed_dictionaries(dict.fromkeys(FORM_FIELDS, texts)))
@pytest.mark.parametrize("url", ["/submit/", "/submit/check/"])
def test_form_submission_every_field(web, url, values):
    for field, value in values.items():
        ok(web.post(url, {**FORM_BASE, field: value}, HTTP_HX_REQUEST="true" if url.endswith("check/") else ""))


GET_PAGES = {
    "/jobs/": [*sorted(JobFilterForm.base_fields), "team", "cursor"],
    "/classes/": ["team"],
    "/submit/": ["team", "from", *FORM_FIELDS],
    "/api/jobs/": [*sorted(JobFilterForm.base_fields), "team", "cursor", "limit", "offset"],
    "/api/classes/": ["team"],
    "/cost/": sorted(CostFilterForm.base_fields),
    "/cost/export.csv": sorted(CostFilterForm.base_fields),
    "/cost/mine/": ["months", "team"],
    "/pool/": [*sorted(PoolFilterForm.base_fields), "page"],
    "/health/": ["cluster", "problems", "page", "team"],
    "/health/tickets/": ["all"],
    "/admin/policy/dashboard/": ["range"],
    "/admin/policy/audit/": ["model", "user", "since", "format"],
}


@EVERY_FIELD
@given(data=st.data())
@pytest.mark.parametrize("url", sorted(GET_PAGES))
def test_query_values(web, staff, api, url, data):
    values = data.draw(st.fixed_dictionaries(dict.fromkeys(GET_PAGES[url], texts)))
    client = api if url.startswith("/api/") else (staff if url.startswith(("/cost", "/health", "/admin")) else web)
    for name, value in values.items():  # one parameter at a time, then all of them together
        ok(client.get(url, {name: value}))
    ok(client.get(url, values))


@EXAMPLES
@given(team=texts, target=texts)
def test_team_switch(web, team, target):
    ok(web.post("/team/", {"team": team, "next": target}))
