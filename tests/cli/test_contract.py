"""The client keeps to the portal it talks to: the OpenAPI document's submission fields, the job states, the form's
durations (the client is a separate package without Django, so it has its own copies, checked here)."""

from __future__ import annotations

import pytest
import requests

from gpupool import show, spec
from queues.forms import parse_duration
from queues.models import Job


@pytest.mark.django_db(transaction=True)
def test_the_client_knows_every_submission_field_of_the_schema(live_server, serialised):
    schema = requests.get(f"{live_server.url}/api/schema/", params={"format": "json"}, timeout=30).json()
    ref = schema["paths"]["/api/jobs/"]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    fields = schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]["properties"]
    assert set(spec.FIELDS) == set(fields)
    assert set(spec.ALIASES.values()) | set(spec.DURATIONS.values()) | set(spec.FLAGS) <= set(fields)


def test_the_client_knows_every_job_state():  # no database: the states are the model's enumeration
    assert set(show.STATES) == set(Job.State.values)
    assert set(show.FINAL_STATES) == set(Job.FINAL_STATES)


@pytest.mark.parametrize("text", ["90m", "2h", "1h30m", "1d", "45s", "90", "1d2h3m4s", " 2 h ", "0"])
def test_the_client_reads_durations_as_the_submit_form_does(text):
    assert spec.parse_duration(text, key="max_runtime") == parse_duration(text)
