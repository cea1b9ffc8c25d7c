"""deploy/: the kustomize base renders, validates against Kubernetes' schemas, and grants exactly the RBAC the code uses.

The RBAC check is two-sided and per process (web, worker, watch: one service account each): what the rendered
bindings give each account equals that process's part of the table in :mod:`clusters.kube_sync.access` (cluster-wide,
in each team namespace of deploy/team-namespace, in Kueue's namespace by name, and the opt-in components), and each
process's code, run against the API emulator over HTTP, makes no request its account is not granted — and uses every
verb it is granted (least privilege).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from django.core.management import get_commands

from clusters.backends.k8s.health import health_directives_sync
from clusters.kube_sync.access import (
    KUEUE_CONFIG_WRITE_ACCESS,
    NODE_HEALTH_ACCESS,
    PORTAL_ACCESS,
    PROCESSES,
    WATCH,
    WEB,
    WORKER,
    rbac_rules,
    request_object,
    request_verb,
)
from clusters.kube_sync.api import DEVICE_TAINT_RULES
from clusters.kube_sync.config import kube_config_adopt, kube_config_push, kube_config_reapply
from clusters.kube_sync.job_run import kube_job_events, kube_job_logs
from clusters.kube_sync.jobs import kube_job_create, kube_job_delete
from clusters.kube_sync.loops import WATCHED_KINDS, kube_evaluate_loop, kube_watch_loop
from clusters.kube_sync.protection import kube_protection_sync
from clusters.kube_sync.sync import kube_sync_run
from clusters.models import KubeConfigObject
from kernel.errors import DomainError
from pools.health import tickets
from pools.health.services import Actor, device_health_set
from pools.models import Device, HealthState, ResourceClass, Topology
from pools.workload_kinds import WorkloadKind
from queues.models import Cohort, Job, PriorityClass, TeamQuota
from queues.services import JobSpec, job_submit
from tests.deploy.rbac import expected, granted
from tests.deploy_check import deploy_check
from tests.kube.cluster import at, kueue_config_map
from tests.kube.kinds_cluster import submit_kind_job

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "deploy" / "base"
KUEUE_CONFIG_WRITE = REPO / "deploy" / "kueue-config-write"
NODE_HEALTH = REPO / "deploy" / "node-health"
TEAM_NAMESPACE = REPO / "deploy" / "team-namespace"
EXAMPLE_SITE = REPO / "deploy" / "example-site"
#: The service account of each process kind in the base (beat and migrations: "gpu-portal", which has no grant).
ACCOUNTS = {WEB: "gpu-portal-web", WORKER: "gpu-portal-worker", WATCH: "gpu-portal-watch"}
K8S_VERSION = "1.34"
PORTAL_IMAGE = "registry.example.com/gpu-pool-portal"


CLUSTER_SCOPED = ("Namespace", "ClusterRole", "ClusterRoleBinding")


def _kustomization() -> dict:
    return yaml.safe_load((BASE / "kustomization.yaml").read_text())


def _namespace_transformer(kz: dict) -> dict:
    """The inline NamespaceTransformer (``unsetOnly``: objects that name their namespace keep it)."""
    (transformer,) = [t for t in map(yaml.safe_load, kz["transformers"]) if t["kind"] == "NamespaceTransformer"]
    return transformer


def render_base() -> list[dict]:
    """The base as kustomize renders it: resources in order, namespace, labels and image overrides applied."""
    kz = _kustomization()
    namespace = _namespace_transformer(kz)
    assert namespace["unsetOnly"] is True
    images = {i["name"]: f"{i.get('newName', i['name'])}:{i['newTag']}" for i in kz.get("images", [])}
    extra_labels: dict[str, str] = {}
    for entry in kz.get("labels", []):
        extra_labels.update(entry["pairs"])
    out = []
    for name in kz["resources"]:
        for doc in yaml.safe_load_all((BASE / name).read_text()):
            if doc is None:
                continue
            meta = doc.setdefault("metadata", {})
            if doc["kind"] not in CLUSTER_SCOPED:
                meta.setdefault("namespace", namespace["metadata"]["namespace"])
            meta.setdefault("labels", {}).update(extra_labels)
            for container in _containers(doc):
                container["image"] = images.get(container["image"], container["image"])
            out.append(doc)
    return out


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def render_team_namespace(namespace: str) -> list[dict]:
    """deploy/team-namespace as an overlay with ``namespace: <namespace>`` renders it (its objects have none)."""
    kz = yaml.safe_load((TEAM_NAMESPACE / "kustomization.yaml").read_text())
    out = []
    for name in kz["resources"]:
        for doc in _docs(TEAM_NAMESPACE / name):
            assert "namespace" not in doc["metadata"], "the overlay sets it"
            doc["metadata"]["namespace"] = namespace
            out.append(doc)
    return out


def render_component(path: Path, base: list[dict]) -> list[dict]:
    """A component over ``base``: its resources added, its ConfigMap patches merged into the base's ConfigMap."""
    kz = yaml.safe_load((path / "kustomization.yaml").read_text())
    assert kz["kind"] == "Component"
    out = yaml.safe_load(yaml.safe_dump(base))
    for patch in (yaml.safe_load(p["patch"]) for p in kz.get("patches", [])):
        target = next(
            d for d in out if (d["kind"], d["metadata"]["name"]) == (patch["kind"], patch["metadata"]["name"])
        )
        target["data"].update(patch["data"])
    for name in kz["resources"]:
        out += _docs(path / name)
    return out


