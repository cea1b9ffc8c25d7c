"""KUEUE_CONFIG_WRITE: the push adds to Kueue's manager Configuration the integrations and DeviceClass mappings the
classes offered on a cluster need, then restarts Kueue's controller; over HTTP against the API emulator, which
validates the ConfigMap and Deployment it is sent (kubernetes-validate) and enforces the resourceVersion sent."""

from __future__ import annotations

from datetime import UTC

import pytest
import yaml
from django.urls import reverse

from clusters.kube_sync.access import request_object, request_verb, role_rules
from clusters.kube_sync.config import kube_config_push
from tests.kube.cluster import at, gpu_node, kueue_config_map
from tests.kube.schemas import validate
from tests.kube.test_dra_submit import h100_slice

pytestmark = pytest.mark.django_db

CONFIG_MAP_PATH = "/api/v1/namespaces/kueue-system/configmaps/kueue-manager-config"
DEPLOYMENT_PATH = "/apis/apps/v1/namespaces/kueue-system/deployments/kueue-controller-manager"
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
CHANGELIST = "admin:clusters_kubeconfigobject_changelist"
BATCH_ONLY = """\
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
health:
  healthProbeBindAddress: :8081
manageJobsWithoutQueueName: false
integrations:
  frameworks:
  - batch/job
  podOptions:
    namespaceSelector:
      matchExpressions:
      - key: kubernetes.io/metadata.name
        operator: NotIn
        values: [kube-system, kueue-system]
"""


def kueue_controller() -> dict:
    """Kueue's controller Deployment as its release manifest installs it (trimmed), validated."""
    labels = {"control-plane": "controller-manager"}
    obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "kueue-controller-manager", "namespace": "kueue-system", "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": {"kubectl.kubernetes.io/default-container": "manager"}},
                "spec": {
                    "containers": [
                        {
                            "name": "manager",
                            "image": "registry.k8s.io/kueue/kueue:v0.15.0",
                            "args": ["--config=/controller_manager_config.yaml", "--zap-log-level=2"],
                        }
                    ]
                },
            },
        },
    }
    assert validate(obj) == []
    return obj


@pytest.fixture
def kueue(emulator, settings):
    settings.KUEUE_CONFIG_WRITE = True
    emulator.put(kueue_controller())
    emulator.put(kueue_config_map(BATCH_ONLY))
    return emulator


def _configuration(emulator) -> dict:
    return yaml.safe_load(
        emulator.get_obj("ConfigMap", "kueue-manager-config", "kueue-system")["data"]["controller_manager_config.yaml"]
    )


def _restarted_at(emulator) -> str | None:
    template = emulator.get_obj("Deployment", "kueue-controller-manager", "kueue-system")["spec"]["template"]
    return (template["metadata"].get("annotations") or {}).get(RESTARTED_AT)


def _writes(emulator, path: str) -> list[dict]:
    return [r for r in emulator.requests if r["path"] == path and r["method"] != "GET"]


def test_kueue_config_write_adds_the_missing_integrations_and_restarts_kueue(portal, cluster, api, kueue):
    portal.rc.allowed_kinds = ["batch", "jobset", "inference-lws"]
    portal.rc.save()
    report = kube_config_push(cluster=cluster, api=api, now=at(0))
    config = _configuration(kueue)
    assert config["integrations"]["frameworks"] == [
        "batch/job",
        "jobset.x-k8s.io/jobset",
        "leaderworkerset.x-k8s.io/leaderworkerset",
        "pod",
    ]
    # everything else in the Configuration is kept as it was
    before = yaml.safe_load(BATCH_ONLY)
    assert config["integrations"]["podOptions"] == before["integrations"]["podOptions"]
    assert {k: v for k, v in config.items() if k != "integrations"} == {
        k: v for k, v in before.items() if k != "integrations"
    }
    assert _restarted_at(kueue) == at(0).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert report.kueue_config.added == (
        "integrations.frameworks jobset.x-k8s.io/jobset, leaderworkerset.x-k8s.io/leaderworkerset, pod"
    )
    assert kueue.rejected == []
    cluster.refresh_from_db()
    assert (cluster.kueue_config_state, cluster.kueue_config_problem) == ("matches", "")


