"""A job's log and events in kube mode: the backend reads them over HTTP from the API emulator (pods/log with
tailLines, events by involvedObject.name), and a cluster that does not answer in time is ClusterUnreachable."""

from __future__ import annotations

import pytest
from django.urls import reverse

from clusters.backends import backend_for
from clusters.errors import ClusterUnavailable
from queues import ports
from tests.kube.cluster import at, ts, workload_name

pytestmark = pytest.mark.django_db
NS = "team-vision"


@pytest.fixture
def failed(world, kube, emulator):
    """A 1-pod job whose pod ran on gpu-a1 and exited 1, with the log it wrote and two events."""
    job = world.submit("train", gpus=8)
    kube.create_workload(job.k8s_name, NS)
    kube.admit(job.k8s_name, NS, cluster_queue="vision", flavor="h100", nodes=["gpu-a1"], gpus_per_pod=8, when=at(1))
    kube.pod(job.k8s_name, NS, 0, node="gpu-a1", phase="Failed", when=at(2), finished=at(9), exit_code=1)
    [pod] = kube.pods_of(job.k8s_name, NS)
    lines = [(ts(at(2)), "epoch 1/3 loss=2.31")] + [(ts(at(2 + i)), f"step {i}") for i in range(1, 60)]
    lines.append((ts(at(9)), "CUDA error: an illegal memory access was encountered"))
    emulator.set_pod_log(NS, pod["metadata"]["name"], lines)
    for uid, name, kind, reason, etype, minute in (
        ("e1", job.k8s_name, "Job", "BackoffLimitExceeded", "Warning", 9),
        ("e2", pod["metadata"]["name"], "Pod", "Started", "Normal", 2),
        ("e3", "someone-else", "Job", "Completed", "Normal", 3),
    ):
        emulator.put(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": uid, "namespace": NS, "uid": uid},
                "involvedObject": {"kind": kind, "name": name, "namespace": NS},
                "reason": reason,
                "message": f"{reason} message",
                "type": etype,
                "count": 1,
                "lastTimestamp": ts(at(minute)),
            }
        )
    world.sync()
    job = world.job(job)
    job.pod_name = pod["metadata"]["name"]
    return job


def test_logs_are_the_tail_of_each_pod_over_http(failed, cluster, emulator):
    emulator.requests.clear()
    [log] = backend_for(cluster).job_logs(job=failed, tail_lines=10)
    assert log.pod == failed.pod_name
    assert log.node == "gpu-a1"
    assert len(log.lines) == 10
    assert log.lines[-1] == f"{ts(at(9))} CUDA error: an illegal memory access was encountered"
    assert log.lines[0].endswith("step 51")  # 61 lines written, the last 10 read
    [listing] = [r for r in emulator.requests if r["path"] == f"/api/v1/namespaces/{NS}/pods"]
    assert listing["query"]["labelSelector"] == f"gpu-pool-portal.io/job-id={failed.pk}"
    [read] = [r for r in emulator.requests if r["path"].endswith("/log")]
    assert read["query"] == {"container": "main", "tailLines": "10", "timestamps": "True"}  # the client's spelling


def test_events_of_the_job_its_workload_and_pods_oldest_first(failed, cluster, emulator):
    events = backend_for(cluster).job_events(job=failed)
    assert [(e.reason, e.type, e.involved) for e in events] == [
        ("Started", "Normal", f"Pod/{failed.pod_name}"),
        ("BackoffLimitExceeded", "Warning", f"Job/{failed.k8s_name}"),
    ]
    selectors = {r["query"].get("fieldSelector") for r in emulator.requests if r["path"].endswith("/events")}
    assert f"involvedObject.name={failed.k8s_name}" in selectors
    assert f"involvedObject.name={workload_name(failed.k8s_name, failed.k8s_uid)}" in selectors
    assert f"involvedObject.name={failed.pod_name}" in selectors


def test_a_container_that_never_started_says_why(world, kube, cluster, emulator):
    job = world.submit("stuck", gpus=8)
    kube.create_workload(job.k8s_name, NS)
    kube.admit(job.k8s_name, NS, cluster_queue="vision", flavor="h100", nodes=["gpu-a1"], gpus_per_pod=8, when=at(1))
    [log] = backend_for(cluster).job_logs(job=world.job(job), tail_lines=10)
    assert log.lines == []
    assert "is waiting to start" in log.note


def test_a_cluster_that_does_not_answer_in_time_is_unreachable(failed, cluster, emulator, settings):
    settings.KUBE_RUN_READ_TIMEOUT = 0.3
    emulator.fail("GET", r"/log", delay=2.0)
    with pytest.raises(ClusterUnavailable):
        backend_for(cluster).job_logs(job=failed, tail_lines=10)
    # One attempt only: a person is waiting.
    assert len([r for r in emulator.requests if r["path"].endswith("/log")]) == 1


def test_the_job_page_fragment_shows_the_log_and_the_cluster_error(failed, client, emulator, settings):
    client.force_login(failed.owner)
    url = reverse("queues:job_run", args=[failed.pk])
    html = client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert "CUDA error: an illegal memory access was encountered" in html
    assert "BackoffLimitExceeded" in html
    settings.KUBE_RUN_READ_TIMEOUT = 0.3
    emulator.fail("GET", r"/api/v1/", delay=2.0, times=100)  # the API server stops answering in time
    with pytest.raises(ports.ClusterUnreachable, match="cluster gpu-east"):
        ports.cluster_port().job_logs(job_id=failed.pk, tail_lines=5)
    html = client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert 'data-run="logs-error"' in html
    assert 'data-run="events-error"' in html
