"""What the portal does to a cluster, per process and API resource: the verbs its RBAC must grant, and why.

This is the single statement of the portal's Kubernetes permissions. Each process kind has its own service account
and gets only what its code does (issue 33: least privilege):

- **web** (internet-facing): reads a job's pods, their logs and its events for the job page, in the team namespaces
  only; nothing cluster-wide, nothing it could change. The drift admin's buttons run on the worker
  (clusters.drift_replies).
- **worker**: submits and cancels jobs (the workload kinds, pods, claim templates) in the team namespaces only,
  labels those namespaces (``get``/``patch`` on each one's own Namespace object, granted there: never
  ``create``, never another namespace), pushes Kueue's cluster-wide configuration, and syncs and reconciles (list and
  watch, read-only, cluster-wide: the sync lists every namespace by label).
- **watch** (``kube_watch``): the sync's lists and watches, read-only.
- beat and the migrations Job call no cluster: their pods mount no token.

A grant's ``namespace`` is its scope: ``""`` cluster-wide (a ClusterRole and ClusterRoleBinding), :data:`TEAMS` each
team namespace (a ClusterRole holding the rules, bound by a RoleBinding in every namespace the portal manages:
Helm's ``teamNamespaces``, kustomize's ``deploy/team-namespace``), or a named namespace (a Role there; with ``names``,
limited to those objects). Opt-in grants: :data:`NODE_HEALTH_ACCESS` (tainting, cordoning and labelling managed
nodes, DRA device taints: only where ``HEALTH_MANAGED_NODE_LABELS`` is set) and :data:`KUEUE_CONFIG_WRITE_ACCESS`.

``deploy/`` grants exactly these (tests/kube/test_deploy.py and tests/deploy/ compare them), ``docs/kubernetes.md``
prints them, and a test runs each process's code against the API emulator and checks that every request it makes is
granted to that process and every grant is used. Server-side apply is an HTTP PATCH, and an apply that creates the
object is also authorised as ``create``: the applied kinds need both — except Namespaces, which the portal never
creates (the deployer does, with their Pod Security labels): it only patches its own labels onto them.
Discovery (``/api``, ``/apis``) needs no grant beyond the default ``system:discovery``.
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

WEB, WORKER, WATCH = "web", "worker", "watch"
#: The process kinds that call a cluster, each with its own service account (beat and migrations have none).
PROCESSES = (WEB, WORKER, WATCH)
#: The scope "every team namespace" (each ``Team.namespace`` the deployment lists).
TEAMS = "*teams*"
#: The workload kinds' top-level objects a submission creates (and a cancel deletes) in a team namespace.
WORKLOAD_OBJECTS = (JOBS, JOBSETS, PYTORCH_JOBS, RAY_JOBS, DEPLOYMENTS, LEADER_WORKER_SETS)


@dataclass(frozen=True)
class Access:
    """The verbs one process uses on one resource in one scope, and the code that uses them."""

    process: str
    resource: Resource
    verbs: tuple[str, ...]
    why: str
    namespace: str = ""  # "": cluster-wide; TEAMS: each team namespace; else a Role in this namespace
    names: tuple[str, ...] = ()  # resourceNames: only these objects (empty: all)

    @property
    def group(self) -> str:
        """The API group ("" for core)."""
        return self.resource.group

    @property
    def scope(self) -> str:
        """Where the grant applies, in words: "cluster", "each team namespace" or
        "namespace `kueue-system`, only `kueue-manager-config`"."""
        if not self.namespace:
            return "cluster"
        if self.namespace == TEAMS:
            return "each team namespace"
        only = f", only {', '.join(f'`{n}`' for n in self.names)}" if self.names else ""
        return f"namespace `{self.namespace}`{only}"


def _workloads(process: str, verbs: tuple[str, ...], why: str, namespace: str = "") -> tuple[Access, ...]:
    return tuple(Access(process, r, verbs, f"{r.kind}: {why}", namespace) for r in WORKLOAD_OBJECTS)


#: Process, resource, scope → verbs. Keep in step with clusters/kube_sync (the tests hold both to this table).
PORTAL_ACCESS: tuple[Access, ...] = (
    # --- web: the job page, in the team namespaces only
    Access(WEB, PODS, ("list",), "the job page: a job's pods (label selector), for their logs", TEAMS),
    Access(WEB, POD_LOGS, ("get",), "the job page's last log lines of a job's pods (read when the page opens)", TEAMS),
    Access(WEB, EVENTS, ("list",), "the job page: events of a job's object, Workload and pods", TEAMS),
    # --- worker: jobs in the team namespaces
    Access(
        WORKER,
        NAMESPACES,
        ("get", "patch"),
        "team namespaces: applies the portal's labels to the namespace itself (never creates or deletes one)",
        TEAMS,
    ),
    Access(
        WORKER,
        PODS,
        ("create", "delete", "get", "patch"),
        "a development session's Pod: submit, cancel; protected work: its Kueue priority-class label",
        TEAMS,
    ),
    *_workloads(
        WORKER,
        ("create", "delete", "get", "patch"),
        "submit, cancel, adopt after a lost answer; protected work: its Kueue priority-class label",
        TEAMS,
    ),
    Access(
        WORKER,
        RESOURCE_CLAIM_TEMPLATES,
        ("create",),
        "DRA jobs: one device claim per pod set, owned by the job's object (deleted with it)",
        TEAMS,
    ),
    Access(WORKER, LOCAL_QUEUES, ("delete", "get", *APPLY), "one per team namespace: push, drift", TEAMS),
    # --- worker: sync and reconcile (read-only, cluster-wide), Kueue's cluster-wide configuration
    Access(WORKER, NAMESPACES, ("list",), "the push's drift check lists the namespaces"),
    Access(WORKER, NODES, ("get", *SYNC), "inventory: nodes, capacity, labels, taints, readiness"),
    Access(WORKER, PODS, SYNC, "pods of portal jobs (label selector): phase, node, restarts"),
    Access(WORKER, EVENTS, SYNC, "events for the job timeline"),
    *_workloads(WORKER, SYNC, "sync"),
    Access(WORKER, RESOURCE_SLICES, SYNC, "DRA inventory (where resource.k8s.io/v1 is served)"),
    Access(WORKER, WORKLOADS, SYNC, "Kueue's admission decisions and messages"),
    Access(WORKER, CLUSTER_QUEUES, ("delete", *READ_CONFIG, *APPLY, "watch"), "quota push, drift; usage status"),
    Access(WORKER, COHORTS, ("delete", *READ_CONFIG, *APPLY), "quota push, drift"),
    Access(WORKER, LOCAL_QUEUES, ("list",), "the push's drift check lists them"),
    Access(WORKER, RESOURCE_FLAVORS, ("delete", *READ_CONFIG, *APPLY), "quota push, drift"),
    Access(WORKER, PRIORITY_CLASSES, ("delete", *READ_CONFIG, *APPLY), "priority classes"),
    Access(WORKER, TOPOLOGIES, ("delete", *READ_CONFIG, *APPLY), "topology levels of TAS flavors"),
    Access(
        WORKER,
        CONFIG_MAPS,
        ("get",),
        "Kueue's manager configuration: checks that each cluster's fair-sharing switch and classes match it",
        namespace=KUEUE_NAMESPACE,
        names=(KUEUE_CONFIG_MAP_NAME,),
    ),
    # --- watch: the sync's lists and watches, read-only
    Access(WATCH, NODES, ("get", *SYNC), "inventory: nodes (and a node a new ResourceSlice names)"),
    Access(WATCH, PODS, SYNC, "pods of portal jobs"),
    Access(WATCH, EVENTS, SYNC, "events for the job timeline"),
    *_workloads(WATCH, SYNC, "sync"),
    Access(WATCH, RESOURCE_SLICES, SYNC, "DRA inventory"),
    Access(WATCH, WORKLOADS, SYNC, "Kueue's admission decisions and messages"),
    Access(WATCH, CLUSTER_QUEUES, SYNC, "usage status"),
)

#: Granted only where the health features act on nodes (``HEALTH_MANAGED_NODE_LABELS`` set; deploy/node-health, Helm
#: ``nodeHealth.enabled``): exactly the node verbs they use, to the worker.
NODE_HEALTH_ACCESS: tuple[Access, ...] = (
    Access(
        WORKER,
        NODES,
        ("patch",),
        "health, on managed nodes only (HEALTH_MANAGED_NODE_LABELS): the portal's taint, cordon and "
        "degraded-devices label",
    ),
    Access(WORKER, DEVICE_TAINT_RULES, ("create", "delete"), "health: one per DRA device in repair (DRADeviceTaints)"),
)

#: Granted only where KUEUE_CONFIG_WRITE is on (deploy/kueue-config-write; Helm ``kueueConfigMap.write``).
KUEUE_CONFIG_WRITE_ACCESS: tuple[Access, ...] = (
    Access(
        WORKER,
        CONFIG_MAPS,
        ("patch",),
        "KUEUE_CONFIG_WRITE: adds the integrations and DeviceClass mappings the classes need to Kueue's "
        "configuration (merge patch carrying the resourceVersion read)",
        namespace=KUEUE_NAMESPACE,
        names=(KUEUE_CONFIG_MAP_NAME,),
    ),
    Access(
        WORKER,
        DEPLOYMENTS,
        ("patch",),
        "KUEUE_CONFIG_WRITE: restarts Kueue's controller after such a write (the restartedAt annotation)",
        namespace=KUEUE_NAMESPACE,
        names=(KUEUE_CONTROLLER_NAME,),
    ),
)

#: (namespace, API group, plural, resource names) of one namespaced grant.
RoleKey = tuple[str, str, str, tuple[str, ...]]


def _grants(process: str, *, node_health: bool = False, kueue_config_write: bool = False) -> list[Access]:
    extra = (*(NODE_HEALTH_ACCESS if node_health else ()), *(KUEUE_CONFIG_WRITE_ACCESS if kueue_config_write else ()))
    return [a for a in (*PORTAL_ACCESS, *extra) if a.process == process]


def rbac_rules(process: str, *, node_health: bool = False) -> dict[tuple[str, str], set[str]]:
    """(API group, plural) → verbs of one process's cluster-wide grants (its ClusterRole), with those of
    :data:`NODE_HEALTH_ACCESS` when ``node_health``."""
    out: dict[tuple[str, str], set[str]] = {}
    for access in _grants(process, node_health=node_health):
        if not access.namespace:
            out.setdefault((access.group, access.resource.plural), set()).update(access.verbs)
    return out


def team_rules(process: str) -> dict[tuple[str, str], set[str]]:
    """(API group, plural) → verbs of one process in each team namespace (its ``-teams`` ClusterRole, bound there)."""
    out: dict[tuple[str, str], set[str]] = {}
    for access in _grants(process):
        if access.namespace == TEAMS:
            out.setdefault((access.group, access.resource.plural), set()).update(access.verbs)
    return out


def role_rules(*, kueue_config_write: bool = False) -> dict[RoleKey, set[str]]:
    """(namespace, API group, plural, resource names) → verbs of the grants in named namespaces (Roles; the worker
    holds them all), with those of :data:`KUEUE_CONFIG_WRITE_ACCESS` when ``kueue_config_write``."""
    out: dict[RoleKey, set[str]] = {}
    for access in _grants(WORKER, kueue_config_write=kueue_config_write):
        if access.namespace and access.namespace != TEAMS:
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
