"""Researcher pages: permissions, page vs fragment, polling that stops, forms, query caps."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from queues import services
from queues.models import Job
from queues.services import JobSpec
from queues.views import SESSION_TEAM
from tests.browser.scenarios import RACK, add_catalogue_classes, occupy, research_pool
from tests.factories import JobFactory, MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def pool():
    return research_pool()


@pytest.fixture
def alice(client, pool):
    client.force_login(pool.user)
    return client


def submit(pool, **kw) -> Job:
    values = {"name": "train", "image": "python:3.11", "resource_class": pool.rc, **kw}
    return services.job_submit(owner=pool.user, team=pool.team, spec=JobSpec(**values))


FORM = {"name": "resnet", "image": "registry.example.org/vision/train:1.2", "resource_class": "h100"}


@pytest.mark.parametrize("name", ["queues:classes", "queues:jobs", "queues:job_submit"])
def test_pages_require_login(client, name):
    response = client.get(reverse(name))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_home_sends_a_researcher_to_the_catalogue(alice):
    assert alice.get(reverse("home"))["Location"] == reverse("queues:classes")


def test_catalogue_page_and_fragment(alice, pool):
    occupy(pool, node=pool.nodes[0], count=3)
    response = alice.get(reverse("queues:classes"))
    assert response.status_code == 200
    assert "HX-Request" in response["Vary"]
    html = response.content.decode()
    assert "<html" in html
    assert 'id="queues-class-cards"' in html
    assert "H100 80GB" in html
    assert "13" in html
    assert "of 16 available now" in html
    assert "using <strong>3</strong> of 16" in html
    assert "Starts now" in html
    assert "https://" not in html
    assert "http://" not in html
    fragment = alice.get(reverse("queues:classes"), **HTMX).content.decode()
    assert "<html" not in fragment
    assert fragment.startswith('<section id="queues-class-cards"')


def test_catalogue_query_count_is_bounded(alice, pool, django_assert_max_num_queries):
    # The first view after a change computes and stores the estimates; one more query: the navigation asks
    # whether the Cost link has content; two more: whether the health pages are the user's to read (her
    # permissions and her groups', as operators read them); one more: the live-data note reads the heartbeats; one
    # for the cluster's pending count (a large queue's typical jobs are explained on the quota holders alone:
    # diagnosis_store.explain_context). The guarantees behind the cards (queues.guarantees: the cluster's quotas,
    # cohorts, quota lines, healthy devices, open repair tickets) are read once per cluster, not per class.
    with django_assert_max_num_queries(51):
        alice.get(reverse("queues:classes"))
    with django_assert_max_num_queries(35):  # no change since: the stored estimates, no engine input; reservations
        alice.get(reverse("queues:classes"))


def test_catalogue_query_count_does_not_grow_with_classes(alice, pool):
    with CaptureQueriesContext(connection) as one:
        alice.get(reverse("queues:classes"))
    add_catalogue_classes(pool)
    with CaptureQueriesContext(connection) as three:
        html = alice.get(reverse("queues:classes")).content.decode()
    assert html.count('class="card"') == 3
    assert len(three) == len(one)


def test_another_teams_job_is_404(alice, pool):
    theirs = JobFactory(team=pool.other_team, owner=pool.other_user, cluster=pool.cluster, resource_class=pool.rc)
    for name in ("queues:job_detail", "queues:job_cancel"):
        assert alice.get(reverse(name, args=[theirs.pk])).status_code == 404
    assert alice.post(reverse("queues:job_cancel", args=[theirs.pk])).status_code == 404
    assert alice.get(reverse("queues:job_submit") + f"?from={theirs.pk}").status_code == 404
    theirs.refresh_from_db()
    assert theirs.state == Job.State.PENDING


def test_team_switch_keeps_the_team_in_the_session(alice, pool):
    MembershipFactory(team=pool.other_team, user=pool.user)
    html = alice.get(reverse("queues:jobs")).content.decode()
    assert 'id="queues-team-select"' in html
    response = alice.post(reverse("queues:team_switch"), {"team": "speech", "next": reverse("queues:jobs")})
    assert response["Location"] == reverse("queues:jobs")
    assert alice.session[SESSION_TEAM] == pool.other_team.pk
    assert "Jobs of team <strong>Speech</strong>" in alice.get(reverse("queues:jobs")).content.decode()


def test_team_switch_refuses_a_team_one_is_not_in(alice, pool):
    stranger = TeamFactory(slug="secret")
    response = alice.post(reverse("queues:team_switch"), {"team": stranger.slug, "next": "https://evil.example/"})
    assert response["Location"] == reverse("queues:classes")
    assert SESSION_TEAM not in alice.session


def test_submit_form_shows_class_choices(alice, pool):
    html = alice.get(reverse("queues:job_submit")).content.decode()
    assert 'id="queues-job-form"' in html
    for count in (1, 2, 4, 8):
        assert f'<option value="{count}"' in html
    assert ">rack</option>" in html
    assert "Simulated runtime" in html
    fragment = alice.get(reverse("queues:job_submit") + "?resource_class=h100&name=keep-me", **HTMX)
    text = fragment.content.decode()
    assert text.startswith('<div id="queues-job-form-fields"')
    assert 'value="keep-me"' in text


def test_submit_creates_job_and_redirects(alice, pool):
    data = {
        **FORM,
        "devices_per_pod": "2",
        "pod_count": "1",
        "command": "python train.py",
        "args": "--epochs 3 --name 'a b'",
        "env": "A=1\nB=two",
        "max_runtime": "2h",
        "sim_runtime": "90s",
        "checkpoint_path": "/ckpt",
        "checkpoint_signal": "SIGUSR1",
        "checkpoint_interval": "30m",
        "action": "submit",
    }
    response = alice.post(reverse("queues:job_submit"), data)
    job = Job.objects.get(name="resnet")
    assert response["Location"] == reverse("queues:job_detail", args=[job.pk])
    assert job.args == ["--epochs", "3", "--name", "a b"]
    assert job.env == {"A": "1", "B": "two"}
    assert job.max_runtime_seconds == 7200
    assert job.sim_runtime_seconds == 90
    assert job.checkpoint_interval_seconds == 1800
    assert job.priority_class == pool.normal


@pytest.mark.parametrize(
    ("data", "text"),
    [
        ({"name": "Bad_Name"}, "DNS-1123"),
        ({"image": "not an image!"}, "not an image reference"),
        ({"devices_per_pod": "3"}, "allows 1, 2, 4, 8 devices per pod, not 3"),
        ({"devices_per_pod": "8"}, "can never run: asks 8 GPUs per pod, the largest node has 4"),
        ({"max_runtime": "soon"}, "is not a duration"),
        ({"env": "NOEQUALS"}, "is not KEY=VALUE"),
    ],
)
def test_submit_shows_field_messages(alice, pool, data, text):
    response = alice.post(reverse("queues:job_submit"), {**FORM, "devices_per_pod": "1", "pod_count": "1", **data})
    assert response.status_code == 200
    html = response.content.decode()
    assert 'class="field-error"' in html
    assert text in html.replace("&#x27;", "'")
    assert not Job.objects.exists()


def test_check_without_javascript_renders_the_verdict(alice, pool):
    data = {**FORM, "devices_per_pod": "4", "pod_count": "1", "action": "check"}
    html = alice.post(reverse("queues:job_submit"), data).content.decode()
    assert "Yes — it would start now" in html
    assert not Job.objects.exists()


def test_feasibility_fragment_when_fragmented(alice, pool):
    occupy(pool, node=pool.nodes[0], count=4, name="a")
    occupy(pool, node=pool.nodes[2], count=4, name="b", team=pool.other_team)
    data = {**FORM, "devices_per_pod": "4", "pod_count": "2", "topology_mode": "required", "topology_level": RACK}
    response = alice.post(reverse("queues:job_feasibility"), data, **HTMX)
    html = response.content.decode()
    assert html.startswith('<section id="queues-job-feasibility"')
    assert "topology_fragmented" in html
    assert "Likely start (p50)" in html
    assert "It would start now if" in html
    assert Job.objects.count() == 2  # nothing recorded: only the two blockers


def test_feasibility_fragment_with_errors_names_them_and_swaps_nothing_else(alice, pool):
    # Issue 32: the fields came back out of band as well, and htmx lost their target when the answer it replied
    # to had been replaced meanwhile (htmx:oobErrorNoTarget); the answer names each field and its error instead.
    response = alice.post(reverse("queues:job_feasibility"), {**FORM, "name": "", "pod_count": "1"}, **HTMX)
    html = response.content.decode()
    assert "Fix the form first" in html
    assert "<li>Name: This field is required.</li>" in html
    assert "hx-swap-oob" not in html
    assert html.rstrip().endswith("</section>")  # one element: the answer


def test_resubmit_prefills_the_form(alice, pool):
    job = submit(pool, devices_per_pod=2, args=["--lr", "0.1"], env={"X": "1"}, max_runtime_seconds=5400)
    html = alice.get(reverse("queues:job_submit") + f"?from={job.pk}&devices_per_pod=1").content.decode()
    assert 'value="train"' in html
    assert 'value="--lr 0.1"' in html
    assert 'value="1h30m"' in html
    assert "X=1" in html
    assert '<option value="1" selected>' in html


def test_job_detail_page_and_polling(alice, pool):
    occupy(pool, node=pool.nodes[0], count=4, team=pool.other_team)
    job = submit(pool, devices_per_pod=4, pod_count=4)
    response = alice.get(reverse("queues:job_detail", args=[job.pk]))
    assert response.status_code == 200
    assert "HX-Request" in response["Vary"]
    html = response.content.decode()
    assert f'id="queues-job-live-{job.pk}"' in html
    assert 'hx-trigger="every 5s"' in html
    assert "Why it waits" in html
    assert "Place in queue" in html
    assert "Timeline" in html
    fragment = alice.get(reverse("queues:job_detail", args=[job.pk]), **HTMX)
    assert fragment.status_code == 200
    assert "<html" not in fragment.content.decode()
    services.job_cancel(job=job, user=pool.user)
    final = alice.get(reverse("queues:job_detail", args=[job.pk]), **HTMX)
    assert final.status_code == 286
    assert 'hx-trigger="every 5s"' not in final.content.decode()


def test_job_detail_query_count_is_bounded(alice, pool, django_assert_max_num_queries):
    for i in range(3):
        occupy(pool, node=pool.nodes[i], count=2, name=f"r{i}", team=pool.other_team)
    job = submit(pool, devices_per_pod=4, pod_count=4)
    # The first view after a change stores the cluster's diagnoses (reading the stored digests, moving every row to
    # the new version, writing the changed ones) and computes the suggestions; the navigation asks whether the user
    # leads a team (the Cost link), the job page whether they may see every team (the operator permission), and
    # tenant privacy which teams' job names they may read. A wait for quota reads the cluster's guarantees (whether
    # repairs reduced the team's quota: its quotas, cohorts, quota lines, healthy devices, the class's flavors) and
    # the page the job's protection and preemptions (its events). One more: the live-data note reads the heartbeats.
    # Here Celery runs eagerly, so that first view also runs the refresh it asks for (queues.diagnosis_refresh: the
    # cluster's engine input read in full, the pages stored), which a deployment runs in the worker.
    with django_assert_max_num_queries(87):  # + the reservations: the engine input's holds and the page's
        alice.get(reverse("queues:job_detail", args=[job.pk]))
    with django_assert_max_num_queries(24):  # no change since: the stored diagnosis, no engine input; the heartbeats
        alice.get(reverse("queues:job_detail", args=[job.pk]))


def test_cancel_asks_then_cancels(alice, pool):
    job = submit(pool)
    html = alice.get(reverse("queues:job_cancel", args=[job.pk])).content.decode()
    assert "Yes, cancel the job" in html
    response = alice.post(reverse("queues:job_cancel", args=[job.pk]))
    assert response["Location"] == reverse("queues:job_detail", args=[job.pk])
    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED
    again = alice.post(reverse("queues:job_cancel", args=[job.pk]), follow=True)
    assert "Not cancelled: the job already ended" in again.content.decode()


def test_job_list_filters_and_fragment(alice, pool):
    submit(pool, name="mine")
    other = UserFactory(username="carol")
    MembershipFactory(team=pool.team, user=other)
    JobFactory(team=pool.team, owner=other, cluster=pool.cluster, resource_class=pool.rc, name="carols")
    JobFactory(team=pool.other_team, owner=pool.other_user, cluster=pool.cluster, resource_class=pool.rc, name="bobs")
    html = alice.get(reverse("queues:jobs")).content.decode()
    assert "mine" in html
    assert "carols" in html
    assert "bobs" not in html
    html = alice.get(reverse("queues:jobs") + "?scope=mine").content.decode()
    assert "mine" in html
    assert "carols" not in html
    html = alice.get(reverse("queues:jobs") + "?owner=carol").content.decode()
    assert "carols" in html
    assert ">mine<" not in html
    assert '<option value="carol" selected>carol</option>' in html  # the filter keeps its value
    assert '<option value="bob"' not in html  # only the team's members are offered
    html = alice.get(reverse("queues:jobs") + "?resource_class=h100&submitted_from=2026-01-02").content.decode()
    assert '<option value="h100" selected>H100 80GB</option>' in html
    assert 'name="submitted_from" id="id_submitted_from" value="2026-01-02"' in html
    html = alice.get(reverse("queues:jobs") + "?state=nonsense").content.decode()
    assert "is not valid: ignored" in html
    fragment = alice.get(reverse("queues:jobs") + "?state=pending", **HTMX).content.decode()
    assert fragment.startswith('<section id="queues-job-list-table"')


def test_job_list_polls_only_while_jobs_can_change(alice, pool):
    job = submit(pool)
    assert 'hx-trigger="every 10s"' in alice.get(reverse("queues:jobs")).content.decode()
    services.job_cancel(job=job, user=pool.user)
    assert 'hx-trigger="every 10s"' not in alice.get(reverse("queues:jobs")).content.decode()
    poll = alice.get(reverse("queues:jobs"), HTTP_HX_TRIGGER="queues-job-list-table", **HTMX)
    assert poll.status_code == 286


def _bulk_jobs(pool, n: int) -> None:
    now = timezone.now()
    Job.objects.bulk_create(
        Job(
            team=pool.team,
            owner=pool.user,
            cluster=pool.cluster,
            resource_class=pool.rc,
            name=f"bulk-{i}",
            image="python:3.11",
            state=Job.State.SUCCEEDED,
            submitted_at=now - timedelta(minutes=i),
            queued_at=now - timedelta(minutes=i),
            state_changed_at=now - timedelta(minutes=i),
            finished_at=now - timedelta(minutes=i),
        )
        for i in range(n)
    )


@pytest.mark.parametrize("n", [3, 180])
def test_job_list_query_count_does_not_grow_with_jobs(alice, pool, n, django_assert_max_num_queries):
    _bulk_jobs(pool, n)
    first = alice.get(reverse("queues:jobs"))
    # 13: the navigation's health-pages check (her permissions and her groups') and the live-data note's heartbeats
    with django_assert_max_num_queries(13):
        alice.get(reverse("queues:jobs"))
    with django_assert_max_num_queries(13):
        alice.get(reverse("queues:jobs") + "?state=succeeded&scope=mine&resource_class=h100")
    if n > 50:
        page = first.context["page"]
        assert len(page.jobs) == 50
        assert page.next_cursor
        with django_assert_max_num_queries(13):
            second = alice.get(reverse("queues:jobs") + f"?cursor={page.next_cursor}")
        assert second.context["page"].jobs[0].name == "bulk-50"


def test_user_without_team(client):
    user = UserFactory()
    client.force_login(user)
    assert client.get(reverse("queues:job_submit")).status_code == 403
    assert "not in a team" in client.get(reverse("queues:classes")).content.decode()
    assert client.get(reverse("queues:jobs")).status_code == 200


def test_team_without_quota_is_told_so(client):
    user = UserFactory()
    team = TeamFactory(slug="lonely")
    MembershipFactory(team=team, user=user)
    client.force_login(user)
    research_pool()
    html = client.post(reverse("queues:job_feasibility"), {**FORM, "pod_count": "1", "devices_per_pod": "1"}).content
    assert b"team lonely has no quota in any cluster" in html
    catalogue = client.get(reverse("queues:classes")).content.decode()
    assert "H100 80GB" not in catalogue
    assert "No class is available to" in catalogue


def test_classes_are_the_teams_own(alice, pool):
    """A class whose hardware only another team's queue has quota on is not shown, offered or accepted."""
    from pools.models import ResourceClass
    from tests.factories import QuotaLineFactory, ResourceClassFactory, ResourceFlavorFactory

    theirs = ResourceFlavorFactory(name="b200", display_name="B200")
    ResourceClassFactory(slug="b200", name="B200 private", flavors=[theirs], allowed_counts=[1])
    QuotaLineFactory(team_quota=pool.other_team.quotas.get(), flavor=theirs, nominal="8")
    catalogue = alice.get(reverse("queues:classes")).content.decode()
    assert "H100 80GB" in catalogue
    assert "B200 private" not in catalogue
    form = alice.get(reverse("queues:job_submit")).content.decode()
    assert 'value="b200"' not in form
    response = alice.post(
        reverse("queues:job_submit"), {**FORM, "resource_class": "b200", "devices_per_pod": "1", "pod_count": "1"}
    )
    assert response.status_code == 200
    assert "is not available to team vision" in response.context["form"].errors["resource_class"][0]
    assert not Job.objects.exists()
    # Bob sees it: his team's queue has quota for it.
    alice.force_login(pool.other_user)
    assert "B200 private" in alice.get(reverse("queues:classes")).content.decode()
    assert ResourceClass.objects.filter(slug="b200").exists()


