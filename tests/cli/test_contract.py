"""The client keeps to the API it talks to: the submission fields of the OpenAPI document, the job states."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from gpupool import show, spec
from queues.models import Job

pytestmark = pytest.mark.django_db


def test_the_client_knows_every_submission_field_of_the_schema():
    schema = APIClient().get("/api/schema/", {"format": "json"}).json()
    ref = schema["paths"]["/api/jobs/"]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    fields = schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]["properties"]
    assert set(spec.FIELDS) == set(fields)
    assert set(spec.ALIASES.values()) | set(spec.DURATIONS.values()) | set(spec.FLAGS) <= set(fields)


def test_the_client_knows_every_job_state():
    assert set(show.STATES) == set(Job.State.values)
    assert set(show.FINAL_STATES) == set(Job.FINAL_STATES)
