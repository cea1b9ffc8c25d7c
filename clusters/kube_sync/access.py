"""What the portal does to a cluster, per API resource: the verbs its RBAC must grant, and why.

This is the single statement of the portal's Kubernetes permissions. ``deploy/base/rbac.yaml`` grants exactly
these verbs (a test compares them) and ``docs/kubernetes.md`` prints the table; a test also runs the portal's
services against the API emulator and checks that every request it makes is covered here.

Most grants are cluster-wide (the ClusterRole ``gpu-portal``). A grant with a ``namespace`` is a Role in that
namespace instead, and one with ``names`` is limited to those objects (``resourceNames``): reading Kueue's
manager ConfigMap must not become a grant on every ConfigMap of the cluster.

Server-side apply is an HTTP PATCH, and an apply that creates the object is also authorised as ``create``: the
applied kinds need both. Discovery (``/api``, ``/apis``) needs no grant beyond the default ``system:discovery``.
"""

from __future__ import annotations

from dataclasses import dataclass

from clusters.kube_sync.api import (
    CLUSTER_QUEUES,
    COHORTS,
    CONFIG_MAPS,
    DEPLOYMENTS,
    DEVICE_TAINT_RULES,
    EVENTS,
    JOBS,
    JOBSETS,
    LEADER_WORKER_SETS,
    LOCAL_QUEUES,
    NAMESPACES,
    NODES,
    PODS,
    PRIORITY_CLASSES,
    PYTORCH_JOBS,
    RAY_JOBS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_FLAVORS,
    RESOURCE_SLICES,
    TOPOLOGIES,
    WORKLOADS,
    Resource,
)

APPLY = ("create", "patch")  # server-side apply (create on first apply)
READ_CONFIG = ("get", "list")  # the push lists the kind; adopt reads one object
SYNC = ("list", "watch")  # list + watch with resourceVersion
#: Where deploy/base's Role lets the portal read Kueue's configuration (KUEUE_CONFIG_MAP's default in settings.py;
#: a test checks that the two agree).
KUEUE_NAMESPACE, KUEUE_CONFIG_MAP_NAME = "kueue-system", "kueue-manager-config"
#: Kueue's controller Deployment (KUEUE_CONTROLLER_DEPLOYMENT's default), restarted after a write of its configuration.
KUEUE_CONTROLLER_NAME = "kueue-controller-manager"
#: The pods' ``log`` subresource (authorised on its own); only read, one pod at a time, so not a synced resource.
POD_LOGS = Resource("pods/log", "", "v1", "pods/log", "Pod", True)


@dataclass(frozen=True)
class Access:
    """The verbs the portal uses on one resource, and the code that uses them."""

    resource: Resource
    verbs: tuple[str, ...]
    why: str
    namespace: str = ""  # "": cluster-wide (the ClusterRole); else a Role in this namespace
    names: tuple[str, ...] = ()  # resourceNames: only these objects (empty: all)

    @property
    def group(self) -> str:
        """The API group ("" for core)."""
        return self.resource.group

    @property
    def scope(self) -> str:
        """Where the grant applies, in words: "cluster" or "namespace kueue-system, only kueue-manager-config"."""
        if not self.namespace:
            return "cluster"
        only = f", only {', '.join(f'`{n}`' for n in self.names)}" if self.names else ""
        return f"namespace `{self.namespace}`{only}"


#: Resource → verbs. Keep in step with clusters/kube_sync (the tests hold both to this table).
PORTAL_ACCESS: tuple[Access, ...] = (
    Access(NAMESPACES, (*READ_CONFIG, *APPLY), "team namespaces: applies its labels (never deletes)"),
    Access(
        NODES,
        ("get", "patch", *SYNC),
        "inventory: nodes, capacity, labels, taints, readiness; health, on managed nodes only: the portal's taint, "
        "cordon and degraded-devices label",
    ),
    Access(
        PODS,
        ("create", "delete", "get", *SYNC),
        "pods of portal jobs (label selector): phase, node, restarts; a development session's Pod: submit, cancel",
    ),
    Access(EVENTS, SYNC, "events for the job timeline and the job page"),
    Access(POD_LOGS, ("get",), "the job page's last log lines of a job's pods (read when the page opens)"),
    Access(JOBS, ("create", "delete", "get", *SYNC), "submit (suspended Job), cancel (delete), sync"),
    Access(JOBSETS, ("create", "delete", "get", *SYNC), "distributed training jobs: submit (suspended), cancel, sync"),
    Access(PYTORCH_JOBS, ("create", "delete", "get", *SYNC), "PyTorch jobs: submit (suspended), cancel, sync"),
    Access(RAY_JOBS, ("create", "delete", "get", *SYNC), "Ray jobs: submit (suspended), cancel, sync"),
    Access(DEPLOYMENTS, ("create", "delete", "get", *SYNC), "inference services: submit, stop, sync"),
    Access(LEADER_WORKER_SETS, ("create", "delete", "get", *SYNC), "multi-node inference services: submit, stop, sync"),
    Access(RESOURCE_SLICES, SYNC, "DRA inventory (where resource.k8s.io/v1 is served)"),
    Access(
        RESOURCE_CLAIM_TEMPLATES,
        ("create",),
        "DRA jobs: one device claim per pod set, owned by the job's object (deleted with it)",
    ),
    Access(DEVICE_TAINT_RULES, ("create", "delete"), "health: one per DRA device in repair (DRADeviceTaints gate)"),
    Access(WORKLOADS, SYNC, "Kueue's admission decisions and messages"),
    Access(CLUSTER_QUEUES, ("delete", *READ_CONFIG, *APPLY, "watch"), "quota push, drift; usage status"),
    Access(COHORTS, ("delete", *READ_CONFIG, *APPLY), "quota push, drift"),
    Access(LOCAL_QUEUES, ("delete", *READ_CONFIG, *APPLY), "one per team namespace"),
    Access(RESOURCE_FLAVORS, ("delete", *READ_CONFIG, *APPLY), "quota push, drift"),
    Access(PRIORITY_CLASSES, ("delete", *READ_CONFIG, *APPLY), "priority classes"),
    Access(TOPOLOGIES, ("delete", *READ_CONFIG, *APPLY), "topology levels of TAS flavors"),
    Access(
        CONFIG_MAPS,
        ("get",),
        "Kueue's manager configuration: checks that each cluster's fair-sharing switch and classes match it",
        namespace=KUEUE_NAMESPACE,
        names=(KUEUE_CONFIG_MAP_NAME,),
    ),
)