def render_example_site() -> list[dict]:
    """deploy/example-site: the base, team-namespace in team-vision and team-speech, the node-health component."""
    kz = yaml.safe_load((EXAMPLE_SITE / "kustomization.yaml").read_text())
    out = render_base()
    for entry in kz["resources"][1:]:
        team = yaml.safe_load((EXAMPLE_SITE / entry / "kustomization.yaml").read_text())
        assert (EXAMPLE_SITE / entry / team["resources"][0]).resolve() == TEAM_NAMESPACE
        out += render_team_namespace(team["namespace"])
    for component in kz["components"]:
        out = render_component((EXAMPLE_SITE / component).resolve(), out)
    return out


def _pod_spec(doc: dict) -> dict | None:
    if doc["kind"] == "Deployment":
        return doc["spec"]["template"]["spec"]
    if doc["kind"] == "Job":
        return doc["spec"]["template"]["spec"]
    return None


def _containers(doc: dict) -> list[dict]:
    spec = _pod_spec(doc)
    if spec is None:
        return []
    return [*spec.get("initContainers", []), *spec["containers"]]


@pytest.fixture(scope="module")
def rendered() -> list[dict]:
    return render_base()


def _by(rendered, kind: str, name: str) -> dict:
    return next(d for d in rendered if d["kind"] == kind and d["metadata"]["name"] == name)


# --- the kustomization -------------------------------------------------------------------------------------------


