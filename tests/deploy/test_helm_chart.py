"""deploy/helm/gpu-pool-portal: the chart renders with Helm's own engine, every object validates, and it deploys what
the kustomize base deploys.

Rendering uses helm-python-sdk (a dev dependency), which runs Helm's Go SDK (v4.2.3) through a C library: the real
template engine, Sprig functions and values coalescing, offline (no cluster; ``lookup`` is empty). Debian has no
``helm`` package and PyPI no helm binary for Linux. Core objects are checked with kubernetes-validate (strict), the
ServiceMonitor against the Prometheus Operator's CRD (tests/fixtures/reference/prometheus-operator).
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import helm_python
import jsonschema
import kubernetes_validate
import pytest
import yaml

from clusters.kube_sync.access import rbac_rules, role_rules
from tests.fixtures import REFERENCE
from tests.kube.schemas import crd_json_schema
from tests.kube.test_deploy import render_base

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "gpu-pool-portal"
PRODUCTION = yaml.safe_load((CHART / "values-production.yaml").read_text())
K8S_VERSION = "1.34"
SERVICE_MONITOR_CRD = REFERENCE / "prometheus-operator" / "monitoring.coreos.com_servicemonitors.yaml"
PORTAL_COMPONENTS = ("web", "worker", "beat", "watch", "migrate")

helm_python.disable_logging()


@pytest.fixture(scope="module")
def chart():
    with helm_python.Chart.load(CHART) as loaded:
        yield loaded


def render(chart, values: dict | None = None, *, name: str = "gpu-portal", namespace: str = "gpu-portal") -> list[dict]:
    """The chart's objects as ``helm template`` renders them (NOTES.txt left out)."""
    manifests = chart.render(values=copy.deepcopy(values) if values else None, name=name, namespace=namespace)
    docs = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def render_text(chart, values: dict | None = None) -> str:
    """Every rendered manifest as one text (what would be applied, comments included)."""
    manifests = chart.render(
        values=copy.deepcopy(values) if values else None, name="gpu-portal", namespace="gpu-portal"
    )
    return "\n---\n".join(text for path, text in sorted(manifests.items()) if not path.endswith("NOTES.txt"))


def merged(*layers: dict) -> dict:
    """Values layered as ``-f a -f b`` layers them (maps merged, anything else replaced)."""
    out: dict = {}
    for layer in layers:
        out = _merge(out, layer)
    return out


def _merge(base: dict, top: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def by(docs: list[dict], kind: str, name: str | None = None) -> list[dict]:
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    (doc,) = by(docs, kind, name)
    return doc


def component(docs: list[dict], name: str) -> dict:
    """The Deployment or Job of a component (by its app.kubernetes.io/component label)."""
    (doc,) = [
        d
        for d in docs
        if d["kind"] in ("Deployment", "Job") and d["metadata"]["labels"].get("app.kubernetes.io/component") == name
    ]
    return doc


def pod_spec(doc: dict) -> dict:
    return doc["spec"]["template"]["spec"]


def containers(doc: dict) -> list[dict]:
    spec = pod_spec(doc)
    return [*spec.get("initContainers", []), *spec["containers"]]


def secret_env(doc: dict) -> dict[str, dict]:
    """Env var → its secretKeyRef, for every container of a workload (they must agree)."""
    seen: dict[str, dict] = {}
    for c in containers(doc):
        if not c["image"].startswith(("registry.example.com/gpu-pool-portal", "example.org/portal")):
            continue
        refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in c.get("env", []) if "valueFrom" in e}
        if seen:
            assert refs == seen, c["name"]
        seen = refs
    return seen


def validate_service_monitor(doc: dict) -> list[str]:
    """Problems of a ServiceMonitor against the Prometheus Operator's CRD (strict: unknown fields rejected)."""
    crd = yaml.safe_load(SERVICE_MONITOR_CRD.read_text())
    assert doc["apiVersion"] == f"{crd['spec']['group']}/v1"
    validator = jsonschema.Draft7Validator(crd_json_schema(crd, "v1"))
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def validate_all(docs: list[dict]) -> None:
    for doc in docs:
        if doc["kind"] == "ServiceMonitor":
            assert validate_service_monitor(doc) == []
        else:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


