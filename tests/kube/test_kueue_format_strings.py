"""One fixture per format string Kueue writes (tests/fixtures/reference/kueue/format_strings.yaml, each citing its
source file and version): the translation gives the expected code and numbers, ``manage.py explain`` gives the
same code on a Workload (or Event) built from the fixture, and a text that is not Kueue's stays "unrecognised"
with its raw text shown."""

from __future__ import annotations

import html
import io
import json
import re

import pytest
import yaml
from django.core.management import call_command
from django.urls import reverse

from queues import kueue_messages as km
from tests.fixtures import REFERENCE
from tests.kube.cluster import at
from tests.kube.schemas import validate
from tests.kube.test_explain import as_list, workload

FIXTURES = REFERENCE / "kueue" / "format_strings.yaml"
SURFACES = ("QuotaReserved", "Evicted", "Deactivated", "AdmissionCheck", "Event", "Finished")
#: Codes that are not waits: the translation says so, the verdict comes from the workload's other conditions.
INFORMATIONAL = ("", "admitted", "starting", "running")


def _fixtures() -> list[dict]:
    entries = yaml.safe_load(FIXTURES.read_text())["formats"]
    assert entries, f"no fixture in {FIXTURES}"
    return entries


FORMATS = _fixtures()
IDS = [f["id"] for f in FORMATS]


def _value(t: km.Translation, key: str):
    """A figure of the translation: the speaking reason's first, else any pod set reason's."""
    if key in t.details:
        return t.details[key]
    for ps in t.details.get("podSets", []):
        for reason in ps["reasons"]:
            if key in reason:
                return reason[key]
    return None


