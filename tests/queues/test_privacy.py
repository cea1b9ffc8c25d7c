"""Tenant privacy: other teams' jobs are seen as team and amount, never name, owner, id or cohort path; admins see all."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission
from django.utils import timezone

from queues import services
from queues.models import Job, JobEvent
from queues.privacy import Redactor, redactor_for, redactors_for
from queues.visibility import OPERATOR_GROUP
from tests.factories import (
    AllocationFactory,
    DeviceFactory,
    JobFactory,
    MembershipFactory,
    NodeFactory,
    TeamFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db

KUEUE = (
    "Preempted to accommodate a workload (UID: 4548c8bd, JobUID: 99aa) due to reclamation within the cohort; "
    "preemptor path: /research/speech; preemptee path: /research/vision"
)


@pytest.fixture
def world():
    vision = TeamFactory(slug="vision", namespace="team-vision")
    speech = TeamFactory(slug="speech", namespace="team-speech")
    alice = UserFactory(username="alice")
    MembershipFactory(team=vision, user=alice)
    admin = UserFactory(username="root", is_staff=True, is_superuser=True)
    victim = JobFactory(team=vision, owner=alice, name="resnet", state=Job.State.RUNNING)
    bob = UserFactory(username="bob")
    MembershipFactory(team=speech, user=bob)
    preemptor = JobFactory(team=speech, owner=bob, name="secret-bert", cluster=victim.cluster)
    services.job_preempt(victim, now=timezone.now(), preemptor=preemptor, reason="InCohortReclamation", message=KUEUE)
    return type(
        "W",
        (),
        {
            "vision": vision,
            "speech": speech,
            "alice": alice,
            "admin": admin,
            "victim": victim,
            "preemptor": preemptor,
            "bob": bob,
        },
    )


def test_job_page_timeline_names_the_other_team_only(client, world):
    client.force_login(world.alice)
    html = client.get(f"/jobs/{world.victim.pk}/").content.decode()
    assert "Preempted to make room for a job of team speech" in html
    assert "secret-bert" not in html
    assert "preemptor path" not in html


def test_api_timeline_has_no_id_uid_or_cohort_path_of_the_other_job(client, world):
    client.force_login(world.alice)
    entries = client.get(f"/api/jobs/{world.victim.pk}/timeline/").json()
    preempted = next(e for e in entries if e["kind"] == JobEvent.Kind.PREEMPTED)
    text = str(entries)
    assert "a job of team speech" in preempted["message"]
    assert "secret-bert" not in text
    assert "preemptor" not in preempted["details"]
    assert str(world.preemptor.pk) not in str(preempted["details"])
    assert "4548c8bd" not in text
    assert "/research/" not in text


def test_the_preemptors_team_reads_its_own_job_and_the_victim_as_a_team(client, world):
    client.force_login(world.bob)
    entries = client.get(f"/api/jobs/{world.preemptor.pk}/timeline/").json()
    making_room = next(e for e in entries if e["kind"] == JobEvent.Kind.PREEMPTING)
    assert making_room["message"].startswith("Making room: a job of team vision is being preempted")
    assert "resnet" not in str(entries)


def test_admins_see_every_name(client, world):
    client.force_login(world.admin)
    html = client.get(f"/jobs/{world.victim.pk}/").content.decode()
    assert "speech/secret-bert" in html
    entries = client.get(f"/api/jobs/{world.victim.pk}/timeline/").json()
    assert (
        next(e for e in entries if e["kind"] == JobEvent.Kind.PREEMPTED)["details"]["preemptor"] == world.preemptor.pk
    )


def test_wait_reasons_name_the_other_team_only(client, world):
    job = JobFactory(team=world.vision, owner=world.alice, name="waiting")
    services.job_set_wait_reason(
        job,
        code="higher_priority_ahead",
        message="Capacity is being freed for team-speech/secret-bert-12 (priority 1000), which preempted jobs to get "
        "it and is first in line; this job is considered after it.",
        details={"ahead": "team-speech/secret-bert-12", "aheadPriority": 1000},
        now=timezone.now(),
    )
    client.force_login(world.alice)
    body = client.get(f"/api/jobs/{job.pk}/").json()
    assert body["wait"]["message"].startswith("Capacity is being freed for a job of team speech (priority 1000)")
    reason = client.get(f"/api/jobs/{job.pk}/wait-reason/").json()
    assert "secret-bert" not in str(reason)
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "secret-bert" not in html
    assert "a job of team speech" in html


def test_pool_page_tooltips_name_other_teams_jobs_by_team(client, world):
    node = NodeFactory(cluster=world.victim.cluster)
    own, other = DeviceFactory(node=node, index=0), DeviceFactory(node=node, index=1)
    AllocationFactory(job=world.victim, device=own)
    AllocationFactory(job=world.preemptor, device=other)
    client.force_login(world.alice)
    html = client.get("/pool/").content.decode()
    assert "In use by vision/resnet" in html
    assert "In use by a job of team speech" in html
    assert "secret-bert" not in html
    client.force_login(world.admin)
    assert "In use by speech/secret-bert" in client.get("/pool/").content.decode()


def test_redactor_leaves_own_teams_and_unrelated_text_alone():
    r = Redactor(sees_all=False, own_slugs={"vision"}, others=[("speech", "team-speech")])
    assert r.text("vision/resnet waits for nvidia.com/gpu") == "vision/resnet waits for nvidia.com/gpu"
    assert r.text("room for speech/bert and team-speech/bert-3.") == (
        "room for a job of team speech and a job of team speech."
    )
    assert r.details({"victim": 3, "victims": ["team-speech/x-1"], "n": 2}) == {
        "victims": ["a job of team speech"],
        "n": 2,
    }


def test_operators_and_admins_get_a_redactor_that_changes_nothing(world):
    assert redactor_for(world.admin).text(KUEUE) == KUEUE
    assert redactor_for(world.alice).text(KUEUE) == (
        "Preempted to accommodate a workload due to reclamation within the cohort"
    )


def test_redactors_for_many_readers_agree_with_one_at_a_time():
    """The bulk form (notifications of a burst) reads as redactor_for does, for every kind of reader."""
    vision, speech = TeamFactory(slug="vision"), TeamFactory(slug="speech", namespace="team-speech")
    member = MembershipFactory(team=vision).user
    both = MembershipFactory(team=speech).user
    MembershipFactory(team=vision, user=both)
    operator = UserFactory()
    operator.groups.add(Group.objects.get(name=OPERATOR_GROUP))
    direct = UserFactory()
    direct.user_permissions.add(Permission.objects.get(codename="view_job", content_type__app_label="queues"))
    readers = [
        member,
        both,
        operator,
        direct,
        UserFactory(is_staff=True),
        UserFactory(is_superuser=True),
        UserFactory(is_staff=True, is_active=False),
        UserFactory(),
    ]
    bulk = redactors_for(u.pk for u in readers)
    text = "vision/a, team-speech/b and speech/c (UID: 1); preemptor path: /x"
    for reader in readers:
        assert bulk[reader.pk].text(text) == redactor_for(reader).text(text), reader