def test_kueue_config_write_nothing_when_nothing_is_missing(portal, cluster, api, kueue):
    portal.rc.allowed_kinds = ["batch", "jobset"]
    portal.rc.save()
    kube_config_push(cluster=cluster, api=api, now=at(0))
    assert len(_writes(kueue, CONFIG_MAP_PATH)) == len(_writes(kueue, DEPLOYMENT_PATH)) == 1
    report = kube_config_push(cluster=cluster, api=api, now=at(5))  # a second push changes nothing
    assert len(_writes(kueue, CONFIG_MAP_PATH)) == len(_writes(kueue, DEPLOYMENT_PATH)) == 1
    assert (report.kueue_config.state, report.kueue_config.added) == ("matches", "")
    assert _restarted_at(kueue) == at(0).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_kueue_config_write_complete_configuration_is_not_touched(portal, cluster, api, kueue):
    before = kueue.get_obj("ConfigMap", "kueue-manager-config", "kueue-system")
    kube_config_push(cluster=cluster, api=api, now=at(0))  # the class allows batch Jobs only: Kueue's default
    assert _writes(kueue, CONFIG_MAP_PATH) == _writes(kueue, DEPLOYMENT_PATH) == []
    assert kueue.get_obj("ConfigMap", "kueue-manager-config", "kueue-system") == before
    assert _restarted_at(kueue) is None


def test_kueue_config_write_a_concurrent_change_is_read_again(portal, cluster, api, kueue):
    portal.rc.allowed_kinds = ["batch", "rayjob"]
    portal.rc.save()

    def someone_else_edits() -> None:
        text = BATCH_ONLY.replace("manageJobsWithoutQueueName: false", "manageJobsWithoutQueueName: true")
        kueue.edit("ConfigMap", "kueue-manager-config", "kueue-system", data={"controller_manager_config.yaml": text})

    fault = kueue.fail("PATCH", CONFIG_MAP_PATH, before=someone_else_edits)
    kube_config_push(cluster=cluster, api=api, now=at(0))
    assert fault.hits == 1
    patches = _writes(kueue, CONFIG_MAP_PATH)
    assert len(patches) == 2  # the first answered 409 (stale resourceVersion), the second after reading again
    config = _configuration(kueue)
    assert config["manageJobsWithoutQueueName"] is True  # the other client's change is kept
    assert config["integrations"]["frameworks"] == ["batch/job", "ray.io/rayjob"]
    assert _restarted_at(kueue) is not None


def test_kueue_config_write_adds_the_device_class_mapping_of_a_dra_class(portal, world, cluster, api, kueue):
    """The portal's nodes publish their GPUs only as ResourceSlices: its claims must count against the quota."""
    for name in ("gpu-a1", "gpu-a2"):
        kueue.put(gpu_node(name, gpus=0))
        kueue.put(h100_slice(name))
    world.sync()
    report = kube_config_push(cluster=cluster, api=api, now=at(0))
    assert _configuration(kueue)["resources"] == {
        "deviceClassMappings": [{"name": "nvidia.com/gpu", "deviceClassNames": ["gpu.nvidia.com"]}]
    }
    assert "deviceClassMappings {name: nvidia.com/gpu, deviceClassNames: [gpu.nvidia.com]}" in (
        report.kueue_config.added
    )
    assert report.kueue_config.state == "matches"


def test_kueue_config_write_off_only_reads(portal, cluster, api, emulator, admin_client):
    portal.rc.allowed_kinds = ["batch", "pytorchjob"]
    portal.rc.save()
    emulator.put(kueue_controller())
    emulator.put(kueue_config_map(BATCH_ONLY))
    report = kube_config_push(cluster=cluster, api=api, now=at(0))
    assert report.kueue_config.state == "mismatch"
    assert _writes(emulator, CONFIG_MAP_PATH) == _writes(emulator, DEPLOYMENT_PATH) == []
    admin_client.post(reverse("admin:clusters_kubeconfigobject_check"))
    page = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert "kubeflow.org/pytorchjob (classes h100)" in page
    assert "KUEUE_CONFIG_WRITE=true" in page


