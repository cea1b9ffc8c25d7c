"""Rendering deploy/helm/gpu-pool-portal for the tests, with Helm's own engine, and reading what it renders.

helm-python-sdk (a dev dependency) runs Helm's Go SDK (v4.2.3) through a C library: the real template engine, Sprig
functions and values coalescing, offline (no cluster; ``lookup`` is empty). Debian has no ``helm`` package and PyPI
no helm binary for Linux. Core objects are checked with kubernetes-validate (strict), the ServiceMonitor against
the Prometheus Operator's CRD (tests/fixtures/reference/prometheus-operator).
"""

from __future__ import annotations

import copy
from pathlib import Path

import helm_python
import jsonschema
import kubernetes_validate
import yaml

from tests.fixtures import REFERENCE
from tests.kube.schemas import crd_json_schema

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "gpu-pool-portal"
PRODUCTION = yaml.safe_load((CHART / "values-production.yaml").read_text())
K8S_VERSION = "1.34"
SERVICE_MONITOR_CRD = REFERENCE / "prometheus-operator" / "monitoring.coreos.com_servicemonitors.yaml"
PORTAL_COMPONENTS = ("web", "worker", "beat", "watch", "migrate")

helm_python.disable_logging()


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
    """The objects of a kind (and name)."""
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    """The one object of a kind (and name)."""
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
    """The pod spec of a Deployment or Job."""
    return doc["spec"]["template"]["spec"]


def containers(doc: dict) -> list[dict]:
    """Init containers, then containers."""
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
    """Every object valid: kubernetes-validate (strict), the ServiceMonitor against its CRD."""
    for doc in docs:
        if doc["kind"] == "ServiceMonitor":
            assert validate_service_monitor(doc) == []
        else:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