# --- rendering and validation ---------------------------------------------------------------------------------------


def test_helm_chart_renders_with_default_values_and_every_object_validates(chart):
    docs = render(chart)
    assert sorted((d["kind"], d["metadata"]["name"]) for d in docs) == [
        ("ClusterRole", "gpu-portal-gpu-pool-portal"),
        ("ClusterRoleBinding", "gpu-portal-gpu-pool-portal"),
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


def test_helm_chart_rbac_grants_exactly_the_access_table(chart):
    docs = render(chart, {"kueueConfigMap": {"namespace": "kueue", "name": "kueue-config"}}, namespace="portal")
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in one(docs, "ClusterRole")["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    assert granted == rbac_rules()
    account = one(docs, "ServiceAccount")["metadata"]["name"]
    subject = [{"kind": "ServiceAccount", "name": account, "namespace": "portal"}]
    assert one(docs, "ClusterRoleBinding")["subjects"] == subject
    role, binding = one(docs, "Role"), one(docs, "RoleBinding")
    (((namespace, group, plural, names), verbs),) = role_rules().items()
    assert (namespace, names) == ("kueue-system", ("kueue-manager-config",))  # the access table's default …
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "kueue"  # … moved with the value
    assert role["rules"] == [
        {"apiGroups": [group], "resources": [plural], "resourceNames": ["kueue-config"], "verbs": sorted(verbs)}
    ]
    assert binding["subjects"] == subject
    assert (
        one(docs, "ConfigMap", "gpu-portal-gpu-pool-portal-config")["data"]["KUEUE_CONFIG_MAP"] == "kueue/kueue-config"
    )
    no_rbac = render(chart, {"rbac": {"create": False}})
    assert not {d["kind"] for d in no_rbac} & {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


def test_helm_chart_only_pods_that_call_the_cluster_mount_the_token(chart):
    docs = render(chart)
    mounted = {name: pod_spec(component(docs, name))["automountServiceAccountToken"] for name in PORTAL_COMPONENTS}
    assert mounted == {"web": True, "worker": True, "watch": True, "beat": False, "migrate": False}
    assert one(docs, "ServiceAccount")["automountServiceAccountToken"] is False
    for name in PORTAL_COMPONENTS:
        assert pod_spec(component(docs, name))["serviceAccountName"] == one(docs, "ServiceAccount")["metadata"]["name"]


# --- values ---------------------------------------------------------------------------------------------------------


def test_helm_chart_replicas_per_component(chart):
    docs = render(chart, {"web": {"replicas": 5}, "worker": {"replicas": 7}})
    assert component(docs, "web")["spec"]["replicas"] == 5
    assert component(docs, "worker")["spec"]["replicas"] == 7
    for single in ("beat", "watch"):  # never two at once, whatever the values say
        assert component(docs, single)["spec"]["replicas"] == 1
        assert component(docs, single)["spec"]["strategy"] == {"type": "Recreate"}
    production = render(chart, PRODUCTION)
    assert component(production, "web")["spec"]["replicas"] == PRODUCTION["web"]["replicas"] == 3
    assert component(production, "worker")["spec"]["replicas"] == PRODUCTION["worker"]["replicas"] == 4
    assert not [d for d in render(chart, {"watch": {"enabled": False}}) if d["metadata"]["name"].endswith("-watch")]


def test_helm_chart_migrations_job_is_new_at_every_revision(chart):
    """A Job's pod template is immutable: each upgrade gets a Job of its own name (Helm deletes the last one)."""
    for revision in (1, 2, 7):
        manifests = chart.render(name="gpu-portal", namespace="gpu-portal", revision=revision)
        (job,) = [d for d in yaml.safe_load_all(manifests["gpu-pool-portal/templates/migrate-job.yaml"]) if d]
        assert job["metadata"]["name"] == f"gpu-portal-gpu-pool-portal-migrate-{revision}"
        assert f"job/{job['metadata']['name']}" in manifests["gpu-pool-portal/templates/NOTES.txt"]
    # rendered by `helm template` (revision always 1): the suffix comes from the values
    job = component(render(chart, {"migrations": {"nameSuffix": "0-2-0"}}), "migrate")
    assert job["metadata"]["name"] == "gpu-portal-gpu-pool-portal-migrate-0-2-0"
    assert pod_spec(job)["containers"][0]["command"] == ["python", "manage.py", "migrate", "--noinput"]


def test_helm_chart_image_resources_and_security_context_come_from_values(chart):
    values = {
        "image": {"repository": "example.org/portal", "tag": "2.3.4", "pullPolicy": "Always"},
        "worker": {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "3Gi"}}},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsUser": 20002},
    }
    docs = render(chart, values)
    for name in PORTAL_COMPONENTS:
        for c in containers(component(docs, name)):
            if c["name"] == "static":
                assert c["image"] == "nginxinc/nginx-unprivileged:1.27-alpine"
            else:
                assert (c["image"], c["imagePullPolicy"]) == ("example.org/portal:2.3.4", "Always")
            # maps are merged into the chart's defaults (as helm does): capabilities stay dropped
            assert c["securityContext"] == {**values["securityContext"], "capabilities": {"drop": ["ALL"]}}
    worker = next(c for c in containers(component(docs, "worker")) if c["name"] == "worker")
    assert worker["resources"] == values["worker"]["resources"]
    default = render(chart)
    assert containers(component(default, "web"))[0]["image"] == "registry.example.com/gpu-pool-portal:0.1.0"


def test_helm_chart_every_container_has_requests_limits_and_a_restricted_context(chart):
    for values in (None, PRODUCTION):
        docs = render(chart, values)
        for name in PORTAL_COMPONENTS:
            doc = component(docs, name)
            assert pod_spec(doc)["securityContext"]["runAsNonRoot"] is True
            for c in containers(doc):
                assert {"cpu", "memory"} <= set(c["resources"]["requests"]), (name, c["name"])
                assert "memory" in c["resources"]["limits"], (name, c["name"])
                assert c["securityContext"]["allowPrivilegeEscalation"] is False
                assert c["securityContext"]["readOnlyRootFilesystem"] is True
                assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]


# --- secrets --------------------------------------------------------------------------------------------------------

DEFAULT_REFS = {
    "SECRET_KEY": {"name": "gpu-portal-secrets", "key": "SECRET_KEY"},
    "DATABASE_URL": {"name": "gpu-portal-secrets", "key": "DATABASE_URL"},
    "CELERY_BROKER_URL": {"name": "gpu-portal-secrets", "key": "CELERY_BROKER_URL"},
    "METRICS_TOKEN": {"name": "gpu-portal-secrets", "key": "METRICS_TOKEN", "optional": True},
    "CACHE_URL": {"name": "gpu-portal-secrets", "key": "CACHE_URL", "optional": True},
}


def test_helm_chart_reads_secrets_from_the_shared_secret_by_default(chart):
    docs = render(chart)
    assert not by(docs, "Secret")
    for name in PORTAL_COMPONENTS:
        assert secret_env(component(docs, name)) == DEFAULT_REFS, name


def test_helm_chart_reads_each_secret_from_its_own_existing_secret(chart):
    docs = render(chart, PRODUCTION)
    expected = {
        "SECRET_KEY": {"name": "gpu-portal-django", "key": "secret-key"},
        "DATABASE_URL": {"name": "gpu-portal-db-app", "key": "uri"},
        "CELERY_BROKER_URL": {"name": "gpu-portal-redis", "key": "url"},
        "METRICS_TOKEN": {"name": "gpu-portal-metrics", "key": "token"},
        "OIDC_RP_CLIENT_SECRET": {"name": "gpu-portal-oidc", "key": "client-secret"},
        "CACHE_URL": {"name": "gpu-portal-redis", "key": "cache-url"},
        "EMAIL_HOST_PASSWORD": {"name": "gpu-portal-smtp", "key": "password"},
    }
    for name in PORTAL_COMPONENTS:
        assert secret_env(component(docs, name)) == expected, name


def test_helm_chart_creates_a_secret_for_inline_values_and_never_inlines_them_elsewhere(chart):
    values = {
        "existingSecret": "",
        "secretKey": {"value": secrets.token_urlsafe(40)},
        "database": {"url": "postgres://portal:db-pw-7f3a@db.example.com:5432/portal"},
        "broker": {"url": "redis://:broker-pw-91c2@redis.example.com:6379/0"},
        "metrics": {"token": "metrics-token-5d8e"},
        "cache": {"url": "redis://:cache-pw-44b1@redis.example.com:6379/1"},
        "oidc": {
            "enabled": True,
            "issuer": "https://sso.example.com",
            "clientId": "portal",
            "clientSecret": "oidc-secret-c0ff",
        },
    }
    docs = render(chart, values)
    secret = one(docs, "Secret", "gpu-portal-gpu-pool-portal-secrets")
    stored = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert stored == {
        "SECRET_KEY": values["secretKey"]["value"],
        "DATABASE_URL": values["database"]["url"],
        "CELERY_BROKER_URL": values["broker"]["url"],
        "METRICS_TOKEN": values["metrics"]["token"],
        "CACHE_URL": values["cache"]["url"],
        "OIDC_RP_CLIENT_SECRET": values["oidc"]["clientSecret"],
    }
    for name in PORTAL_COMPONENTS:
        refs = secret_env(component(docs, name))
        assert refs == {env: {"name": secret["metadata"]["name"], "key": env} for env in stored}, name
    text = render_text(chart, merged(values, {"serviceMonitor": {"enabled": True}, "ingress": {"enabled": True}}))
    for plain in stored.values():
        assert plain not in text  # only base64 in the Secret's data
    assert "db-pw-7f3a" not in text  # not even the password alone
    monitor = one(render(chart, merged(values, {"serviceMonitor": {"enabled": True}})), "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["authorization"]["credentials"] == {
        "name": secret["metadata"]["name"],
        "key": "METRICS_TOKEN",
        "optional": False,
    }
    # the pods roll when a secret value or the sidecar's configuration changes
    cidrs = render(chart, merged(values, {"web": {"static": {"trustedProxyCIDRs": ["10.42.0.0/16"]}}}))
    annotations = component(docs, "web")["spec"]["template"]["metadata"]["annotations"]
    assert (
        component(cidrs, "web")["spec"]["template"]["metadata"]["annotations"]["checksum/nginx"]
        != annotations["checksum/nginx"]
    )
    before = component(docs, "web")["spec"]["template"]["metadata"]["annotations"]["checksum/secret"]
    after_docs = render(chart, merged(values, {"database": {"url": "postgres://portal:new@db.example.com/portal"}}))
    assert component(after_docs, "web")["spec"]["template"]["metadata"]["annotations"]["checksum/secret"] != before


@pytest.mark.parametrize("missing", ["SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL"])
def test_helm_chart_refuses_to_render_without_a_required_secret(chart, missing):
    values = {
        "existingSecret": "",
        "secretKey": {"existingSecret": "django", "existingSecretKey": "key"},
        "database": {"url": "postgres://portal:pw@db/portal"},
        "broker": {"existingSecret": "redis"},
    }
    block = {"SECRET_KEY": "secretKey", "DATABASE_URL": "database", "CELERY_BROKER_URL": "broker"}[missing]
    values[block] = {}
    with pytest.raises(helm_python.HelmRenderError, match=f"{missing}: set {block}"):
        render(chart, values)


def test_helm_chart_oidc_settings(chart):
    default = one(render(chart), "ConfigMap", "gpu-portal-gpu-pool-portal-config")["data"]
    assert not [k for k in default if k.startswith("OIDC_")]
    docs = render(chart, PRODUCTION)
    config = one(docs, "ConfigMap", "gpu-portal-config")["data"]
    assert {k: v for k, v in config.items() if k.startswith("OIDC_")} == {
        "OIDC_OP_ISSUER": "https://sso.example.com/realms/research",
        "OIDC_RP_CLIENT_ID": "gpu-pool-portal",
        "OIDC_RP_SCOPES": "openid email profile groups",
    }
    with pytest.raises(helm_python.HelmRenderError, match=r"oidc\.issuer is required"):
        render(chart, {"oidc": {"enabled": True, "clientId": "portal"}})
    shared = render(chart, {"oidc": {"enabled": True, "issuer": "https://sso.example.com", "clientId": "portal"}})
    refs = secret_env(component(shared, "web"))
    assert refs["OIDC_RP_CLIENT_SECRET"] == {"name": "gpu-portal-secrets", "key": "OIDC_RP_CLIENT_SECRET"}  # required


# --- ingress, ServiceMonitor, dashboard -----------------------------------------------------------------------------


def test_helm_chart_ingress_is_off_by_default_and_follows_its_values(chart):
    assert not by(render(chart), "Ingress")
    docs = render(chart, PRODUCTION)
    ingress = one(docs, "Ingress")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [{"secretName": "gpus-example-com-tls", "hosts": ["gpus.example.com"]}]
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] == "gpus.example.com"
    backend = rule["http"]["paths"][0]["backend"]["service"]
    service = one(docs, "Service")
    assert backend == {"name": service["metadata"]["name"], "port": {"name": "http"}}
    assert backend["port"]["name"] in {p["name"] for p in service["spec"]["ports"]}
    assert ingress["metadata"]["annotations"]["cert-manager.io/cluster-issuer"] == "letsencrypt"
    # the hosts the portal answers to follow the ingress unless allowedHosts says otherwise
    hosts = {"ingress": {"enabled": True, "hosts": [{"host": "a.example.com", "paths": [{"path": "/"}]}]}}
    config = one(render(chart, hosts), "ConfigMap", "gpu-portal-gpu-pool-portal-config")["data"]
    assert config["ALLOWED_HOSTS"] == "a.example.com,localhost"
    assert config["CSRF_TRUSTED_ORIGINS"] == "https://a.example.com"
    assert one(render(chart), "ConfigMap", "gpu-portal-gpu-pool-portal-config")["data"]["ALLOWED_HOSTS"] == "localhost"
    # an Ingress serves /metrics too: the notes warn when no token is configured for it
    notes = chart.render(values=copy.deepcopy(hosts), name="gpu-portal")["gpu-pool-portal/templates/NOTES.txt"]
    assert "WARNING: the Ingress also serves /metrics" in notes
    assert (
        "WARNING"
        not in chart.render(values=copy.deepcopy(PRODUCTION), name="gpu-portal")["gpu-pool-portal/templates/NOTES.txt"]
    )


def test_helm_chart_service_monitor_toggles_and_scrapes_the_web_service(chart):
    assert not by(render(chart), "ServiceMonitor")
    docs = render(chart, {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}})
    monitor, service = one(docs, "ServiceMonitor"), one(docs, "Service")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["gpu-portal"]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["path"], endpoint["port"]) == ("/metrics", "http")
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    # the token Prometheus sends is the one the pods check
    assert endpoint["authorization"]["credentials"] == DEFAULT_REFS["METRICS_TOKEN"]
    production = render(chart, PRODUCTION)
    token = one(production, "ServiceMonitor")["spec"]["endpoints"][0]["authorization"]["credentials"]
    assert token == {**secret_env(component(production, "web"))["METRICS_TOKEN"], "optional": False}
    # no token anywhere: an open /metrics, no authorization block
    open_metrics = {
        "existingSecret": "",
        "secretKey": {"existingSecret": "s"},
        "database": {"existingSecret": "s"},
        "broker": {"existingSecret": "s"},
        "serviceMonitor": {"enabled": True},
    }
    docs = render(chart, open_metrics)
    assert "authorization" not in one(docs, "ServiceMonitor")["spec"]["endpoints"][0]
    assert not {"METRICS_TOKEN", "CACHE_URL"} & set(secret_env(component(docs, "web")))
    validate_all(docs)


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
    """The production values' ConfigMap plus the three secrets make a configuration Django accepts."""
    config = one(render(chart, PRODUCTION), "ConfigMap", "gpu-portal-config")["data"]
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "SECRET_KEY")}
    env.update(config)
    env.update(
        {
            "SECRET_KEY": secrets.token_urlsafe(50),
            "DATABASE_URL": "postgres://portal:pw@db.example.com:5432/portal",
            "CELERY_BROKER_URL": "redis://redis.example.com:6379/0",
            "STATIC_ROOT": str(tmp_path / "static"),
        }
    )
    proc = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    web = next(c for c in containers(component(render(chart, PRODUCTION), "web")) if c["name"] == "web")
    headers = {h["name"]: h["value"] for h in web["readinessProbe"]["httpGet"]["httpHeaders"]}
    assert headers["Host"] in config["ALLOWED_HOSTS"].split(",")  # else the probe gets 400