def _objects(f: dict) -> list[dict]:
    """The cluster objects that carry the fixture's message where Kueue writes it."""
    name = f"w-{f['id'].replace('_', '-')}"[:63]
    surface, reason, text = f["surface"], f["reason"], f["message"]
    if surface == "QuotaReserved":
        return [workload(name, ("QuotaReserved", "False", reason or "Pending", text))]
    if surface == "Evicted":
        return [workload(name, ("Evicted", "True", reason, text))]
    if surface == "Deactivated":
        wl = workload(name, ("Evicted", "True", reason, text))
        wl["spec"]["active"] = False
        return [wl]
    if surface == "Finished":
        return [workload(name, ("Finished", "True", reason, text))]
    if surface == "AdmissionCheck":
        check = {"name": "prov", "state": f["state"], "message": text, "lastTransitionTime": "2026-09-01T08:00:00Z"}
        wl = workload(
            name,
            ("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
            ("Admitted", "False", "UnsatisfiedChecks", "The workload has not all checks ready"),
            admission={"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "count": 1}]},
            admissionChecks=[check],
        )
        return [wl]
    assert surface == "Event"
    wl = workload(name, ("QuotaReserved", "False", "Pending", "Workload is pending evaluation in the scheduling queue"))
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.17f3a", "namespace": "team-a"},
        "involvedObject": {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "name": name,
            "namespace": "team-a",
        },
        "reason": reason,
        "message": text,
        "type": "Normal",
    }
    return [wl, event]


def _explain(objects: list[dict]) -> dict:
    out = io.StringIO()
    call_command("explain", "-", "--json", stdin=io.StringIO(as_list(*objects)), stdout=out)
    (record,) = json.loads(out.getvalue())
    return record


def test_every_fixture_cites_a_source_file_and_a_version():
    assert len(IDS) == len(set(IDS))
    known = {i for i, _p, _c in km.FLAVOR_PATTERNS} | {i for i, _p, _c in km.WHOLE_PATTERNS}
    known |= {"podset_flavor_assignment_failed", "pending_preemption_suffix", "preemption_failed_suffix"}
    known |= {"pending_migration_suffix", "admission_check_state"}
    for f in FORMATS:
        assert f["source"].startswith(("pkg/", "apis/")), f["id"]
        assert f["version"], f["id"]
        assert f["surface"] in SURFACES, f["id"]
        assert f["translation"] in known, f["id"]
        assert f["code"] in (*km.WAIT_CODES, *INFORMATIONAL), f["id"]


def test_fixtures_span_the_releases_and_every_family():
    versions = " ".join(f["version"] for f in FORMATS)
    for marker in ("v0.9", "v0.10", "v0.14", "v0.15", "main", "pre-v0.10"):
        assert marker in versions, marker
    sources = {f["source"].split(" ")[0] for f in FORMATS}
    for family in (
        "pkg/scheduler/flavorassigner/flavorassigner.go",
        "pkg/scheduler/scheduler.go",
        "pkg/scheduler/preemption/preemption.go",
        "pkg/cache/scheduler/tas_flavor_snapshot.go",
        "pkg/controller/core/workload_controller.go",
        "pkg/controller/admissionchecks/provisioning/controller.go",
    ):
        assert family in sources, family
    assert {f["state"] for f in FORMATS if f["surface"] == "AdmissionCheck"} == {
        "Pending",
        "Retry",
        "Rejected",
        "Ready",
    }


@pytest.mark.parametrize("f", [f for f in FORMATS if f["surface"] != "AdmissionCheck"], ids=lambda f: f["id"])
def test_translate_fixture_gives_its_code_and_numbers(f):
    t = km.translate(f["message"], reason=f["reason"])
    assert t.recognised, t.details
    assert not t.details.get("unrecognised"), t.details
    assert f["translation"] in t.ids, t.ids
    assert t.code == f["code"]
    assert t.message
    assert t.message != "(no message)"
    for key, value in f["numbers"].items():
        assert _value(t, key) == value, (key, t.details)


@pytest.mark.parametrize("f", FORMATS, ids=lambda f: f["id"])
def test_explain_maps_fixture_to_its_code(f):
    objects = _objects(f)
    assert all(validate(o) == [] for o in objects if o["kind"] == "Workload")
    record = _explain(objects)
    if f["surface"] == "Event":
        (event,) = record["events"]
        assert (event["code"], event["kueue_message"]) == (f["code"], f["message"])
        assert event["message"] == km.translate(f["message"], reason=f["reason"]).message
        return
    assert record["code"] == f["code"], record
    assert record["code"] != km.UNRECOGNISED
    if f["surface"] == "AdmissionCheck":
        assert f["message"] in record["message"]  # the check's own words, as its controller wrote them
        return
    assert record["kueue_message"] == f["message"]
    if f["code"] not in INFORMATIONAL:
        assert record["message"].startswith(km.translate(f["message"], reason=f["reason"]).message)


NOT_KUEUE = [
    "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",  # the kube-scheduler's, not Kueue's
    "couldn't assign flavors to pod set main: the GPUs are on holiday",
    "Back-off restarting failed container",
]


@pytest.mark.parametrize("text", NOT_KUEUE)
def test_text_that_is_not_kueues_is_unrecognised_and_shown_raw(text):
    t = km.translate(text, reason="Pending")
    assert t.code == km.UNRECOGNISED
    assert t.message == text
    record = _explain([workload("w", ("QuotaReserved", "False", "Pending", text))])
    assert record["code"] == km.UNRECOGNISED
    assert record["message"] == f"Unrecognised Kueue message (the portal has no translation yet): {text}"
    assert record["kueue_message"] == text


def test_admission_check_states_worst_first():
    wl = _objects({"id": "x", "surface": "AdmissionCheck", "state": "Pending", "reason": "", "message": "booking"})[0]
    wl["status"]["admissionChecks"].append(
        {"name": "mk", "state": "Rejected", "message": "no cluster", "lastTransitionTime": "2026-09-01T08:00:00Z"}
    )
    record = _explain([wl])
    assert record["code"] == km.MISCONFIGURED
    assert "mk: no cluster" in record["message"]
    assert "booking" not in record["message"]


# --- the job page shows the same sentence ---------------------------------------------------------------------------


def _pool_free(f: dict) -> bool:
    """The sentence does not depend on the pool view (quota figures, free devices): explain and the sync agree."""
    return (
        f["surface"] == "QuotaReserved"
        and "insufficient unused quota" not in f["message"]
        and "topology" not in f["message"]
    )


@pytest.mark.django_db
def test_job_page_shows_the_sentence_explain_gives(world, kube, portal, client):
    job = world.submit()
    kube.create_workload(job.k8s_name, "team-vision")
    client.force_login(portal.user)
    url = reverse("queues:job_detail", args=[job.pk])
    checked = 0
    for i, f in enumerate(f for f in FORMATS if _pool_free(f)):
        expected = _explain(_objects(f))
        kube.pending(job.k8s_name, "team-vision", f["message"], reason=f["reason"] or "Pending", when=at(i + 1))
        world.sync()
        job = world.job(job)
        # the portal names its flavors (H100); a dump has only Kueue's names (h100): otherwise the same sentence
        portal_names = re.sub(r"(?<![\w-])h100(?![\w-])", portal.flavor.display_name, expected["message"])
        assert (job.wait_reason, job.wait_message) == (expected["code"], portal_names), f["id"]
        assert html.escape(job.wait_message) in client.get(url).content.decode(), f["id"]
        checked += 1
    assert checked >= 30
    text = "Back-off restarting failed container"
    kube.pending(job.k8s_name, "team-vision", text, when=at(100))
    world.sync()
    job = world.job(job)
    assert (job.wait_reason, job.wait_message) == ("", text)
    assert text in client.get(url).content.decode()
