"""A job's run on its page: simulated pod logs and events that follow what the simulation did, the lazily loaded
fragment through the ClusterPort, a clear message when the cluster cannot be reached, and DCGM utilisation."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from clusters.backends import backend_for
from clusters.backends.simulated import simulated_cluster_tick_run
from pools.gpu_usage import GpuUtilSample
from pools.health.ingest import health_ingest_scrape
from pools.models import Allocation
from queues import ports
from queues.job_run import job_utilisation
from queues.models import Job
from tests.health.scrapes import exposition, gpu
from tests.queues.test_simulated_backend import sim, state, submit  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db


def tick(cluster, at):
    return simulated_cluster_tick_run(cluster_id=cluster.pk, now=at)


@pytest.fixture
def failed(sim):  # noqa: F811
    """A 2-GPU job that runs 10 minutes and fails (the simulated-failure option)."""
    cluster, member, rc, _ = sim
    t0 = timezone.now() - timedelta(hours=1)
    job = submit(member, rc, "train-fails", devices=2, at=t0, runtime=600, sim_fails=True,
                 command=["python", "train.py"], args=["--epochs", "3"])  # fmt: skip
    tick(cluster, t0)
    tick(cluster, t0 + timedelta(seconds=1))
    tick(cluster, t0 + timedelta(minutes=11))
    assert state(job) == Job.State.FAILED
    return job


def test_simulated_log_follows_the_run_and_ends_with_the_exit_code(failed):
    job = Job.objects.get(pk=failed.pk)
    [log] = backend_for(job.cluster).job_logs(job=job, tail_lines=100)
    node = Allocation.objects.filter(job=job).select_related("device__node").first().device.node.name
    indexes = sorted(Allocation.objects.filter(job=job).values_list("device__index", flat=True))
    text = "\n".join(log.lines)
    assert f"Container main started on {node} (GPU {indexes[0]}, {indexes[1]})" in log.lines[0]
    assert "$ python train.py --epochs 3" in log.lines[1]
    assert "progress 50% (300 of 600 s)" in text
    assert "progress 100% (600 of 600 s)" in text
    assert "RuntimeError: simulated failure" in text
    assert log.lines[-1].endswith("Container main terminated: exit code 1 (Error)")
    # The exit is stamped at the simulated end: started + 600 s.
    assert log.lines[-1].startswith((job.started_at + timedelta(seconds=600)).strftime("%Y-%m-%dT%H:%M:%S"))
    # Deterministic: asking again gives the same lines; the tail keeps the last ones.
    again = backend_for(job.cluster).job_logs(job=job, tail_lines=100)[0]
    assert again.lines == log.lines
    assert backend_for(job.cluster).job_logs(job=job, tail_lines=3)[0].lines == log.lines[-3:]


def test_simulated_log_of_a_running_job_grows_with_the_clock(sim):  # noqa: F811
    cluster, member, rc, _ = sim
    t0 = timezone.now() - timedelta(minutes=30)
    job = submit(member, rc, "long", devices=1, at=t0, runtime=3600)
    tick(cluster, t0)
    tick(cluster, t0 + timedelta(seconds=1))
    job.refresh_from_db()
    backend = backend_for(cluster)
    early = backend.job_logs(job=job, tail_lines=100, now=job.started_at + timedelta(minutes=7))[0].lines
    later = backend.job_logs(job=job, tail_lines=100, now=job.started_at + timedelta(minutes=25))[0].lines
    assert early[-1].endswith("progress 10% (360 of 3600 s)")
    assert later[-1].endswith("progress 40% (1440 of 3600 s)")
    assert "exit code" not in "\n".join(later)


@pytest.mark.parametrize("checkpoint", [False, True])
def test_simulated_log_shows_the_eviction_and_the_checkpoint(sim, settings, checkpoint):  # noqa: F811
    from tests.factories import PriorityClassFactory

    settings.SIMULATED_CHECKPOINT_SECONDS = 30
    cluster, member, rc, _ = sim
    quota = member.team.quotas.get()
    quota.within_cluster_queue = "LowerPriority"
    quota.save()
    low, high = PriorityClassFactory(name="low", value=10), PriorityClassFactory(name="high", value=1000)
    t0 = timezone.now() - timedelta(hours=1)
    ckpt = {"checkpoint_path": "/ckpt", "checkpoint_signal": "SIGUSR1"} if checkpoint else {}
    victim = submit(member, rc, "victim", devices=8, at=t0, runtime=7200, priority_class=low, **ckpt)
    tick(cluster, t0)
    tick(cluster, t0 + timedelta(seconds=1))
    t1 = t0 + timedelta(minutes=30)
    submit(member, rc, "boss", devices=8, at=t1, priority_class=high)
    for s in (0, 5, 40):
        tick(cluster, t1 + timedelta(seconds=s))
    assert state(victim) == Job.State.PENDING
    text = "\n".join(backend_for(cluster).job_logs(job=victim, tail_lines=100)[0].lines)
    if checkpoint:
        assert "Received SIGUSR1: writing a checkpoint to /ckpt" in text
        assert "Checkpoint written to /ckpt" in text
    else:
        assert "checkpoint" not in text.lower()
    assert "Received SIGTERM: evicted" in text
    assert text.endswith("exit code 143")


def test_simulated_events_name_the_failure(failed):
    events = backend_for(failed.cluster).job_events(job=failed)
    reasons = [(e.type, e.reason) for e in events]
    assert ("Normal", "Admitted") in reasons
    assert reasons[-1] == ("Warning", "BackoffLimitExceeded")
    assert events == sorted(events, key=lambda e: e.at)


def test_a_never_started_job_has_no_log_lines(sim):  # noqa: F811
    cluster, member, rc, _ = sim
    job = submit(member, rc, "waits", devices=1, at=timezone.now())
    [log] = backend_for(cluster).job_logs(job=job, tail_lines=10)
    assert log.lines == []
    assert "No container has started" in log.note


def test_job_page_loads_the_run_lazily_and_the_poll_does_not(client, failed):
    client.force_login(failed.owner)
    page = client.get(reverse("queues:job_detail", args=[failed.pk])).content.decode()
    run_url = reverse("queues:job_run", args=[failed.pk])
    assert f'hx-get="{run_url}" hx-trigger="load"' in page
    poll = client.get(reverse("queues:job_detail", args=[failed.pk]), HTTP_HX_REQUEST="true").content.decode()
    assert run_url not in poll  # the 5-second poll never asks the cluster
    fragment = client.get(run_url, HTTP_HX_REQUEST="true").content.decode()
    assert "exit code 1 (Error)" in fragment
    assert "BackoffLimitExceeded" in fragment
    assert 'data-util="not-scraped"' in fragment


def test_another_teams_job_run_is_404(client, failed):
    from tests.factories import UserFactory

    client.force_login(UserFactory(username="stranger"))
    assert client.get(reverse("queues:job_run", args=[failed.pk])).status_code == 404


def test_unreachable_cluster_gives_a_clear_message(client, failed, monkeypatch):
    def refuse(self, **kwargs):
        raise ports.ClusterUnreachable("cluster sim: GET log: ConnectTimeoutError")

    port = type(ports.cluster_port())
    monkeypatch.setattr(port, "job_logs", refuse)
    monkeypatch.setattr(port, "job_events", refuse)
    client.force_login(failed.owner)
    response = client.get(reverse("queues:job_run", args=[failed.pk]), HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert response.status_code == 200
    assert 'data-run="logs-error"' in html
    assert 'data-run="events-error"' in html
    assert "The cluster could not be reached" in html
    assert "ConnectTimeoutError" in html


def test_dcgm_utilisation_of_the_jobs_gpus_from_the_scrape(client, failed):
    allocations = list(Allocation.objects.filter(job=failed).select_related("device__node"))
    during = failed.started_at + timedelta(minutes=5)
    after = failed.finished_at + timedelta(minutes=5)
    cards = [a.device for a in allocations]
    health_ingest_scrape(
        text=exposition([gpu(cards[0], DCGM_FI_DEV_GPU_UTIL=90), gpu(cards[1], DCGM_FI_DEV_GPU_UTIL=30)]), now=during
    )
    # After the job ended the cards are idle: that scrape is not the job's.
    health_ingest_scrape(text=exposition([gpu(c, DCGM_FI_DEV_GPU_UTIL=0) for c in cards]), now=after)
    assert GpuUtilSample.objects.count() == 4
    util = job_utilisation(failed, now=timezone.now())
    assert util.average == pytest.approx(60)
    assert sorted(c.util.average for c in util.cards) == [30, 90]
    client.force_login(failed.owner)
    html = client.get(reverse("queues:job_run", args=[failed.pk]), HTTP_HX_REQUEST="true").content.decode()
    assert 'data-util="average"' in html
    assert "<strong>60 %</strong>" in html


def test_utilisation_samples_are_pruned_past_the_retention(failed, settings):
    settings.GPU_UTIL_RETENTION_DAYS = 1
    card = Allocation.objects.filter(job=failed).first().device
    old = timezone.now() - timedelta(days=3)
    health_ingest_scrape(text=exposition([gpu(card, DCGM_FI_DEV_GPU_UTIL=50)]), now=old)
    health_ingest_scrape(text=exposition([gpu(card, DCGM_FI_DEV_GPU_UTIL=70)]), now=timezone.now())
    assert list(GpuUtilSample.objects.values_list("gpu_util", flat=True)) == [70]


def test_the_api_serves_the_log_tail_to_a_team_token(failed):
    """Issue 32: ``gpupool logs`` printed only browser links; the API now serves the same log tail as the page."""
    from rest_framework.test import APIClient

    from queues.api.tokens import api_token_create

    key = api_token_create(user=failed.owner, team=failed.team, name="cli").key
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    data = api.get(f"/api/jobs/{failed.pk}/logs/", {"tail": "3"}).json()
    page = ports.cluster_port().job_logs(job_id=failed.pk, tail_lines=3)
    assert (data["job"], data["state"], data["tail_lines"]) == (failed.pk, "failed", 3)
    assert [p["pod"] for p in data["pods"]] == [p.pod for p in page]
    assert [p["lines"] for p in data["pods"]] == [p.lines for p in page]
    assert all(len(p["lines"]) <= 3 for p in data["pods"])
    bad = api.get(f"/api/jobs/{failed.pk}/logs/", {"tail": "0"})
    assert bad.status_code == 400
    assert bad.json() == {"tail": ["a whole number of lines from 1 to 1000"]}


def test_the_api_answers_503_when_the_cluster_cannot_be_reached(failed, monkeypatch):
    from rest_framework.test import APIClient

    def refuse(self, **kwargs):
        raise ports.ClusterUnreachable("cluster sim: GET log: ConnectTimeoutError")

    monkeypatch.setattr(type(ports.cluster_port()), "job_logs", refuse)
    api = APIClient()
    api.force_authenticate(failed.owner)
    response = api.get(f"/api/jobs/{failed.pk}/logs/")
    assert response.status_code == 503
    assert "ConnectTimeoutError" in response.json()["detail"]
