"""deploy/helm/gpu-pool-portal renders with Helm's engine, every object validates, and it deploys what the kustomize
base deploys (tests/deploy/helm.py renders it; values, secrets and toggles: test_helm_values.py).
"""

from __future__ import annotations

import copy
import json
import re
import secrets
from pathlib import Path

import helm_python
import kubernetes_validate
import pytest
import yaml

from clusters.kube_sync.access import PROCESSES, WATCH, WEB, WORKER, role_rules
from tests.deploy.helm import (
    CHART,
    K8S_VERSION,
    PORTAL_COMPONENTS,
    PRODUCTION,
    REPO,
    by,
    component,
    containers,
    one,
    pod_spec,
    render,
    validate_all,
    validate_service_monitor,
)
from tests.deploy.rbac import expected, granted
from tests.deploy_check import deploy_check
from tests.kube.test_deploy import ACCOUNTS, render_base, render_example_site

# --- rendering and validation ---------------------------------------------------------------------------------------


def test_helm_chart_renders_with_default_values_and_every_object_validates(chart):
    docs = render(chart)
    assert sorted((d["kind"], d["metadata"]["name"]) for d in docs) == [
        ("ClusterRole", "gpu-portal-gpu-pool-portal-watch"),
        ("ClusterRole", "gpu-portal-gpu-pool-portal-web-teams"),
        ("ClusterRole", "gpu-portal-gpu-pool-portal-worker"),
        ("ClusterRole", "gpu-portal-gpu-pool-portal-worker-teams"),
        ("ClusterRoleBinding", "gpu-portal-gpu-pool-portal-watch"),
        ("ClusterRoleBinding", "gpu-portal-gpu-pool-portal-worker"),
        ("ConfigMap", "gpu-portal-gpu-pool-portal-config"),
        ("ConfigMap", "gpu-portal-gpu-pool-portal-nginx"),
        ("Deployment", "gpu-portal-gpu-pool-portal-beat"),
        ("Deployment", "gpu-portal-gpu-pool-portal-watch"),
        ("Deployment", "gpu-portal-gpu-pool-portal-web"),
        ("Deployment", "gpu-portal-gpu-pool-portal-worker"),
        ("Job", "gpu-portal-gpu-pool-portal-migrate-1"),
        ("PodDisruptionBudget", "gpu-portal-gpu-pool-portal-web"),
        ("Role", "gpu-portal-gpu-pool-portal-kueue-config"),
        ("RoleBinding", "gpu-portal-gpu-pool-portal-kueue-config"),
        ("Service", "gpu-portal-gpu-pool-portal-web"),
        ("ServiceAccount", "gpu-portal-gpu-pool-portal"),
        ("ServiceAccount", "gpu-portal-gpu-pool-portal-watch"),
        ("ServiceAccount", "gpu-portal-gpu-pool-portal-web"),
        ("ServiceAccount", "gpu-portal-gpu-pool-portal-worker"),
    ]
    validate_all(docs)


def test_helm_chart_renders_with_production_values_and_every_object_validates(chart):
    docs = render(chart, PRODUCTION)
    kinds = sorted({d["kind"] for d in docs})
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "Ingress",
        "Job",
        "PodDisruptionBudget",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
        "ServiceMonitor",
    ]
    assert not by(docs, "Secret")  # every secret comes from a Secret made outside the chart
    validate_all(docs)


def test_helm_chart_validation_is_strict_enough_to_fail(chart):
    docs = render(chart, PRODUCTION)
    monitor = copy.deepcopy(one(docs, "ServiceMonitor"))
    monitor["spec"]["endpoints"][0]["intervall"] = "60s"  # a typo
    monitor["spec"]["endpoints"][0]["scrapeTimeout"] = "30 seconds"
    problems = validate_service_monitor(monitor)
    assert any("intervall" in p for p in problems), problems
    assert any("30 seconds" in p for p in problems), problems
    ingress = copy.deepcopy(one(docs, "Ingress"))
    ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["port"] = {"nmae": "http"}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ingress, K8S_VERSION, strict=True)


def test_deploy_monitoring_service_monitor_validates_against_the_crd():
    monitor = yaml.safe_load((REPO / "deploy" / "monitoring" / "servicemonitor.yaml").read_text())
    assert validate_service_monitor(monitor) == []


@pytest.mark.parametrize("values", [None, PRODUCTION], ids=["default", "production"])
def test_helm_lint_finds_nothing_above_info(values):
    result = helm_python.lint(CHART, copy.deepcopy(values) if values else None)
    assert result["errors"] == []
    assert [m for m in result["messages"] if m["severity"] > 1] == []  # 1: info ("icon is recommended")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"web": {"replica": 3}}, "additional properties 'replica' not allowed"),
        ({"worker": {"replicas": "two"}}, "got string, want integer"),
        ({"ingres": {"enabled": True}}, "additional properties 'ingres' not allowed"),
        ({"serviceMonitor": {"enabled": "yes"}}, "got string, want boolean"),
        ({"database": {"existingSecret": "db", "key": "uri"}}, "additional properties 'key' not allowed"),
    ],
)
def test_helm_chart_values_schema_refuses_typos(chart, values, message):
    """values.schema.json: Helm checks the values before rendering (install, upgrade, template, lint)."""
    chart.validate_schema(None)
    chart.validate_schema(copy.deepcopy(PRODUCTION))
    with pytest.raises(helm_python.HelmValuesError, match=re.escape(message)):
        render(chart, values)


# --- the same deployment as the kustomize base ----------------------------------------------------------------------


def _base_component(base: list[dict], name: str) -> dict:
    return next(
        d
        for d in base
        if d["kind"] in ("Deployment", "Job") and d["metadata"]["labels"].get("app.kubernetes.io/component") == name
    )


def _shape(c: dict) -> dict:
    """What must match the base: everything but the image, the environment wiring and the pull policy."""
    return {k: v for k, v in c.items() if k not in ("image", "imagePullPolicy", "env", "envFrom")}


def _directives(conf: str) -> list[str]:
    """An nginx configuration without its comments."""
    return [line.strip() for line in conf.splitlines() if line.strip() and not line.strip().startswith("#")]


def test_helm_chart_runs_what_the_kustomize_base_runs(chart):
    base = render_base()
    docs = render(chart, {"fullnameOverride": "gpu-portal"})
    for name in PORTAL_COMPONENTS:
        mine, theirs = component(docs, name), _base_component(base, name)
        spec, base_spec = pod_spec(mine), pod_spec(theirs)
        assert [_shape(c) for c in containers(mine)] == [_shape(c) for c in containers(theirs)], name
        for key in ("securityContext", "automountServiceAccountToken", "volumes", "restartPolicy"):
            assert spec.get(key) == base_spec.get(key), (name, key)
        assert spec.get("terminationGracePeriodSeconds") == base_spec.get("terminationGracePeriodSeconds"), name
        assert mine["spec"].get("replicas") == theirs["spec"].get("replicas"), name
        assert mine["spec"].get("strategy") == theirs["spec"].get("strategy"), name
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    base_names = {(d["kind"], d["metadata"]["name"]) for d in base if d["kind"] != "Namespace"}
    assert names - base_names == {("Job", "gpu-portal-migrate-1")}  # a Job per release revision
    assert base_names - names == {("Job", "gpu-portal-migrate")}
    nginx = one(docs, "ConfigMap", "gpu-portal-nginx")["data"]["default.conf"]
    assert _directives(nginx) == _directives(one(base, "ConfigMap", "gpu-portal-nginx")["data"]["default.conf"])
    config = one(docs, "ConfigMap", "gpu-portal-config")["data"]
    base_config = one(base, "ConfigMap", "gpu-portal-config")["data"]
    same = set(base_config) - {"ALLOWED_HOSTS", "CSRF_TRUSTED_ORIGINS"}  # the hosts are the chart's values
    assert {k: config[k] for k in same} == {k: base_config[k] for k in same}
    assert (
        one(docs, "Service", "gpu-portal-web")["spec"]["ports"]
        == one(base, "Service", "gpu-portal-web")["spec"]["ports"]
    )
    assert (
        one(docs, "PodDisruptionBudget")["spec"]["minAvailable"]
        == one(base, "PodDisruptionBudget")["spec"]["minAvailable"]
    )


