"""The job page's "What was sent to the cluster" panel in kube mode: each kind's object, and on a DRA cluster its
ResourceClaimTemplates, as YAML equal to what the portal created in the API emulator."""

from __future__ import annotations

import html
import re
from contextlib import nullcontext

import pytest
from django.urls import reverse

from kernel.safe_yaml import safe_load_all
from pools.workload_kinds import WorkloadKind
from queues.models import Job
from tests.factories import UserFactory
from tests.kube.cluster import gpu_node
from tests.kube.kinds_cluster import submit_kind_job
from tests.kube.test_dra_submit import h100_slice
from tests.kube.test_workload_kinds import SHAPES as KIND_SHAPES

pytestmark = pytest.mark.django_db
NS = "team-vision"

#: kind → (top-level object's kind, pods of the primary pod set, devices per pod): the batch Job and the others.
SHAPES = {WorkloadKind.BATCH: ("Job", 1, 8), **KIND_SHAPES}


@pytest.fixture
def dra(portal, emulator):
    """The portal's two nodes publish their GPUs only as ResourceSlices (no device plugin)."""
    for name in ("gpu-a1", "gpu-a2"):
        emulator.put(gpu_node(name, gpus=0))
        emulator.put(h100_slice(name))


@pytest.fixture
def submit_kind(world, portal, django_capture_on_commit_callbacks):
    def run(kind: str, **kwargs) -> Job:
        _, pods, gpus = SHAPES[kind]
        return submit_kind_job(portal, django_capture_on_commit_callbacks, kind, pods=pods, gpus=gpus, **kwargs)

    return run


def shown(client, job: Job) -> tuple[str, list[dict]]:
    """The panel's HTML and the objects its YAML blocks hold."""
    response = client.get(reverse("queues:job_sent", args=[job.pk]), HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    page = response.content.decode()
    blocks = re.findall(r'<pre class="log"[^>]*>(.*?)</pre>', page, re.S)
    return page, [doc for block in blocks for doc in safe_load_all(html.unescape(block))]


def same_as_created(shown_obj: dict, created: dict) -> None:
    """What the panel shows is what was created: the same labels, annotations and spec."""
    assert shown_obj["apiVersion"] == created["apiVersion"]
    assert shown_obj["spec"] == created["spec"]
    for key in ("name", "namespace", "labels", "annotations"):
        assert shown_obj["metadata"].get(key) == created["metadata"].get(key), key


@pytest.mark.parametrize("kind", list(SHAPES))
def test_owner_sees_the_created_object_and_its_claim_templates_on_a_dra_cluster(
    kind, dra, submit_kind, client, emulator, django_assert_max_num_queries
):
    job = submit_kind(kind)
    object_kind = SHAPES[kind][0]
    created = emulator.get_obj(object_kind, job.k8s_name, NS)
    assert created is not None
    assert job.k8s_uid == created["metadata"]["uid"]
    templates = sorted(emulator.all("ResourceClaimTemplate"), key=lambda t: t["metadata"]["name"])
    assert templates  # every kind has a pod set with devices
    client.force_login(job.owner)
    with django_assert_max_num_queries(12):
        page, objects = shown(client, job)
    assert 'data-sent="created"' in page
    assert f"{NS}/{job.k8s_name}" in page
    assert "would be sent" not in page
    top, *claims = objects
    assert top["kind"] == object_kind
    same_as_created(top, created)
    assert [c["kind"] for c in claims] == ["ResourceClaimTemplate"] * len(templates)
    for claim, template in zip(claims, templates, strict=True):
        same_as_created(claim, template)
        assert claim["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
    assert f"ResourceClaimTemplate <code>{templates[0]['metadata']['name']}</code>" in page


def test_a_device_plugin_cluster_sends_no_claim_template(submit_kind, client, emulator):
    job = submit_kind(WorkloadKind.BATCH)
    client.force_login(job.owner)
    _, objects = shown(client, job)
    assert [o["kind"] for o in objects] == ["Job"]
    requests = objects[0]["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    assert requests["nvidia.com/gpu"] == "8"


def test_a_job_the_cluster_has_not_created_yet_says_so(portal, world, client):
    # Its after-commit callbacks are dropped: the backend never creates it.
    job = submit_kind_job(portal, lambda execute: nullcontext([]), WorkloadKind.BATCH, pods=1, gpus=8)
    assert not job.k8s_uid
    client.force_login(job.owner)
    page, objects = shown(client, job)
    assert 'data-sent="not-yet"' in page
    assert [o["kind"] for o in objects] == ["Job"]


def test_a_job_that_cannot_be_its_kind_says_why(submit_kind, client, emulator):
    job = submit_kind(WorkloadKind.RAYJOB, command=[])
    client.force_login(job.owner)
    page, objects = shown(client, job)
    assert objects == []
    assert 'data-sent="error"' in page
    assert "A Ray job needs a command" in page


def test_another_teams_user_gets_404(submit_kind, client):
    job = submit_kind(WorkloadKind.BATCH)
    client.force_login(UserFactory(username="stranger"))
    assert client.get(reverse("queues:job_sent", args=[job.pk])).status_code == 404