def test_submit_form_offers_the_teams_priorities_only(alice, pool):
    from tests.factories import PriorityClassFactory

    PriorityClassFactory(name="urgent", value=1000)
    low = PriorityClassFactory(name="low", value=10)
    html = alice.get(reverse("queues:job_submit")).content.decode()
    assert 'value="urgent"' in html
    assert "Default (normal)" in html
    pool.team.priority_classes.set([low])
    html = alice.get(reverse("queues:job_submit")).content.decode()
    assert 'value="urgent"' not in html
    assert 'value="normal"' not in html
    assert "Default (normal)" not in html  # the default is not the team's: it must pick
    assert 'value="low"' in html
    response = alice.post(
        reverse("queues:job_submit"), {**FORM, "priority_class": "urgent", "devices_per_pod": "1", "pod_count": "1"}
    )
    assert response.context["form"].errors["priority_class"]
    assert not Job.objects.exists()
    response = alice.post(
        reverse("queues:job_submit"), {**FORM, "priority_class": "low", "devices_per_pod": "1", "pod_count": "1"}
    )
    assert response.status_code == 302
    assert Job.objects.get().priority_class == low


def test_job_detail_says_why_a_stopped_queue_evicted_the_job(alice, pool):
    from clusters.backends.simulated import simulated_cluster_tick_run

    job = submit(pool, devices_per_pod=4, pod_count=1, sim_runtime_seconds=7200)
    t0 = timezone.now()
    simulated_cluster_tick_run(cluster_id=pool.cluster.pk, now=t0)
    simulated_cluster_tick_run(cluster_id=pool.cluster.pk, now=t0 + timedelta(seconds=1))
    pool.quota.stop_policy = "HoldAndDrain"
    pool.quota.save()
    simulated_cluster_tick_run(cluster_id=pool.cluster.pk, now=t0 + timedelta(seconds=2))
    html = alice.get(reverse("queues:job_detail", args=[job.pk])).content.decode()
    assert "Being evicted: an admin stopped your team's queue (stop policy HoldAndDrain)" in html
    assert "Evicted: an admin stopped the team&#x27;s quota (ClusterQueue vision, stop policy HoldAndDrain)" in html
    simulated_cluster_tick_run(cluster_id=pool.cluster.pk, now=t0 + timedelta(seconds=3))
    html = alice.get(reverse("queues:job_detail", args=[job.pk])).content.decode()
    assert "waits until an admin restarts the queue" in html
    assert "ClusterQueue vision cannot admit jobs: it is stopped" in html


