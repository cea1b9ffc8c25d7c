"""The submit form and the job pages with workload kinds: one form, the class's kinds, companion pod sets."""

from __future__ import annotations

import pytest
from django.urls import reverse

from pools.workload_kinds import kind_spec
from queues import services
from queues.models import Job
from queues.services import JobSpec
from tests.browser.scenarios import research_pool

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
FORM = {"name": "tune", "image": "registry.example.org/ml/ray:2", "resource_class": "h100", "pod_count": "2"}


@pytest.fixture
def pool():
    """The research pool, its h100 class allowing batch, rayjob, pytorchjob and session."""
    pool = research_pool()
    pool.rc.allowed_kinds = ["batch", "pytorchjob", "rayjob", "session"]
    pool.rc.save(update_fields=["allowed_kinds"])
    return pool


@pytest.fixture
def alice(client, pool):
    client.force_login(pool.user)
    return client


def test_submit_form_offers_only_the_classes_kinds(alice, pool):
    html = alice.get(reverse("queues:job_submit")).content.decode()
    assert '<option value="rayjob">Ray job</option>' in html
    assert '<option value="batch" selected>Batch job</option>' in html
    assert 'value="inference"' not in html
    assert "pod_set_" not in html  # a batch job has no companion pod set


def test_choosing_a_kind_swaps_in_its_pod_set_fields_and_defaults(alice, pool):
    url = reverse("queues:job_submit") + "?resource_class=h100&kind=rayjob&name=keep-me"
    html = alice.get(url, **HTMX).content.decode()
    assert html.startswith('<div id="queues-job-form-fields"')
    assert '<option value="rayjob" selected>' in html
    assert 'name="pod_set_head_cpu"' in html
    assert "Empty: 4, e.g. 500m or 64Gi" in html
    assert "Pods (workers)" in html
    assert kind_spec("rayjob").summary.replace("'", "&#x27;") in html
    session = alice.get(reverse("queues:job_submit") + "?resource_class=h100&kind=session", **HTMX).content.decode()
    assert 'name="max_runtime"' not in session  # runs until stopped
    assert f"Empty: {kind_spec('session').default_image}" in session


def test_submit_rayjob_with_a_bigger_head(alice, pool):
    data = {**FORM, "kind": "rayjob", "devices_per_pod": "2", "pod_set_head_cpu": "16", "action": "submit"}
    response = alice.post(reverse("queues:job_submit"), data)
    job = Job.objects.get(name="tune")
    assert response["Location"] == reverse("queues:job_detail", args=[job.pk])
    assert job.kind == "rayjob"
    assert job.companion_pod_sets == [{"name": "head", "count": 1, "devices_per_pod": 0, "cpu": "16", "memory": "16Gi"}]


def test_submit_session_without_an_image_gets_the_notebook_image(alice, pool):
    data = {**FORM, "image": "", "pod_count": "1", "kind": "session", "devices_per_pod": "1", "action": "submit"}
    alice.post(reverse("queues:job_submit"), data)
    assert Job.objects.get(name="tune").image == kind_spec("session").default_image


def test_submit_batch_without_an_image_is_refused(alice, pool):
    data = {**FORM, "image": "", "devices_per_pod": "1", "action": "submit"}
    html = alice.post(reverse("queues:job_submit"), data).content.decode()
    assert "This field is required." in html
    assert not Job.objects.exists()


def test_submit_shows_pod_set_and_kind_errors(alice, pool):
    data = {**FORM, "kind": "rayjob", "devices_per_pod": "2", "pod_set_head_cpu": "lots", "action": "submit"}
    html = alice.post(reverse("queues:job_submit"), data).content.decode().replace("&#x27;", "'")
    assert "pod set head: cpu invalid quantity 'lots'" in html
    data = {**FORM, "kind": "inference", "devices_per_pod": "1", "action": "submit"}
    html = alice.post(reverse("queues:job_submit"), data).content.decode()
    assert "Select a valid choice" in html  # the class does not offer it
    assert not Job.objects.exists()


def test_resubmit_prefills_kind_and_pod_sets(alice, pool):
    spec = JobSpec(
        name="ddp",
        image="python:3.11",
        resource_class=pool.rc,
        kind="rayjob",
        devices_per_pod=2,
        companions={"head": {"cpu": "12"}},
    )
    job = services.job_submit(owner=pool.user, team=pool.team, spec=spec)
    html = alice.get(reverse("queues:job_submit") + f"?from={job.pk}").content.decode()
    assert '<option value="rayjob" selected>' in html
    assert 'name="pod_set_head_cpu" value="12"' in html


def test_job_page_and_list_show_kind_and_pod_sets(alice, pool):
    spec = JobSpec(name="ddp", image="python:3.11", resource_class=pool.rc, kind="pytorchjob", devices_per_pod=2)
    job = services.job_submit(owner=pool.user, team=pool.team, spec=spec)
    html = alice.get(reverse("queues:job_detail", args=[job.pk])).content.decode()
    assert "Distributed training (PyTorchJob)" in html
    assert 'id="queues-job-pod-sets"' in html
    assert '<th scope="row">master</th>' in html
    assert '<th scope="row">worker</th>' in html
    listing = alice.get(reverse("queues:jobs")).content.decode()
    assert "PyTorchJob" in listing


def test_a_session_is_stopped_not_cancelled(alice, pool):
    spec = JobSpec(name="nb", image="", resource_class=pool.rc, kind="session", devices_per_pod=1)
    job = services.job_submit(owner=pool.user, team=pool.team, spec=spec)
    Job.objects.filter(pk=job.pk).update(state=Job.State.RUNNING)
    html = alice.get(reverse("queues:job_detail", args=[job.pk])).content.decode()
    assert "Stop development session…" in html
    assert f"kubectl -n {job.k8s_namespace} port-forward pod/{job.k8s_name} 8888:8888" in html
    confirm = alice.get(reverse("queues:job_cancel", args=[job.pk])).content.decode()
    assert "Stop nb?" in confirm
    assert "Yes, stop the development session" in confirm
    response = alice.post(reverse("queues:job_cancel", args=[job.pk]), follow=True)
    assert "Stopped nb." in response.content.decode()
    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED
