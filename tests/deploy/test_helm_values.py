"""deploy/helm/gpu-pool-portal's values: replicas, image, resources, secrets by reference, SSO, ingress,
ServiceMonitor and dashboard toggles (tests/deploy/helm.py renders the chart with Helm's engine).
"""

from __future__ import annotations

import base64
import copy
import secrets

import helm_python
import pytest
import yaml

from tests.deploy.helm import (
    PORTAL_COMPONENTS,
    PRODUCTION,
    by,
    component,
    containers,
    merged,
    one,
    pod_spec,
    render,
    render_text,
    secret_env,
    validate_all,
)

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
                assert c["image"].startswith("nginxinc/nginx-unprivileged:1.27-alpine@sha256:")
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
        "OIDC_CLIENT_SECRET": {"name": "gpu-portal-oidc", "key": "client-secret"},
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
        "OIDC_CLIENT_SECRET": values["oidc"]["clientSecret"],
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
        "OIDC_ISSUER": "https://sso.example.com/realms/research",
        "OIDC_CLIENT_ID": "gpu-pool-portal",
        "OIDC_SCOPES": "openid email profile groups",
        "OIDC_PROVIDER_NAME": "Keycloak",
    }
    with pytest.raises(helm_python.HelmRenderError, match=r"oidc\.issuer is required"):
        render(chart, {"oidc": {"enabled": True, "clientId": "portal"}})
    shared = render(chart, {"oidc": {"enabled": True, "issuer": "https://sso.example.com", "clientId": "portal"}})
    refs = secret_env(component(shared, "web"))
    assert refs["OIDC_CLIENT_SECRET"] == {"name": "gpu-portal-secrets", "key": "OIDC_CLIENT_SECRET"}  # required


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
    # an Ingress serves /metrics too: the notes say it refuses every scrape until a token is configured
    notes = chart.render(values=copy.deepcopy(hosts), name="gpu-portal")["gpu-pool-portal/templates/NOTES.txt"]
    assert "NOTE: /metrics answers only with METRICS_TOKEN" in notes
    production = chart.render(values=copy.deepcopy(PRODUCTION), name="gpu-portal")[
        "gpu-pool-portal/templates/NOTES.txt"
    ]
    assert "NOTE" not in production  # a token and team namespaces are configured


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


def test_helm_chart_optional_objects_go_with_their_values(chart):
    docs = render(chart, {"web": {"pdbMinAvailable": None}, "serviceAccount": {"create": False, "name": "portal-sa"}})
    assert not by(docs, "PodDisruptionBudget")
    assert not by(docs, "ServiceAccount")
    for name in PORTAL_COMPONENTS:
        assert pod_spec(component(docs, name))["serviceAccountName"] == "portal-sa"
    assert {b["subjects"][0]["name"] for b in by(docs, "ClusterRoleBinding")} == {"portal-sa"}
    assert one(render(chart, PRODUCTION), "PodDisruptionBudget")["spec"]["minAvailable"] == 2