def test_switching_class_takes_the_new_class_topology_and_keeps_typed_fields(alice, pool):
    """Issue 32: switching class left Topology = Required (from the class before), so Check failed on fields the
    user never touched."""
    from tests.factories import ResourceClassFactory

    ResourceClassFactory(
        slug="h100-rack", name="H100 rack", flavors=[pool.flavor], topology_mode="required", topology_level=RACK
    )
    carried = {**FORM, "resource_class": "h100", "topology_mode": "required", "topology_level": RACK}
    url = reverse("queues:job_submit")
    html = alice.get(url, carried, HTTP_HX_TRIGGER_NAME="resource_class", **HTMX).content.decode()
    assert '<option value="" selected>Any placement</option>' in html
    assert 'value="resnet"' in html  # what was typed stays
    # A resubmission (no class change) keeps the job's own topology.
    kept = alice.get(url, carried, **HTMX).content.decode()
    assert '<option value="required" selected>Required</option>' in kept
    # A level the chosen class does not have is never shown as chosen: the class's own rule instead.
    stale = alice.get(url, {**carried, "topology_level": "no-such-level"}, **HTMX).content.decode()
    assert '<option value="" selected>Any placement</option>' in stale


def test_the_form_shows_the_running_total_of_every_pod_set(alice, pool):
    """Issue 32: a PyTorchJob's master (8 GPUs by default) came on top of its workers with no total shown."""
    pool.rc.allowed_kinds = ["batch", "pytorchjob"]
    pool.rc.save(update_fields=["allowed_kinds"])
    url = reverse("queues:job_submit")
    query = {**FORM, "kind": "pytorchjob", "devices_per_pod": "8", "pod_count": "2"}
    html = alice.get(url, query, **HTMX).content.decode()
    assert "24 GPUs in all: master 1 pod × 8 + worker 2 pods × 8" in html
    assert 'id="queues-job-total-plan"' in html
    html = alice.get(url, {**query, "pod_set_master_devices": "0"}, **HTMX).content.decode()
    assert "16 GPUs in all: master 1 pod × 0 + worker 2 pods × 8" in html
    batch = alice.get(url, {**FORM, "devices_per_pod": "4", "pod_count": "2"}, **HTMX).content.decode()
    assert "8 GPUs in all: main 2 pods × 4" in batch


