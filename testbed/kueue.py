"""Kueue outside a cluster: its CRDs, webhook configurations and manager Configuration for a testbed.

Kueue's release points its webhooks (admission and CRD conversion) at a Service in ``kueue-system``; here they
point at ``https://127.0.0.1:<port>`` with the testbed CA as ``caBundle``. The objects are Kueue's own, read from
the module ``testbed/go.mod`` pins (copied at build time into ``var/testbed/bin/kueue-manifests``); only the
client configuration, the names (``kueue-`` prefixed, as the release names them) and the namespace selectors
the release's kustomization adds are changed. Webhooks of integrations that are not enabled are left out: the
API server would call a path Kueue does not serve and, with ``failurePolicy: Fail``, refuse those objects.
"""

from __future__ import annotations

import base64
import copy
import functools
from pathlib import Path

import yaml

from testbed import layout
from testbed.errors import TestbedError

NAMESPACE = "kueue-system"
CONFIG_MAP = "kueue-manager-config"
CONFIG_KEY = "controller_manager_config.yaml"
#: Where cmd/kueue/main.go (v0.19) reads its metrics certificate when internal certificate management is off.
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")

#: The CRDs Kueue's kustomization (config/components/crd) gives a conversion webhook.
CONVERTED_CRDS = {"localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters"}

#: Kueue framework name -> (API group, resource) its webhooks act on.
FRAMEWORK_RESOURCES = {
    "batch/job": ("batch", "jobs"),
    "jobset.x-k8s.io/jobset": ("jobset.x-k8s.io", "jobsets"),
    "pod": ("", "pods"),
    "deployment": ("apps", "deployments"),
    "statefulset": ("apps", "statefulsets"),
    "kubeflow.org/pytorchjob": ("kubeflow.org", "pytorchjobs"),
    "ray.io/rayjob": ("ray.io", "rayjobs"),
    "leaderworkerset.x-k8s.io/leaderworkerset": ("leaderworkerset.x-k8s.io", "leaderworkersets"),
}
DEFAULT_FRAMEWORKS = ("batch/job",)
#: Integrations that need another one enabled too (Kueue refuses its configuration otherwise).
REQUIRES = {"deployment": "pod", "statefulset": "pod", "leaderworkerset.x-k8s.io/leaderworkerset": "pod"}

#: As the release's config/components/webhook kustomization sets on every integration's webhook.
SYSTEM_NAMESPACES_EXCLUDED = {
    "matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", NAMESPACE]}
    ]
}


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the CRDs are megabytes of YAML


@functools.lru_cache(maxsize=64)
def _documents(path: Path) -> tuple:
    return tuple(d for d in yaml.load_all(path.read_text(), Loader=_LOADER) if d)


def load_documents(path: Path) -> list[dict]:
    """The YAML documents of a manifest file (parsed once per process; the caller gets its own copies)."""
    return copy.deepcopy(list(_documents(path)))


def _manifests_dir() -> Path:
    if not layout.KUEUE_MANIFESTS.exists():
        raise TestbedError(f"Kueue's manifests are missing ({layout.KUEUE_MANIFESTS}): run scripts/testbed build")
    return layout.KUEUE_MANIFESTS / "config" / "components"


def crds(*, webhook_url: str, ca_pem: bytes) -> list[dict]:
    """Kueue's CustomResourceDefinitions, the converted ones calling ``webhook_url``/convert."""
    out = []
    for path in sorted((_manifests_dir() / "crd" / "bases").glob("*.yaml")):
        (crd,) = load_documents(path)
        if crd["spec"]["names"]["plural"] in CONVERTED_CRDS:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {
                        "url": f"{webhook_url}/convert",
                        "caBundle": base64.b64encode(ca_pem).decode(),
                    },
                    "conversionReviewVersions": ["v1"],
                },
            }
        out.append(crd)
    return out


def webhook_configurations(*, webhook_url: str, ca_pem: bytes, frameworks: tuple[str, ...]) -> list[dict]:
    """Kueue's Mutating- and ValidatingWebhookConfiguration, for Kueue's own kinds and ``frameworks``."""
    unknown = [f for f in frameworks if f not in FRAMEWORK_RESOURCES]
    if unknown:
        raise TestbedError(f"--framework {', '.join(unknown)}: the testbed knows {', '.join(FRAMEWORK_RESOURCES)}")
    wanted = {FRAMEWORK_RESOURCES[f] for f in frameworks}
    docs = load_documents(_manifests_dir() / "webhook" / "manifests.yaml")
    out = []
    for doc in docs:
        doc = copy.deepcopy(doc)
        doc["metadata"] = {"name": f"kueue-{doc['metadata']['name']}"}
        kept = []
        for hook in doc["webhooks"]:
            rules = {
                (group, resource.split("/")[0])
                for r in hook["rules"]
                for group in r["apiGroups"]
                for resource in r["resources"]
            }
            own = all(group == "kueue.x-k8s.io" for group, _ in rules)
            if not own and not rules & wanted:
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{webhook_url}{path}", "caBundle": base64.b64encode(ca_pem).decode()}
            if not own:
                hook["namespaceSelector"] = copy.deepcopy(SYSTEM_NAMESPACES_EXCLUDED)
            kept.append(hook)
        doc["webhooks"] = kept
        out.append(doc)
    return out


def configuration(
    *,
    ports: dict[str, int],
    webhook_cert_dir: Path,
    frameworks: tuple[str, ...],
    fair_sharing: bool = False,
    wait_for_pods_ready: bool = False,
) -> dict:
    """Kueue's manager Configuration (config.kueue.x-k8s.io/v1beta2) for a testbed.

    As the release's controller_manager_config.yaml, but: loopback ports, no leader election, certificates
    from files (internal certificate management off), only ``frameworks`` enabled.
    """
    config: dict = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['kueue-health']}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports['kueue-metrics']}"},
        "webhook": {"port": ports["kueue-webhook"], "host": "127.0.0.1", "certDir": str(webhook_cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        # The on-demand visibility API server reads its certificate from /visibility (fixed in v0.19 when
        # internal certificate management is off) and is served through an APIService; the portal does not use it.
        "featureGates": {"VisibilityOnDemand": False},
        "controller": {
            "groupKindConcurrency": {
                "Job.batch": 5,
                "Pod": 5,
                "Workload.kueue.x-k8s.io": 10,
                "LocalQueue.kueue.x-k8s.io": 5,
                "Cohort.kueue.x-k8s.io": 1,
                "ClusterQueue.kueue.x-k8s.io": 5,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            }
        },
        "clientConnection": {"qps": 300, "burst": 500},
        "integrations": {"frameworks": list(frameworks)},
    }
    if fair_sharing:
        config["fairSharing"] = {"preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]}
    if wait_for_pods_ready:
        config["waitForPodsReady"] = {"timeout": "5m", "blockAdmission": False}
    return config


def config_map(config: dict) -> dict:
    """The ConfigMap ``kueue-system/kueue-manager-config`` the release installs, holding ``config``."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIG_MAP, "namespace": NAMESPACE},
        "data": {CONFIG_KEY: yaml.safe_dump(config, sort_keys=False)},
    }