#: Granted only where KUEUE_CONFIG_WRITE is on (deploy/kueue-config-write; Helm ``kueueConfigMap.write``).
KUEUE_CONFIG_WRITE_ACCESS: tuple[Access, ...] = (
    Access(
        CONFIG_MAPS,
        ("patch",),
        "KUEUE_CONFIG_WRITE: adds the integrations and DeviceClass mappings the classes need to Kueue's "
        "configuration (merge patch carrying the resourceVersion read)",
        namespace=KUEUE_NAMESPACE,
        names=(KUEUE_CONFIG_MAP_NAME,),
    ),
    Access(
        DEPLOYMENTS,
        ("patch",),
        "KUEUE_CONFIG_WRITE: restarts Kueue's controller after such a write (the restartedAt annotation)",
        namespace=KUEUE_NAMESPACE,
        names=(KUEUE_CONTROLLER_NAME,),
    ),
)

#: (namespace, API group, plural, resource names) of one namespaced grant.
RoleKey = tuple[str, str, str, tuple[str, ...]]


def rbac_rules() -> dict[tuple[str, str], set[str]]:
    """(API group, plural) → verbs of the cluster-wide grants (the ClusterRole), from :data:`PORTAL_ACCESS`."""
    out: dict[tuple[str, str], set[str]] = {}
    for access in PORTAL_ACCESS:
        if not access.namespace:
            out.setdefault((access.group, access.resource.plural), set()).update(access.verbs)
    return out


def role_rules(*, kueue_config_write: bool = False) -> dict[RoleKey, set[str]]:
    """(namespace, API group, plural, resource names) → verbs of the namespaced grants, with those of
    :data:`KUEUE_CONFIG_WRITE_ACCESS` when ``kueue_config_write``."""
    out: dict[RoleKey, set[str]] = {}
    for access in (*PORTAL_ACCESS, *(KUEUE_CONFIG_WRITE_ACCESS if kueue_config_write else ())):
        if access.namespace:
            key = (access.namespace, access.group, access.resource.plural, tuple(sorted(access.names)))
            out.setdefault(key, set()).update(access.verbs)
    return out


def request_object(path: str) -> tuple[str, str]:
    """(namespace, name) a request addresses ("" where it addresses none, e.g. a cluster-wide list)."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    namespace = ""
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    return namespace, rest[1] if len(rest) > 1 else ""


def request_verb(method: str, path: str, query: dict[str, str]) -> tuple[str, str, str] | None:
    """(group, plural, verb) an API request needs, as the API server authorises it; None for discovery."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    if not parts or parts[0] not in ("api", "apis"):
        return None
    if parts[0] == "api":
        group, rest = "", parts[2:]
    else:
        if len(parts) < 3:
            return None
        group, rest = parts[1], parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]  # namespaced collection or object
    if not rest:
        return None
    plural, has_name = rest[0], len(rest) > 1
    if len(rest) > 2:
        plural = f"{rest[0]}/{rest[2]}"  # a subresource (status, scale, log) is authorised on its own
    method = method.upper()
    if method == "GET":
        if query.get("watch") in ("true", "1"):
            verb = "watch"
        else:
            verb = "get" if has_name else "list"
    elif method == "POST":
        verb = "create"
    elif method in ("PUT",):
        verb = "update"
    elif method == "PATCH":
        verb = "patch"
    elif method == "DELETE":
        verb = "delete" if has_name else "deletecollection"
    else:
        return None
    return group, plural, verb
