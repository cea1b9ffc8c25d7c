"""The job page's "What was sent to the cluster" panel on a simulated cluster: nothing is sent there, and the panel
shows what a Kubernetes cluster with the same classes would get, built by the same manifest builders."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from kernel.safe_yaml import safe_load_all
from tests.factories import UserFactory
from tests.queues.test_simulated_backend import sim, submit  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(sim):  # noqa: F811
    _, member, rc, _ = sim
    return submit(member, rc, "bert", devices=4, at=timezone.now() - timedelta(minutes=5), env={"EPOCHS": "3"})


def test_simulated_cluster_shows_what_would_be_sent(client, job, django_assert_max_num_queries):
    client.force_login(job.owner)
    with django_assert_max_num_queries(12):
        response = client.get(reverse("queues:job_sent", args=[job.pk]), HTTP_HX_REQUEST="true")
    page = response.content.decode()
    assert 'data-sent="simulated"' in page
    assert "it is a simulated cluster</strong>" in page
    assert "Nothing is sent to" in page
    assert "(would be sent)" in page
    [block] = re.findall(r'<pre class="log"[^>]*>(.*?)</pre>', page, re.S)
    [obj] = safe_load_all(html.unescape(block))
    assert (obj["apiVersion"], obj["kind"], obj["metadata"]["name"]) == ("batch/v1", "Job", job.k8s_name)
    assert obj["spec"]["suspend"] is True
    container = obj["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"][job.resource_class.resource_name] == "4"
    assert {"name": "EPOCHS", "value": "3"} in container["env"]  # the owner sees all of it
    assert "&id0" not in page  # no YAML anchors where two places share a mapping


def test_the_job_page_loads_the_panel_lazily_and_the_poll_does_not(client, job):
    client.force_login(job.owner)
    url = reverse("queues:job_sent", args=[job.pk])
    page = client.get(reverse("queues:job_detail", args=[job.pk])).content.decode()
    assert f'hx-get="{url}" hx-trigger="load"' in page
    poll = client.get(reverse("queues:job_detail", args=[job.pk]), HTTP_HX_REQUEST="true").content.decode()
    assert url not in poll


def test_another_teams_user_gets_404(client, job):
    client.force_login(UserFactory(username="stranger"))
    assert client.get(reverse("queues:job_sent", args=[job.pk])).status_code == 404