def test_helm_chart_kueue_config_write_adds_the_write_role_only_when_asked(chart):
    values = {"kueueConfigMap": {"namespace": "kueue", "name": "kueue-config", "write": True}}
    docs = render(chart, values, namespace="portal")
    for doc in docs:
        kubernetes_validate.validate(doc, "1.34", strict=True)
    role = one(docs, "Role", "gpu-portal-gpu-pool-portal-kueue-config-write")
    binding = one(docs, "RoleBinding", "gpu-portal-gpu-pool-portal-kueue-config-write")
    read = role_rules()
    written = {k: v - read.get(k, set()) for k, v in role_rules(kueue_config_write=True).items()}
    written = {k: v for k, v in written.items() if v}
    moved = {"kueue-manager-config": "kueue-config", "kueue-controller-manager": "kueue-controller-manager"}
    assert role["rules"] == [
        {"apiGroups": [group], "resources": [plural], "resourceNames": [moved[n] for n in names], "verbs": sorted(v)}
        for (_namespace, group, plural, names), v in written.items()
    ]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "kueue"
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    data = one(docs, "ConfigMap", "gpu-portal-gpu-pool-portal-config")["data"]
    assert (data["KUEUE_CONFIG_WRITE"], data["KUEUE_CONTROLLER_DEPLOYMENT"]) == ("true", "kueue-controller-manager")
    off = render(chart, {}, namespace="portal")
    assert [d["metadata"]["name"] for d in off if d["kind"] == "Role"] == ["gpu-portal-gpu-pool-portal-kueue-config"]
    assert "KUEUE_CONFIG_WRITE" not in one(off, "ConfigMap", "gpu-portal-gpu-pool-portal-config")["data"]


