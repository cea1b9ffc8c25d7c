"""JobSet's controller outside a cluster, as ``testbed/kueue.py`` does for Kueue: its CRD and webhook configurations
from its module (copied at build time into ``var/testbed/bin/jobset-manifests``), the webhooks pointing at
``https://127.0.0.1:<port>`` with the testbed CA, and its manager Configuration (no leader election, certificates
from files). The pod webhooks get the object selector the release's kustomization gives them (pods of a JobSet
only), or every pod of the cluster would pass through JobSet.
"""

from __future__ import annotations

import base64
import copy
from pathlib import Path

from testbed import layout
from testbed.errors import TestbedError
from testbed.kueue import load_documents

FRAMEWORK = "jobset.x-k8s.io/jobset"
POD_SELECTOR = {"matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}


def _manifests_dir() -> Path:
    if not layout.JOBSET_MANIFESTS.exists():
        raise TestbedError(f"JobSet's manifests are missing ({layout.JOBSET_MANIFESTS}): run scripts/testbed build")
    return layout.JOBSET_MANIFESTS / "config" / "components"


def crds() -> list[dict]:
    """JobSet's CustomResourceDefinitions (one version: no conversion webhook)."""
    return [doc for p in sorted((_manifests_dir() / "crd" / "bases").glob("*.yaml")) for doc in load_documents(p)]


def webhook_configurations(*, webhook_url: str, ca_pem: bytes) -> list[dict]:
    """JobSet's Mutating- and ValidatingWebhookConfiguration on loopback, ``jobset-`` named."""
    out = []
    for doc in load_documents(_manifests_dir() / "webhook" / "manifests.yaml"):
        doc["metadata"] = {"name": f"jobset-{doc['metadata']['name']}"}
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{webhook_url}{path}", "caBundle": base64.b64encode(ca_pem).decode()}
            if any("pods" in rule["resources"] for rule in hook["rules"]):
                hook["objectSelector"] = copy.deepcopy(POD_SELECTOR)
        out.append(doc)
    return out


def configuration(*, ports: dict[str, int], webhook_cert_dir: Path) -> dict:
    """JobSet's manager Configuration (config.jobset.x-k8s.io/v1alpha1) for a testbed."""
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "webhook": {"port": ports["jobset-webhook"], "host": "127.0.0.1", "certDir": str(webhook_cert_dir)},
        "metrics": {"bindAddress": f"127.0.0.1:{ports['jobset-metrics']}"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['jobset-health']}"},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
    }
