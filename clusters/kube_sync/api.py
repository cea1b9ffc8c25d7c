"""The contract between the sync services and a cluster connection: resources, errors, and the client protocol.

Objects cross this boundary as plain JSON dicts, exactly as the API server serialises them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from clusters.errors import ClusterError, ClusterRejected, ClusterUnavailable

Obj = dict[str, Any]


@dataclass(frozen=True)
class Resource:
    """One API resource the portal reads or writes."""

    key: str
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        """``group/version`` (``v1`` for the core group)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, *, namespace: str | None = None, name: str | None = None) -> str:
        """The REST path of the collection (all namespaces when ``namespace`` is None) or of one object."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


KUEUE = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"

NAMESPACES = Resource("namespaces", "", "v1", "namespaces", "Namespace", False)
NODES = Resource("nodes", "", "v1", "nodes", "Node", False)
PODS = Resource("pods", "", "v1", "pods", "Pod", True)
EVENTS = Resource("events", "", "v1", "events", "Event", True)
#: Read only: Kueue's manager ConfigMap (one object, by name), for the fair-sharing check.
CONFIG_MAPS = Resource("configmaps", "", "v1", "configmaps", "ConfigMap", True)
JOBS = Resource("jobs", "batch", "v1", "jobs", "Job", True)
RESOURCE_SLICES = Resource("resourceslices", "resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False)
RESOURCE_CLAIMS = Resource("resourceclaims", "resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True)
#: A DRA job's device claims, one per pod set with devices (clusters.kube_sync.dra_claims).
RESOURCE_CLAIM_TEMPLATES = Resource(
    "resourceclaimtemplates", "resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True
)
RESOURCE_FLAVORS = Resource("resourceflavors", KUEUE, KUEUE_VERSION, "resourceflavors", "ResourceFlavor", False)
COHORTS = Resource("cohorts", KUEUE, KUEUE_VERSION, "cohorts", "Cohort", False)
CLUSTER_QUEUES = Resource("clusterqueues", KUEUE, KUEUE_VERSION, "clusterqueues", "ClusterQueue", False)
LOCAL_QUEUES = Resource("localqueues", KUEUE, KUEUE_VERSION, "localqueues", "LocalQueue", True)
PRIORITY_CLASSES = Resource(
    "workloadpriorityclasses", KUEUE, KUEUE_VERSION, "workloadpriorityclasses", "WorkloadPriorityClass", False
)
TOPOLOGIES = Resource("topologies", KUEUE, KUEUE_VERSION, "topologies", "Topology", False)
WORKLOADS = Resource("workloads", KUEUE, KUEUE_VERSION, "workloads", "Workload", True)
#: The objects of the workload kinds other than batch Jobs (pools.workload_kinds): each kind's top-level object.
JOBSETS = Resource("jobsets", "jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", True)
PYTORCH_JOBS = Resource("pytorchjobs", "kubeflow.org", "v1", "pytorchjobs", "PyTorchJob", True)
RAY_JOBS = Resource("rayjobs", "ray.io", "v1", "rayjobs", "RayJob", True)
LEADER_WORKER_SETS = Resource(
    "leaderworkersets", "leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet", True
)
DEPLOYMENTS = Resource("deployments", "apps", "v1", "deployments", "Deployment", True)
#: Written by the health directives only (feature gate DRADeviceTaints), never synced.
DEVICE_TAINT_RULES = Resource(
    "devicetaintrules", "resource.k8s.io", "v1alpha3", "devicetaintrules", "DeviceTaintRule", False
)

ALL_RESOURCES = (
    NAMESPACES,
    NODES,
    PODS,
    EVENTS,
    CONFIG_MAPS,
    JOBS,
    RESOURCE_SLICES,
    RESOURCE_CLAIMS,
    RESOURCE_FLAVORS,
    COHORTS,
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    PRIORITY_CLASSES,
    TOPOLOGIES,
    WORKLOADS,
    JOBSETS,
    PYTORCH_JOBS,
    RAY_JOBS,
    LEADER_WORKER_SETS,
    DEPLOYMENTS,
    RESOURCE_CLAIM_TEMPLATES,
)
BY_KIND = {r.kind: r for r in ALL_RESOURCES}
BY_KEY = {r.key: r for r in ALL_RESOURCES}


# --- errors --------------------------------------------------------------------------------------------------


class KubeError(ClusterError):
    """A request to the cluster failed; ``status`` is the HTTP status (0 when no response came back)."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "", body: Mapping | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.body = dict(body or {})