def test_deploy_kustomization_lists_every_file_and_every_file_exists():
    listed = _kustomization()["resources"]
    assert all((BASE / name).is_file() for name in listed), [n for n in listed if not (BASE / n).is_file()]
    present = sorted(p.name for p in BASE.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(listed) == present  # nothing left out of the build


def test_deploy_every_manifest_validates_against_the_kubernetes_schema(rendered):
    kinds = sorted({d["kind"] for d in rendered})
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "Job",
        "Namespace",
        "PodDisruptionBudget",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
    ]
    for doc in rendered:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_deploy_validation_is_strict_enough_to_fail(rendered):
    web = _by(rendered, "Deployment", "gpu-portal-web")
    broken = yaml.safe_load(yaml.safe_dump(web))
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}  # a typo
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with its built-in kustomize) is not installed")
def test_deploy_kubectl_kustomize_renders_the_same_objects(rendered):
    proc = subprocess.run(["kubectl", "kustomize", str(BASE)], capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
    assert sorted(map(key, docs)) == sorted(map(key, rendered))
    for doc in docs:
        mine = next(d for d in rendered if key(d) == key(doc))
        assert doc.get("spec") == mine.get("spec"), key(doc)
        assert doc.get("rules") == mine.get("rules"), key(doc)
        assert doc["metadata"].get("namespace") == mine["metadata"].get("namespace"), key(doc)


# --- what runs ------------------------------------------------------------------------------------------------------


def test_deploy_runs_web_worker_beat_watch_and_migrations(rendered):
    commands = {
        d["metadata"]["name"]: _pod_spec(d)["containers"][0]["command"]
        for d in rendered
        if d["kind"] in ("Deployment", "Job")
    }
    assert commands["gpu-portal-web"][:2] == ["gunicorn", "portal.wsgi:application"]
    assert commands["gpu-portal-worker"][:4] == ["celery", "-A", "portal", "worker"]
    assert commands["gpu-portal-beat"][:4] == ["celery", "-A", "portal", "beat"]
    assert commands["gpu-portal-watch"] == ["python", "manage.py", "kube_watch"]
    assert commands["gpu-portal-migrate"] == ["python", "manage.py", "migrate", "--noinput"]
    beat, watch = _by(rendered, "Deployment", "gpu-portal-beat"), _by(rendered, "Deployment", "gpu-portal-watch")
    for single in (beat, watch):  # never two at once
        assert single["spec"]["replicas"] == 1
        assert single["spec"]["strategy"]["type"] == "Recreate"


def _manage_commands(rendered) -> set[str]:
    out = set()
    for doc in rendered:
        for c in _containers(doc):
            text = " ".join(c.get("command", []))
            out |= set(re.findall(r"manage\.py (\w+)", text))
    return out


@pytest.mark.parametrize("command", ["collectstatic", "migrate", "kube_watch"])
def test_deploy_management_commands_exist(rendered, command):
    assert command in _manage_commands(rendered)
    assert command in get_commands()


def test_deploy_gunicorn_and_celery_entry_points_load():
    """The web and worker commands' targets import (gunicorn's own config check, Celery's app)."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings"}
    gunicorn = Path(sys.executable).with_name("gunicorn")
    proc = subprocess.run(
        [str(gunicorn), "--check-config", "portal.wsgi:application"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    from portal.celery import app

    assert app.main == "portal"


def test_deploy_production_settings_accept_the_configmap(rendered, tmp_path):
    """The ConfigMap plus the four documented secrets make a production configuration Django accepts."""
    config = _by(rendered, "ConfigMap", "gpu-portal-config")["data"]
    values = {
        "SECRET_KEY": secrets.token_urlsafe(50),
        "DATABASE_URL": "postgres://portal:pw@db.example.com:5432/portal",
        "CELERY_BROKER_URL": "redis://redis.example.com:6379/0",
        "METRICS_TOKEN": secrets.token_urlsafe(32),  # production refuses /metrics without it (issue 33)
    }
    proc = deploy_check(config, values, static_root=tmp_path / "static")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    docs = (REPO / "docs" / "kubernetes.md").read_text()
    for name in values:
        assert name in docs  # the operator is told to create it
    secret_refs = {
        ref["secretRef"]["name"]
        for d in rendered
        for c in _containers(d)
        for ref in c.get("envFrom", [])
        if "secretRef" in ref
    }
    assert secret_refs == {"gpu-portal-secrets"}
    assert "gpu-portal-secrets" in docs


def test_deploy_every_container_has_requests_limits_and_a_restricted_context(rendered):
    for doc in rendered:
        spec = _pod_spec(doc)
        if spec is None:
            continue
        assert spec["securityContext"]["runAsNonRoot"] is True
        for c in _containers(doc):
            where = f"{doc['metadata']['name']}/{c['name']}"
            assert {"cpu", "memory"} <= set(c["resources"]["requests"]), where
            assert "memory" in c["resources"]["limits"], where
            assert c["securityContext"]["allowPrivilegeEscalation"] is False, where
            assert c["securityContext"]["readOnlyRootFilesystem"] is True, where
            assert c["securityContext"]["capabilities"]["drop"] == ["ALL"], where
            if c["image"].startswith(PORTAL_IMAGE):
                assert c["image"] == f"{PORTAL_IMAGE}:0.1.0"


def test_deploy_probes(rendered):
    web = _pod_spec(_by(rendered, "Deployment", "gpu-portal-web"))
    gunicorn = web["containers"][0]
    assert gunicorn["readinessProbe"]["httpGet"]["path"] == "/healthz"
    headers = {h["name"]: h["value"] for h in gunicorn["readinessProbe"]["httpGet"]["httpHeaders"]}
    config = _by(rendered, "ConfigMap", "gpu-portal-config")["data"]
    assert headers["Host"] in config["ALLOWED_HOSTS"].split(",")  # else Django answers 400
    assert headers["X-Forwarded-Proto"] == "https"  # else the TLS redirect answers 301
    assert "livenessProbe" in gunicorn
    worker = _pod_spec(_by(rendered, "Deployment", "gpu-portal-worker"))["containers"][0]
    assert "inspect ping" in " ".join(worker["livenessProbe"]["exec"]["command"])
    service = _by(rendered, "Service", "gpu-portal-web")
    assert service["spec"]["ports"][0]["targetPort"] in {p["name"] for p in web["containers"][1]["ports"]}


def test_deploy_healthz_answers_the_probe_as_configured(client, settings, db):
    settings.ALLOWED_HOSTS = ["gpus.example.com", "localhost"]
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    response = client.get("/healthz", headers={"Host": "localhost", "X-Forwarded-Proto": "https"})
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_deploy_only_pods_that_call_the_cluster_mount_the_token_each_its_own(rendered):
    """web, worker and watch mount the token of their own account; beat and the migrations mount none."""
    pods = {d["metadata"]["name"]: _pod_spec(d) for d in rendered if _pod_spec(d) is not None}
    assert {
        name: (spec["serviceAccountName"], spec["automountServiceAccountToken"]) for name, spec in pods.items()
    } == {
        "gpu-portal-web": ("gpu-portal-web", True),
        "gpu-portal-worker": ("gpu-portal-worker", True),
        "gpu-portal-watch": ("gpu-portal-watch", True),
        "gpu-portal-beat": ("gpu-portal", False),
        "gpu-portal-migrate": ("gpu-portal", False),
    }
    accounts = {d["metadata"]["name"]: d for d in rendered if d["kind"] == "ServiceAccount"}
    assert set(accounts) == {"gpu-portal", *ACCOUNTS.values()}
    assert all(a["automountServiceAccountToken"] is False for a in accounts.values())


def test_deploy_dockerfile_copies_every_local_app():
    from django.conf import settings

    dockerfile = (REPO / "deploy" / "Dockerfile").read_text()
    local = {a.split(".")[0] for a in settings.INSTALLED_APPS if (REPO / a.split(".")[0]).is_dir()}
    for app in sorted(local | {"templates", "static"}):
        assert f"COPY {app} {app}" in dockerfile, app


# --- RBAC ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("process", PROCESSES)
def test_deploy_each_process_is_granted_exactly_its_part_of_the_access_table(rendered, process):
    """In the base (no team namespace yet): the worker's and the watch's cluster-wide grants, the worker's Role in
    kueue-system, and nothing at all for the web."""
    assert granted(rendered, ACCOUNTS[process], "gpu-portal") == expected(process)
    assert granted(rendered, "gpu-portal", "gpu-portal") == {}  # beat and migrations: no grant
    assert "*" not in {v for verbs in rbac_rules(process).values() for v in verbs}


def test_deploy_no_cluster_wide_write_to_namespaces_nodes_or_workloads(rendered):
    """The audit's finding: a ClusterRole that could create pods, jobs and deployments anywhere, create or patch
    namespaces (lifting their Pod Security labels) and patch nodes. Cluster-wide, only Kueue's own cluster-scoped
    configuration is written; everything else there is read."""
    writes = {"create", "patch", "update", "delete", "deletecollection"}
    kueue_config = {"clusterqueues", "cohorts", "resourceflavors", "workloadpriorityclasses", "topologies"}
    for process in PROCESSES:
        for (scope, group, plural, _names), verbs in granted(rendered, ACCOUNTS[process], "gpu-portal").items():
            kueue_own = group == "kueue.x-k8s.io" and plural in kueue_config
            if scope == "" and not kueue_own:
                assert not verbs & writes, (process, plural, verbs)
    assert granted(rendered, ACCOUNTS[WEB], "gpu-portal") == {}


def test_deploy_team_namespace_grants_the_web_reads_and_the_worker_jobs_there_only():
    docs = render_team_namespace("team-vision")
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    base = render_base()
    everything = [*base, *docs]
    for process in PROCESSES:
        assert granted(everything, ACCOUNTS[process], "gpu-portal") == expected(process, teams=("team-vision",))
    web = granted(everything, ACCOUNTS[WEB], "gpu-portal")
    assert all(verbs <= {"get", "list"} for verbs in web.values())  # reads only
    assert all(scope == "team-vision" for scope, *_ in web)  # nothing cluster-wide, nothing elsewhere


def test_deploy_example_site_renders_validates_and_grants_the_table_with_the_opt_ins():
    docs = render_example_site()
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    teams = ("team-vision", "team-speech")
    for process in PROCESSES:
        assert granted(docs, ACCOUNTS[process], "gpu-portal") == expected(process, teams=teams, node_health=True)
    config = _by(docs, "ConfigMap", "gpu-portal-config")["data"]
    assert config["HEALTH_MANAGED_NODE_LABELS"] == "gpu-pool-portal.io/managed=true"
    node_health = _by(docs, "ClusterRole", "gpu-portal-node-health")["rules"]
    assert node_health == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["devicetaintrules"], "verbs": ["create", "delete"]},
    ]
    assert {(a.resource.plural, a.verbs) for a in NODE_HEALTH_ACCESS} == {
        ("nodes", ("patch",)),
        ("devicetaintrules", ("create", "delete")),
    }


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with its built-in kustomize) is not installed")
def test_deploy_kubectl_kustomize_renders_the_example_site_the_same():
    proc = subprocess.run(
        ["kubectl", "kustomize", str(EXAMPLE_SITE)], capture_output=True, text=True, check=False, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    mine = render_example_site()
    key = lambda d: (d["kind"], d["metadata"]["name"], d["metadata"].get("namespace", ""))  # noqa: E731
    assert sorted(map(key, docs)) == sorted(map(key, mine))
    for process in PROCESSES:
        assert granted(docs, ACCOUNTS[process], "gpu-portal") == granted(mine, ACCOUNTS[process], "gpu-portal")
    assert _by(docs, "ConfigMap", "gpu-portal-config")["data"] == _by(mine, "ConfigMap", "gpu-portal-config")["data"]


def _write_component() -> list[dict]:
    return [d for d in yaml.safe_load_all((KUEUE_CONFIG_WRITE / "rbac.yaml").read_text()) if d]


def test_deploy_kueue_config_write_component_grants_exactly_the_write_access(rendered):
    """Opt-in (KUEUE_CONFIG_WRITE): patch on Kueue's ConfigMap and controller Deployment, by name, to the worker."""
    component = _write_component()
    for doc in component:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    assert granted([*rendered, *component], ACCOUNTS[WORKER], "gpu-portal") == expected(WORKER, kueue_config_write=True)
    assert granted(component, ACCOUNTS[WORKER], "gpu-portal") == {
        ("kueue-system", "", "configmaps", ("kueue-manager-config",)): {"patch"},
        ("kueue-system", "apps", "deployments", ("kueue-controller-manager",)): {"patch"},
    }
    kz = yaml.safe_load((KUEUE_CONFIG_WRITE / "kustomization.yaml").read_text())
    assert (kz["kind"], kz["resources"]) == ("Component", ["rbac.yaml"])
    (patch,) = [yaml.safe_load(p["patch"]) for p in kz["patches"]]
    assert patch["metadata"]["name"] == _by(rendered, "ConfigMap", "gpu-portal-config")["metadata"]["name"]
    assert patch["data"] == {"KUEUE_CONFIG_WRITE": "true"}


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with its built-in kustomize) is not installed")
def test_deploy_kubectl_kustomize_renders_the_base_with_the_write_component(tmp_path, rendered):
    overlay = {
        "resources": [os.path.relpath(BASE, tmp_path)],
        "components": [os.path.relpath(KUEUE_CONFIG_WRITE, tmp_path)],
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    proc = subprocess.run(
        ["kubectl", "kustomize", str(tmp_path)], capture_output=True, text=True, check=False, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert granted(docs, ACCOUNTS[WORKER], "gpu-portal") == expected(WORKER, kueue_config_write=True)
    assert _by(docs, "ConfigMap", "gpu-portal-config")["data"]["KUEUE_CONFIG_WRITE"] == "true"
    assert len(docs) == len(rendered) + 2


def test_deploy_docs_print_the_access_table():
    docs = (REPO / "docs" / "kubernetes.md").read_text()
    for access in (*PORTAL_ACCESS, *NODE_HEALTH_ACCESS, *KUEUE_CONFIG_WRITE_ACCESS):
        group = access.group or "core"
        row = f"| {access.process} | `{access.resource.plural}` | {group} | {', '.join(sorted(access.verbs))} | {access.scope} |"
        assert row in docs, row


def test_request_verb_maps_api_requests_as_the_api_server_authorises_them():
    assert request_verb("GET", "/api/v1/nodes", {}) == ("", "nodes", "list")
    assert request_verb("GET", "/api/v1/nodes", {"watch": "true"}) == ("", "nodes", "watch")
    assert request_verb("GET", "/api/v1/nodes/n1", {}) == ("", "nodes", "get")
    assert request_verb("GET", "/api/v1/namespaces", {}) == ("", "namespaces", "list")
    assert request_verb("PATCH", "/api/v1/namespaces/team-a", {}) == ("", "namespaces", "patch")
    assert request_verb("POST", "/apis/batch/v1/namespaces/team-a/jobs", {}) == ("batch", "jobs", "create")
    assert request_verb("DELETE", "/apis/batch/v1/namespaces/team-a/jobs/j", {}) == ("batch", "jobs", "delete")
    assert request_verb("GET", "/apis/kueue.x-k8s.io/v1beta2/workloads", {}) == ("kueue.x-k8s.io", "workloads", "list")
    assert request_verb("GET", "/apis/batch/v1/namespaces/a/jobs/j/status", {}) == ("batch", "jobs/status", "get")
    assert request_verb("GET", "/apis", {}) is None
    assert request_verb("GET", "/apis/kueue.x-k8s.io/v1beta2", {}) is None
    assert request_verb("GET", "/version", {}) is None


def test_request_object_names_the_namespace_and_the_object():
    assert request_object("/api/v1/namespaces/kueue-system/configmaps/kueue-manager-config") == (
        "kueue-system",
        "kueue-manager-config",
    )
    assert request_object("/api/v1/namespaces/team-a") == ("", "team-a")
    assert request_object("/api/v1/configmaps") == ("", "")
    assert request_object("/apis/batch/v1/namespaces/a/jobs") == ("a", "")
    assert request_object("/apis/kueue.x-k8s.io/v1beta2/clusterqueues/vision") == ("", "vision")


SLICE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceSlice",
    "metadata": {"name": "gpu-a1-gpu.nvidia.com"},
    "spec": {
        "driver": "gpu.nvidia.com",
        "nodeName": "gpu-a1",
        "pool": {"name": "gpu-a1", "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": "gpu-0", "attributes": {"uuid": {"string": "GPU-0"}}}],
    },
}


