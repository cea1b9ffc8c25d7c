"""A job name's limit is one number everywhere: the form's input, the API and the submission service."""

from __future__ import annotations

import pytest

from queues.api.serializers import JobSubmitSerializer
from queues.forms import JobSubmitForm
from queues.job_spec import MAX_NAME

pytestmark = pytest.mark.django_db


def test_the_form_input_allows_exactly_the_services_limit():
    form = JobSubmitForm(team=None)
    assert form.fields["name"].max_length == MAX_NAME
    assert f'maxlength="{MAX_NAME}"' in str(form["name"])
    assert str(MAX_NAME) in form.fields["name"].help_text


def test_the_form_and_the_api_name_the_field_and_the_limit():
    too_long = "a" * (MAX_NAME + 1)
    form = JobSubmitForm(data={"name": too_long}, team=None)
    form.is_valid()
    assert f"at most {MAX_NAME} characters" in " ".join(form.errors["name"])
    serializer = JobSubmitSerializer(data={"name": too_long})
    serializer.is_valid()
    assert f"no more than {MAX_NAME} characters" in " ".join(str(e) for e in serializer.errors["name"])