def test_a_poll_with_nothing_changed_is_answered_not_modified_in_a_few_queries(
    alice, pool, django_assert_max_num_queries
):
    """The live fragment carries an ETag; a poll that sends it back while nothing the fragment shows changed gets a
    bodiless 304 (the browser keeps what it shows), in a few queries whatever the queue; any change renders anew."""
    occupy(pool, node=pool.nodes[0], count=4, team=pool.other_team)
    job = submit(pool, devices_per_pod=4, pod_count=4)
    url = reverse("queues:job_detail", args=[job.pk])
    assert "ETag" not in alice.get(url)  # the page itself is not validated, only its poll
    first = alice.get(url, **HTMX)
    tag = first["ETag"]
    assert first.status_code == 200
    assert first["Cache-Control"] == "private, no-cache"
    with django_assert_max_num_queries(4):  # session, user, the tag's one indexed read
        again = alice.get(url, HTTP_IF_NONE_MATCH=tag, **HTMX)
    assert again.status_code == 304
    assert again.content == b""
    assert again["ETag"] == tag

    Job.objects.filter(pk=job.pk).update(name="renamed")  # a column the fragment may show
    changed = alice.get(url, HTTP_IF_NONE_MATCH=tag, **HTMX)
    assert changed.status_code == 200
    assert changed["ETag"] != tag

    services.job_cancel(job=job, user=pool.user)  # the job ends: the poll stops, whatever the tag
    final = alice.get(url, HTTP_IF_NONE_MATCH=changed["ETag"], **HTMX)
    assert final.status_code == 286
    assert "ETag" not in final


def test_a_poll_of_a_job_one_may_not_see_is_not_found_whatever_it_sends(client, pool):
    job = submit(pool)
    client.force_login(pool.other_user)
    assert client.get(reverse("queues:job_detail", args=[job.pk]), HTTP_IF_NONE_MATCH="*", **HTMX).status_code == 404