def test_kueue_config_write_refused_is_reported(portal, cluster, api, kueue):
    portal.rc.allowed_kinds = ["batch", "rayjob"]
    portal.rc.save()
    kueue.fail("PATCH", CONFIG_MAP_PATH, status=403, message="configmaps is forbidden")
    report = kube_config_push(cluster=cluster, api=api, now=at(0))
    assert report.kueue_config.state == "mismatch"
    assert "ray.io/rayjob (classes h100)" in report.kueue_config.problem
    assert "gpu-portal-kueue-config-write" in report.kueue_config.problem
    assert _restarted_at(kueue) is None


def test_kueue_config_write_restart_failing_needs_attention(portal, cluster, api, kueue):
    portal.rc.allowed_kinds = ["batch", "rayjob"]
    portal.rc.save()
    kueue.remove("Deployment", "kueue-controller-manager", "kueue-system")
    report = kube_config_push(cluster=cluster, api=api, now=at(0))
    assert _configuration(kueue)["integrations"]["frameworks"] == ["batch/job", "ray.io/rayjob"]
    assert report.kueue_config.state == "mismatch"
    assert "restarting Deployment kueue-system/kueue-controller-manager failed" in report.kueue_config.problem
    cluster.refresh_from_db()
    assert cluster.kueue_config_needs_attention


def test_kueue_config_write_uses_only_the_write_roles_grants(portal, cluster, api, kueue):
    """Every request to Kueue's namespace is granted by the Roles (read, and write when opted in), by name."""
    portal.rc.allowed_kinds = ["batch", "rayjob"]
    portal.rc.save()
    kube_config_push(cluster=cluster, api=api, now=at(0))
    read, write = role_rules(), role_rules(kueue_config_write=True)
    used = set()
    for request in kueue.requests:
        namespace, name = request_object(request["path"])
        if namespace != "kueue-system":
            continue
        group, plural, verb = request_verb(request["method"], request["path"], request["query"])
        (key,) = [k for k in write if k[:3] == (namespace, group, plural) and name in k[3]]
        assert verb in write[key], (request["method"], request["path"])
        used.add((key, verb))
    assert used == {(k, v) for k, verbs in write.items() for v in verbs}  # every grant is used
    assert {(k, v) for k, verbs in read.items() for v in verbs} < used


def test_kueue_config_write_the_check_now_button_says_what_was_added(portal, cluster, kueue, admin_client):
    portal.rc.allowed_kinds = ["batch", "rayjob"]
    portal.rc.save()
    response = admin_client.post(reverse("admin:clusters_kubeconfigobject_check"), follow=True)
    assert "added to Kueue&#x27;s configuration: integrations.frameworks ray.io/rayjob" in response.content.decode()


def test_kueue_config_write_changed_under_every_try_waits_for_the_next_push(portal, cluster, api, kueue):
    portal.rc.allowed_kinds = ["batch", "rayjob"]
    portal.rc.save()
    edits = []

    def someone_else_edits() -> None:
        edits.append(1)
        kueue.edit("ConfigMap", "kueue-manager-config", "kueue-system", metadata={"labels": {"edit": str(len(edits))}})

    kueue.fail("PATCH", CONFIG_MAP_PATH, before=someone_else_edits, times=3)
    report = kube_config_push(cluster=cluster, api=api, now=at(0))
    assert len(_writes(kueue, CONFIG_MAP_PATH)) == 3
    assert report.kueue_config.state == "mismatch"
    assert "changed under every one of 3 writes" in report.kueue_config.problem
    assert _configuration(kueue)["integrations"]["frameworks"] == ["batch/job"]
    assert _restarted_at(kueue) is None
    report = kube_config_push(cluster=cluster, api=api, now=at(5))
    assert (report.kueue_config.state, report.kueue_config.added) == (
        "matches",
        "integrations.frameworks ray.io/rayjob",
    )
