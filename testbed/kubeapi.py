"""A small REST client of the testbed's API server (client certificate auth), for the testbed itself and the tests.

It is deliberately not the portal's client (``clusters/backends/k8s``): the tests act on the cluster with it the way
an operator's ``kubectl`` would, and check the portal's client against what it finds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import requests
import yaml

from testbed.errors import ApiError, TestbedError

Obj = dict[str, Any]

#: kind -> (API prefix, plural, namespaced) for the kinds the testbed and its tests touch.
KINDS: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "Node": ("/api/v1", "nodes", False),
    "Pod": ("/api/v1", "pods", True),
    "Event": ("/api/v1", "events", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Secret": ("/api/v1", "secrets", True),
    "Job": ("/apis/batch/v1", "jobs", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "CustomResourceDefinition": ("/apis/apiextensions.k8s.io/v1", "customresourcedefinitions", False),
    "MutatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1",
        "mutatingwebhookconfigurations",
        False,
    ),
    "ValidatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingwebhookconfigurations",
        False,
    ),
    "PriorityClass": ("/apis/scheduling.k8s.io/v1", "priorityclasses", False),
    "Lease": ("/apis/coordination.k8s.io/v1", "leases", True),
    "ResourceFlavor": ("/apis/kueue.x-k8s.io/v1beta2", "resourceflavors", False),
    "Cohort": ("/apis/kueue.x-k8s.io/v1beta2", "cohorts", False),
    "ClusterQueue": ("/apis/kueue.x-k8s.io/v1beta2", "clusterqueues", False),
    "LocalQueue": ("/apis/kueue.x-k8s.io/v1beta2", "localqueues", True),
    "Workload": ("/apis/kueue.x-k8s.io/v1beta2", "workloads", True),
    "WorkloadPriorityClass": ("/apis/kueue.x-k8s.io/v1beta2", "workloadpriorityclasses", False),
    "Topology": ("/apis/kueue.x-k8s.io/v1beta2", "topologies", False),
    "AdmissionCheck": ("/apis/kueue.x-k8s.io/v1beta2", "admissionchecks", False),
    "JobSet": ("/apis/jobset.x-k8s.io/v1alpha2", "jobsets", True),
}

FIELD_MANAGER = "testbed"


def path_of(kind: str, *, name: str = "", namespace: str = "", subresource: str = "") -> str:
    """The REST path of a collection (all namespaces without ``namespace``) or of one object."""
    try:
        prefix, plural, namespaced = KINDS[kind]
    except KeyError:
        raise TestbedError(f"kind {kind!r} is not known to testbed.kubeapi (KINDS)") from None
    path = prefix
    if namespaced and namespace:
        path += f"/namespaces/{namespace}"
    path += f"/{plural}"
    if name:
        path += f"/{name}"
    if subresource:
        path += f"/{subresource}"
    return path


class KubeApi:
    """JSON over HTTPS to one API server, as the testbed's admin (system:masters)."""

    def __init__(self, server: str, *, ca: Path, cert: Path, key: Path, timeout: float = 30.0) -> None:
        self.server = server.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        self.session.trust_env = False  # REQUESTS_CA_BUNDLE would replace the CA, a proxy variable the route
        self.session.verify = str(ca)
        self.session.cert = (str(cert), str(key))

    @classmethod
    def from_kubeconfig(cls, path: Path) -> KubeApi:
        """The client a testbed kubeconfig describes (certificate files referenced by path)."""
        config = yaml.safe_load(path.read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        return cls(
            cluster["server"],
            ca=Path(cluster["certificate-authority"]),
            cert=Path(user["client-certificate"]),
            key=Path(user["client-key"]),
        )

    def request(self, method: str, path: str, *, body: Any = None, content_type: str = "", params=None) -> Any:
        """One request; the decoded JSON answer, or ApiError."""
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
            data = body if isinstance(body, str | bytes) else json.dumps(body)
        url = self.server + path + (f"?{urlencode(params)}" if params else "")
        try:
            response = self.session.request(method, url, data=data, headers=headers, timeout=self.timeout)
        except requests.RequestException as exc:
            raise TestbedError(f"{method} {path}: the API server at {self.server} did not answer: {exc}") from exc
        if response.status_code >= 400:
            raise ApiError(method, path, response.status_code, response.text)
        return response.json() if response.content else {}

    # --- verbs -----------------------------------------------------------------------------------------------

    def get(self, kind: str, name: str, namespace: str = "") -> Obj:
        """One object (ApiError 404 when absent)."""
        return self.request("GET", path_of(kind, name=name, namespace=namespace))

    def find(self, kind: str, name: str, namespace: str = "") -> Obj | None:
        """One object, or None when absent."""
        try:
            return self.get(kind, name, namespace)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, kind: str, namespace: str = "", *, label_selector: str = "", field_selector: str = "") -> list[Obj]:
        """Every object of a kind (in a namespace, or all)."""
        params = {k: v for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if v}
        return self.request("GET", path_of(kind, namespace=namespace), params=params or None).get("items", [])

    def create(self, body: Obj, *, dry_run: bool = False) -> Obj:
        """Create an object (its kind and namespace read from it)."""
        meta = body.get("metadata", {})
        params = {"dryRun": "All"} if dry_run else None
        return self.request(
            "POST", path_of(body["kind"], namespace=meta.get("namespace", "")), body=body, params=params
        )

    def apply(self, body: Obj, *, force: bool = True, subresource: str = "") -> Obj:
        """Server-side apply as the ``testbed`` field manager."""
        meta = body["metadata"]
        return self.request(
            "PATCH",
            path_of(body["kind"], name=meta["name"], namespace=meta.get("namespace", ""), subresource=subresource),
            body=body,
            content_type="application/apply-patch+yaml",
            params={"fieldManager": FIELD_MANAGER, "force": "true" if force else "false"},
        )

    def patch(self, kind: str, name: str, patch: Obj | list, namespace: str = "", *, subresource: str = "") -> Obj:
        """A JSON merge patch (a list is sent as a JSON patch)."""
        content_type = "application/json-patch+json" if isinstance(patch, list) else "application/merge-patch+json"
        return self.request(
            "PATCH",
            path_of(kind, name=name, namespace=namespace, subresource=subresource),
            body=patch,
            content_type=content_type,
        )

    def replace(self, body: Obj, *, subresource: str = "") -> Obj:
        """PUT the whole object (its resourceVersion is the precondition)."""
        meta = body["metadata"]
        return self.request(
            "PUT",
            path_of(body["kind"], name=meta["name"], namespace=meta.get("namespace", ""), subresource=subresource),
            body=body,
        )

    def delete(self, kind: str, name: str, namespace: str = "", *, propagation: str = "Background") -> None:
        """Delete an object; absent is fine."""
        try:
            self.request(
                "DELETE",
                path_of(kind, name=name, namespace=namespace),
                body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation},
            )
        except ApiError as exc:
            if exc.status != 404:
                raise

    def healthy(self) -> bool:
        """Whether /readyz answers ok."""
        try:
            response = self.session.get(self.server + "/readyz", timeout=5)
        except requests.RequestException:
            return False
        return response.status_code == 200

    def watch(self, kind: str, namespace: str = "", *, resource_version: str = "", timeout: int = 60) -> Iterator[Obj]:
        """Watch events (``{"type", "object"}``) until the server ends the watch after ``timeout`` seconds."""
        params = {"watch": "true", "timeoutSeconds": str(timeout), "allowWatchBookmarks": "false"}
        if resource_version:
            params["resourceVersion"] = resource_version
        url = self.server + path_of(kind, namespace=namespace) + "?" + urlencode(params)
        with self.session.get(url, stream=True, timeout=(10, timeout + 10)) as response:
            if response.status_code >= 400:
                raise ApiError("GET", url, response.status_code, response.text)
            for line in response.iter_lines():
                if line:
                    yield json.loads(line)


def wait_for(what: str, check: Callable[[], Any], *, timeout: float = 60.0, interval: float = 0.2) -> Any:
    """Poll ``check`` until it returns something truthy; TestbedError naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            result = check()
        except (ApiError, TestbedError) as exc:
            result, last_error = None, exc
        if result:
            return result
        if time.monotonic() > deadline:
            suffix = f" (last error: {last_error})" if last_error else ""
            raise TestbedError(f"timed out after {timeout:.0f} s waiting for {what}{suffix}")
        time.sleep(interval)