@pytest.mark.django_db
def test_deploy_rbac_covers_every_request_the_portal_makes(
    portal, cluster, api, emulator, django_capture_on_commit_callbacks, settings
):
    """Run each process's code — the worker's push, drift actions, submit, cancel, sync and health directives; the web's
    job page reads; the watch process's loops — and check every request against what that process's account is
    granted (the team namespace team-vision listed, node health on), and that each grant is used."""
    requests_of: dict[str, list[dict]] = {WEB: [], WORKER: [], WATCH: []}

    def phase(process: str, start: int) -> None:
        requests_of[process] += emulator.requests[start:]

    # the team namespace exists before the portal pushes (the deployer creates it, with its Pod Security labels)
    emulator.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-vision"}})
    start = len(emulator.requests)
    # configuration with a cohort and a TAS flavor, so that every configuration kind is pushed
    topology = Topology.objects.create(name="gpu-topology", levels=["kubernetes.io/hostname"])
    portal.flavor.topology = topology
    portal.flavor.save()
    portal.quota.cohort = Cohort.objects.create(name="org")
    portal.quota.save()
    PriorityClass.objects.create(name="urgent", value=1000)
    # the push also reads Kueue's manager ConfigMap (get, by name, in kueue-system: the Role's one grant)
    emulator.put(kueue_config_map("apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"))
    # push: lists, first applies (create); drift: adopt (get), forced re-apply (patch)
    kube_config_push(cluster=cluster, api=api)
    emulator.edit("WorkloadPriorityClass", "normal", value=150)
    emulator.edit("ClusterQueue", "vision", spec={"stopPolicy": "Hold"})
    kube_config_push(cluster=cluster, api=api)
    for row in KubeConfigObject.objects.filter(cluster=cluster):
        try:
            kube_config_adopt(row=row, api=api)
        except DomainError:
            pass  # not adoptable (namespace, local queue): the read happened
    kube_config_reapply(row=KubeConfigObject.objects.get(kind="ClusterQueue", name="vision"), api=api)
    # submit; a retry after a lost response finds its own Job (get)
    spec = JobSpec(name="train", image="registry.example.com/train:1", resource_class=portal.rc, devices_per_pod=8)
    with django_capture_on_commit_callbacks(execute=True):
        job = job_submit(owner=portal.user, team=portal.team, spec=spec, now=at(0))
    Job.objects.filter(pk=job.pk).update(k8s_uid="")
    kube_job_create(job_id=job.pk, api=api)
    phase(WORKER, start)
    # the web: the job page's pods' logs and its events (reads, on demand)
    start = len(emulator.requests)
    kube_job_logs(Job.objects.get(pk=job.pk), api=api, tail_lines=5)
    kube_job_events(Job.objects.get(pk=job.pk), api=api)
    emulator.put({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train-0", "namespace": "team-vision",
                  "labels": {"gpu-pool-portal.io/job-id": str(job.pk)}},
                  "spec": {"containers": [{"name": "main", "image": "x"}]},
                  "status": {"containerStatuses": [{"name": "main", "state": {"running": {}}}]}})  # fmt: skip
    kube_job_logs(Job.objects.get(pk=job.pk), api=api, tail_lines=5)
    phase(WEB, start)
    start = len(emulator.requests)
    # cancel (delete the Job)
    kube_job_delete(job_id=job.pk, api=api)
    Job.objects.filter(pk=job.pk).delete()
    # the other workload kinds: submit, a retry that finds its own object (get), cancel
    # (they stay till after the sync, which lists and watches the kinds of live jobs)
    others = [
        submit_kind_job(portal, django_capture_on_commit_callbacks, kind, pods=1, gpus=2, name=f"k-{kind}")
        for kind in WorkloadKind.values
    ]
    for other in others:
        Job.objects.filter(pk=other.pk).update(k8s_uid="")
        kube_job_create(job_id=other.pk, api=api)
    # sync: a full list, then watches from the bookmarks (a slice event makes the sync read its node)
    kube_sync_run(cluster=cluster, api=api, full=True)
    emulator.put(SLICE)
    kube_sync_run(cluster=cluster, api=api, watch_seconds=1)
    # protected work: every kind's object gets its Kueue priority-class label raised (a patch), then lowered
    ResourceClass.objects.filter(pk=portal.rc.pk).update(protect_min_runtime_seconds=3600)
    Job.objects.filter(pk__in=[o.pk for o in others]).update(state=Job.State.RUNNING, admitted_at=at(0))
    assert len(kube_protection_sync(cluster=cluster, api=api, now=at(1)).raised) == len(others)
    assert len(kube_protection_sync(cluster=cluster, api=api, now=at(61)).lowered) == len(others)
    ResourceClass.objects.filter(pk=portal.rc.pk).update(protect_min_runtime_seconds=None)
    for other in others:
        kube_job_delete(job_id=other.pk, api=api)
    Job.objects.filter(pk__in=[o.pk for o in others]).delete()
    # on a cluster whose GPUs are DRA devices a job claims them through a ResourceClaimTemplate (create)
    Device.objects.filter(resource_name="nvidia.com/gpu").update(source=Device.Source.DRA, dra_driver="gpu.nvidia.com")
    with django_capture_on_commit_callbacks(execute=True):
        claimed = job_submit(owner=portal.user, team=portal.team, spec=spec, now=at(0))
    assert emulator.get_obj("ResourceClaimTemplate", f"{Job.objects.get(pk=claimed.pk).k8s_name}-main", "team-vision")
    kube_job_delete(job_id=claimed.pk, api=api)
    Job.objects.filter(pk=claimed.pk).delete()
    Device.objects.filter(resource_name="nvidia.com/gpu").update(source=Device.Source.DEVICE_PLUGIN, dra_driver="")
    # the team's quota goes: re-applying the orphans deletes them
    TeamQuota.objects.all().delete()
    PriorityClass.objects.filter(name="urgent").delete()
    kube_config_push(cluster=cluster, api=api)
    for row in KubeConfigObject.objects.filter(cluster=cluster, status="orphaned").exclude(kind="Namespace"):
        kube_config_reapply(row=row, api=api)
    assert emulator.get_obj("Topology", "gpu-topology") is None
    # health on a managed node: a node taint, a DRA DeviceTaintRule, the degraded-devices label; then undone
    settings.HEALTH_MANAGED_NODE_LABELS = {"kubernetes.io/hostname": "gpu-a1"}
    emulator.register(DEVICE_TAINT_RULES)
    ops = Actor(label="ops")
    cards = list(Device.objects.filter(node__name="gpu-a1", resource_name="nvidia.com/gpu").order_by("index")[:3])
    plugin_ticket = tickets.ticket_open(device=cards[0], reason="XID 79", actor=ops)
    Device.objects.filter(pk=cards[1].pk).update(
        source=Device.Source.DRA, dra_driver="gpu.nvidia.com", dra_pool="gpu-a1", dra_device="gpu-1"
    )
    cards[1].refresh_from_db()
    dra_ticket = tickets.ticket_open(device=cards[1], reason="XID 79", actor=ops)
    device_health_set(cards[2], to=HealthState.DEGRADED, reason="hot", now=at(60), actor=ops)
    assert health_directives_sync(cluster=cluster, api=api).errors == []
    tickets.ticket_mark_rma(ticket=plugin_ticket, actor=ops)
    Device.objects.filter(pk=cards[1].pk).update(gone_at=at(61))
    tickets.ticket_mark_rma(ticket=dra_ticket, actor=ops)
    device_health_set(cards[2], to=HealthState.HEALTHY, reason="cool", now=at(62), actor=ops)
    result = health_directives_sync(cluster=cluster, api=api)
    assert (len(result.removed), result.labelled, result.errors) == (2, ["gpu-a1"], [])

    phase(WORKER, start)

    # the watch process: each kind's loop from scratch (a list, then a watch), a new ResourceSlice seen by its watch
    # (it reads the slice's node), then one evaluation pass
    cluster.refresh_from_db()
    cluster.sync_bookmarks = {}
    cluster.save(update_fields=["sync_bookmarks"])
    start = len(emulator.requests)
    for kind in WATCHED_KINDS:
        calls = {"n": 0}

        def stop(kind=kind, calls=calls) -> bool:
            calls["n"] += 1
            if kind == "resourceslices" and calls["n"] == 2:
                emulator.put({**SLICE, "metadata": {"name": "gpu-a2-gpu.nvidia.com"},
                              "spec": {**SLICE["spec"], "nodeName": "gpu-a2", "pool": {**SLICE["spec"]["pool"], "name": "gpu-a2"}}})  # fmt: skip
            return calls["n"] > 6

        kube_watch_loop(cluster=cluster, api=api, kind=kind, stop=stop, timeout_seconds=1)
    evaluations = iter([False, True])
    kube_evaluate_loop(cluster=cluster, api=api, stop=lambda: next(evaluations, True))
    phase(WATCH, start)

    teams = ("team-vision",)
    for process, requests in requests_of.items():
        grants = expected(process, teams=teams, node_health=True)
        used: dict = {}
        missing: dict[tuple[str, str, str, str], set[str]] = {}
        for request in requests:
            needed = request_verb(request["method"], request["path"], request["query"])
            if needed is None:
                continue
            group, plural, verb = needed
            namespace, name = request_object(request["path"])
            if plural == "namespaces" and name:
                namespace = name  # a namespace object is authorised in itself (a RoleBinding there reaches it)
            verbs = {verb}
            if request["method"] == "PATCH" and request["content_type"].startswith("application/apply-patch"):
                if plural != "namespaces":  # the portal never creates a namespace: its apply only patches
                    verbs.add("create")  # an apply may create: authorised as create too
            for verb in verbs:
                key = next(
                    (
                        k
                        for k, v in grants.items()
                        if verb in v
                        and k[1:3] == (group, plural)
                        and (k[0] == "" or k[0] == namespace)
                        and (not k[3] or name in k[3])
                    ),
                    None,
                )
                if key is None:
                    missing.setdefault((namespace, group, plural, name), set()).add(verb)
                else:
                    used.setdefault(key, set()).add(verb)
        assert missing == {}, f"{process}: its account is not granted {missing}"
        unused = {k: v - used.get(k, set()) for k, v in grants.items() if v - used.get(k, set())}
        assert unused == {}, f"{process}: granted but never used (least privilege): {unused}"
    assert requests_of[WEB]  # the web did call the cluster, and only for the job page
    assert {request_verb(r["method"], r["path"], r["query"])[2] for r in requests_of[WEB]} <= {"get", "list"}