def test_helm_chart_rbac_grants_each_process_exactly_its_access(chart):
    """Each process's account gets its part of the access table: cluster-wide, in each of teamNamespaces, and the
    worker's Role where kueueConfigMap moved it; node health only with nodeHealth.enabled."""
    values = {"kueueConfigMap": {"namespace": "kueue", "name": "kueue-config"}, "teamNamespaces": ["ml-a", "ml-b"]}
    docs = render(chart, values, namespace="portal")
    validate_all(docs)
    accounts = {p: f"gpu-portal-gpu-pool-portal-{p}" for p in PROCESSES}
    for process in PROCESSES:
        assert granted(docs, accounts[process], "portal") == expected(
            process, teams=("ml-a", "ml-b"), kueue=("kueue", "kueue-config")
        ), process
    assert granted(docs, "gpu-portal-gpu-pool-portal", "portal") == {}  # beat and migrations
    assert (
        one(docs, "ConfigMap", "gpu-portal-gpu-pool-portal-config")["data"]["KUEUE_CONFIG_MAP"] == "kueue/kueue-config"
    )
    health = render(chart, {**values, "nodeHealth": {"enabled": True}}, namespace="portal")
    assert granted(health, accounts[WORKER], "portal") == expected(
        WORKER, teams=("ml-a", "ml-b"), node_health=True, kueue=("kueue", "kueue-config")
    )
    data = one(health, "ConfigMap", "gpu-portal-gpu-pool-portal-config")["data"]
    assert data["HEALTH_MANAGED_NODE_LABELS"] == "gpu-pool-portal.io/managed=true"
    assert "HEALTH_MANAGED_NODE_LABELS" not in one(docs, "ConfigMap", "gpu-portal-gpu-pool-portal-config")["data"]
    no_watch = render(chart, {"watch": {"enabled": False}}, namespace="portal")
    assert not [d for d in no_watch if d["metadata"]["name"].endswith("-watch")]
    no_rbac = render(chart, {"rbac": {"create": False}})
    assert not {d["kind"] for d in no_rbac} & {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


def test_helm_chart_rbac_is_the_kustomize_example_sites(chart):
    """The chart with the example site's team namespaces and node health grants what deploy/example-site grants."""
    docs = render(chart, {"fullnameOverride": "gpu-portal", "teamNamespaces": ["team-vision", "team-speech"],
                          "nodeHealth": {"enabled": True}})  # fmt: skip
    site = render_example_site()
    for process in PROCESSES:
        assert granted(docs, ACCOUNTS[process], "gpu-portal") == granted(site, ACCOUNTS[process], "gpu-portal")
    rbac_kinds = ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount")
    key = lambda d: (d["kind"], d["metadata"]["name"], d["metadata"].get("namespace", "gpu-portal"))  # noqa: E731
    assert sorted(key(d) for d in docs if d["kind"] in rbac_kinds) == sorted(
        key(d) for d in site if d["kind"] in rbac_kinds
    )
    chart_config = one(docs, "ConfigMap", "gpu-portal-config")["data"]
    assert (
        chart_config["HEALTH_MANAGED_NODE_LABELS"]
        == one(site, "ConfigMap", "gpu-portal-config")["data"]["HEALTH_MANAGED_NODE_LABELS"]
    )


def test_helm_chart_values_schema_refuses_a_bad_team_namespace(chart):
    with pytest.raises(Exception, match="teamNamespaces"):
        render(chart, {"teamNamespaces": ["Team_Vision"]})


def test_helm_chart_only_pods_that_call_the_cluster_mount_the_token(chart):
    docs = render(chart)
    mounted = {name: pod_spec(component(docs, name))["automountServiceAccountToken"] for name in PORTAL_COMPONENTS}
    assert mounted == {"web": True, "worker": True, "watch": True, "beat": False, "migrate": False}
    assert all(a["automountServiceAccountToken"] is False for a in by(docs, "ServiceAccount"))
    accounts = {name: pod_spec(component(docs, name))["serviceAccountName"] for name in PORTAL_COMPONENTS}
    assert accounts == {
        "web": "gpu-portal-gpu-pool-portal-web",
        "worker": "gpu-portal-gpu-pool-portal-worker",
        "watch": "gpu-portal-gpu-pool-portal-watch",
        "beat": "gpu-portal-gpu-pool-portal",
        "migrate": "gpu-portal-gpu-pool-portal",
    }
    assert {WEB, WORKER, WATCH} == set(PROCESSES)


def test_helm_chart_grafana_dashboard_is_the_deploy_dashboard(chart):
    assert not [d for d in render(chart) if d["metadata"]["name"].endswith("-dashboard")]
    dashboard = one(render(chart, PRODUCTION), "ConfigMap", "gpu-portal-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((REPO / "deploy" / "grafana" / "portal-dashboard.json").read_text())
    assert json.loads(dashboard["data"]["portal-dashboard.json"]) == shipped


def test_helm_chart_packages_with_the_dashboard_file(chart, tmp_path):
    """``helm package``: the archive holds the dashboard itself (files/ links to deploy/grafana), and renders alike."""
    archive = Path(chart.save(tmp_path))
    with helm_python.Chart.load_archive(archive.read_bytes()) as packaged:
        assert packaged.metadata["version"] == chart.metadata["version"]
        assert render(packaged, PRODUCTION) == render(chart, PRODUCTION)


# --- the settings work ----------------------------------------------------------------------------------------------


def test_helm_chart_production_configmap_passes_the_deploy_check(chart, tmp_path):
    """The production values' ConfigMap plus its secrets make a configuration Django accepts (SSO included)."""
    config = one(render(chart, PRODUCTION), "ConfigMap", "gpu-portal-config")["data"]
    secret_env = {
        "SECRET_KEY": secrets.token_urlsafe(50),
        "DATABASE_URL": "postgres://portal:pw@db.example.com:5432/portal",
        "CELERY_BROKER_URL": "redis://redis.example.com:6379/0",
        "OIDC_CLIENT_SECRET": secrets.token_urlsafe(32),
        "METRICS_TOKEN": secrets.token_urlsafe(32),
    }
    proc = deploy_check(config, secret_env, static_root=tmp_path / "static")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    web = next(c for c in containers(component(render(chart, PRODUCTION), "web")) if c["name"] == "web")
    headers = {h["name"]: h["value"] for h in web["readinessProbe"]["httpGet"]["httpHeaders"]}
    assert headers["Host"] in config["ALLOWED_HOSTS"].split(",")  # else the probe gets 400