class KubeUnavailable(KubeError, ClusterUnavailable):
    """The cluster could not be reached or kept failing transiently (5xx, 429, timeouts) after the retries."""


class KubeNotFound(KubeError):
    """404: the object (or the resource type) does not exist."""


class KubeConflict(KubeError):
    """409: already exists, a server-side apply field conflict, or a failed precondition."""

    @property
    def field_conflicts(self) -> list[dict[str, str]]:
        """``[{field, manager, message}]`` of a server-side apply conflict (empty for other conflicts)."""
        out = []
        for cause in (self.body.get("details") or {}).get("causes") or []:
            if cause.get("reason") == "FieldManagerConflict":
                message = cause.get("message", "")
                manager = message.split('"')[1] if message.count('"') >= 2 else ""
                out.append({"field": cause.get("field", ""), "manager": manager, "message": message})
        return out

    @property
    def already_exists(self) -> bool:
        """Whether the conflict is a create of a name that is taken."""
        return self.reason == "AlreadyExists"


class KubeGone(KubeError):
    """410: the resourceVersion (or continue token) is too old; relist."""


class KubeRejected(KubeError, ClusterRejected):
    """Any other 4xx: the request itself is wrong (invalid object, forbidden…); retrying will not help."""


# --- the client protocol -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    """One page of a list: items (with ``kind``/``apiVersion`` filled in), the list's resourceVersion, the token."""

    items: list[Obj]
    resource_version: str
    continue_token: str


@dataclass(frozen=True)
class WatchEvent:
    """One watch event: ADDED / MODIFIED / DELETED / BOOKMARK, or IDLE when the stream pauses (ERROR is raised).

    IDLE carries no object: it says every event received so far was yielded, so a consumer that batches can
    commit now instead of waiting for the next event.
    """

    type: str
    object: Obj

    @property
    def resource_version(self) -> str:
        """The object's (or the bookmark's) resourceVersion."""
        return str((self.object.get("metadata") or {}).get("resourceVersion") or "")


class KubeApi(Protocol):
    """What the sync services need from a cluster connection. Transient failures are retried inside."""

    def list_page(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 500,
        continue_token: str = "",
        read_timeout: float | None = None,
        attempts: int | None = None,
    ) -> Page:
        """One page of a list (raises KubeGone when the continue token expired); ``attempts`` 1: no retries."""

    def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        timeout_seconds: int = 300,
        idle_timeout: float | None = None,
    ) -> Iterator[WatchEvent]:
        """Events after ``resource_version`` until the server ends the watch (or is quiet for ``idle_timeout``
        seconds); KubeGone on 410."""

    def get(self, resource: Resource, *, name: str, namespace: str | None = None) -> Obj:
        """One object (KubeNotFound when absent)."""

    def create(self, resource: Resource, body: Obj) -> Obj:
        """Create an object (KubeConflict with ``already_exists`` when the name is taken)."""

    def apply(self, resource: Resource, body: Obj, *, force: bool = False) -> Obj:
        """Server-side apply as the portal's field manager."""

    def patch(self, resource: Resource, *, name: str, namespace: str | None = None, body: Obj) -> Obj:
        """JSON merge patch."""

    def delete(
        self,
        resource: Resource,
        *,
        name: str,
        namespace: str | None = None,
        propagation_policy: str = "Background",
        uid: str = "",
    ) -> None:
        """Delete (404 is not an error: the object is gone either way); ``uid`` is a precondition."""

    def serves(self, group_version: str) -> bool:
        """Whether the cluster serves an API group/version (e.g. ``jobset.x-k8s.io/v1alpha2``)."""

    def pod_log(self, *, namespace: str, name: str, container: str, tail_lines: int, read_timeout: float) -> str:
        """The last lines of a pod's log, timestamped; one attempt (KubeUnavailable when it does not answer)."""


def list_all(
    api: KubeApi,
    resource: Resource,
    *,
    namespace: str | None = None,
    label_selector: str = "",
    field_selector: str = "",
    limit: int = 500,
) -> Iterator[Page]:
    """Every page of a list, following continue tokens (memory stays at one page)."""
    token = ""
    while True:
        page = api.list_page(
            resource,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            limit=limit,
            continue_token=token,
        )
        yield page
        token = page.continue_token
        if not token:
            return
