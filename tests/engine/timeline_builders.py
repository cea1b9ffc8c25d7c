"""Building scenarios with a timeline for tests: Kueue objects as manifests, events as the file writes them.

``World`` collects manifests and ``Timeline`` events, renders them as the YAML a scenario file holds and runs it
through ``loads_scenario`` / ``run_scenario`` — the path ``manage.py simulate`` takes. ``history`` reads a
workload's decisions back from the document's timeline section.
"""

from __future__ import annotations

from typing import Any

import yaml

from queues.engine.scenario import loads_scenario, parse_duration, run_scenario

KUEUE = "kueue.x-k8s.io/v1beta2"
NS = "ns"


def workload(
    name: str,
    queue: str,
    cpu: str | None = "1",
    *,
    namespace: str = NS,
    priority: int | None = None,
    pod_sets: list[dict] | None = None,
    annotations: dict[str, str] | None = None,
    min_count: int | None = None,
    count: int = 1,
) -> dict[str, Any]:
    """A Workload manifest: one pod set ``main`` of ``count`` pods asking ``cpu`` each (or ``pod_sets``)."""
    if pod_sets is None:
        ps: dict[str, Any] = {"name": "main", "count": count, "template": _template({"cpu": cpu} if cpu else {})}
        if min_count is not None:
            ps["minCount"] = min_count
        pod_sets = [ps]
    spec: dict[str, Any] = {"queueName": queue, "podSets": pod_sets}
    if priority is not None:
        spec["priority"] = priority
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": KUEUE, "kind": "Workload", "metadata": meta, "spec": spec}


def pod_set(name: str, count: int, **requests: str) -> dict[str, Any]:
    """A pod set of ``count`` pods asking ``requests`` each (``cpu="1"``)."""
    return {"name": name, "count": count, "template": _template(requests)}


def _template(requests: dict[str, str]) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": dict(requests)}}]}}


def flavor_quotas(flavor: str, **quotas: str | tuple) -> dict[str, Any]:
    """One flavor of a resource group: ``cpu="5"`` or ``cpu=("5", borrowingLimit, lendingLimit)`` (None: unset)."""
    resources = []
    for resource, quota in quotas.items():
        entry: dict[str, Any] = {"name": resource}
        nominal, borrowing, lending = (quota, None, None) if isinstance(quota, str) else (*quota, None, None)[:3]
        entry["nominalQuota"] = nominal
        if borrowing is not None:
            entry["borrowingLimit"] = borrowing
        if lending is not None:
            entry["lendingLimit"] = lending
        resources.append(entry)
    return {"name": flavor, "resources": resources}


def cluster_queue(
    name: str,
    *flavors: dict[str, Any],
    cohort: str | None = None,
    strategy: str | None = None,
    preemption: dict[str, Any] | None = None,
    stop: str | None = None,
    selector: dict[str, Any] | None = None,
    checks: list[str] | None = None,
    fungibility: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A ClusterQueue of one resource group over ``flavors`` (``flavor_quotas``), covering their resources."""
    covered: list[str] = []
    for f in flavors:
        for r in f["resources"]:
            if r["name"] not in covered:
                covered.append(r["name"])
    spec: dict[str, Any] = {"namespaceSelector": selector if selector is not None else {}}
    if flavors:
        spec["resourceGroups"] = [{"coveredResources": covered, "flavors": list(flavors)}]
    if cohort:
        spec["cohortName"] = cohort
    if strategy:
        spec["queueingStrategy"] = strategy
    if preemption:
        spec["preemption"] = preemption
    if stop:
        spec["stopPolicy"] = stop
    if checks:
        spec["admissionChecks"] = checks
    if fungibility:
        spec["flavorFungibility"] = fungibility
    return {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def cohort(name: str, *flavors: dict[str, Any], parent: str | None = None) -> dict[str, Any]:
    """A Cohort (optionally with a parent and its own quota)."""
    spec: dict[str, Any] = {}
    if parent:
        spec["parentName"] = parent
    if flavors:
        covered = sorted({r["name"] for f in flavors for r in f["resources"]})
        spec["resourceGroups"] = [{"coveredResources": covered, "flavors": list(flavors)}]
    return {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


def local_queue(name: str, cq: str, *, namespace: str = NS, stop: str | None = None) -> dict[str, Any]:
    """A LocalQueue in ``namespace`` pointing at ``cq``."""
    spec: dict[str, Any] = {"clusterQueue": cq}
    if stop:
        spec["stopPolicy"] = stop
    return {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def flavor(name: str, taint: dict[str, str] | None = None, **labels: str) -> dict[str, Any]:
    """A ResourceFlavor (``labels`` become its nodeLabels; ``taint`` a nodeTaint)."""
    spec: dict[str, Any] = {"nodeLabels": labels}
    if taint:
        spec["nodeTaints"] = [taint]
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def namespace(name: str, **labels: str) -> dict[str, Any]:
    """A Namespace with labels."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def priority_class(name: str, value: int) -> dict[str, Any]:
    """A WorkloadPriorityClass."""
    return {"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value}


def pods_ready_config(timeout: str, *, block: bool = True, limit: int | None = None, timestamp: str = "Eviction"):
    """Kueue's Configuration with waitForPodsReady as the podsready integration tests set it (backoff base 1s)."""
    strategy: dict[str, Any] = {"timestamp": timestamp, "backoffBaseSeconds": 1}
    if limit is not None:
        strategy["backoffLimitCount"] = limit
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "waitForPodsReady": {"timeout": timeout, "blockAdmission": block, "requeuingStrategy": strategy},
    }


class _Plain(yaml.SafeDumper):
    """Writes shared values again instead of as YAML aliases (scenario files do not take aliases)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


class World:
    """A scenario under construction: objects present from the start, and timeline events."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}]
        self.objects.extend(objects)
        self.events: list[dict[str, Any]] = []

    def add(self, *objects: dict[str, Any]) -> World:
        """Objects present from the start."""
        self.objects.extend(objects)
        return self

    def at(self, when: str, name: str | None = None, **event: Any) -> World:
        """An event at ``when`` (an offset): ``create=manifest``, ``patch="Kind/name", with_={...}``, ``delete=``,
        ``finish=``, ``stop=``, ``resume=``; ``subresource="status"``."""
        entry: dict[str, Any] = {"at": when}
        if name:
            entry["name"] = name
        for key, value in event.items():
            entry["with" if key == "with_" else key] = value
        self.events.append(entry)
        return self

    def text(self) -> str:
        """The scenario file."""
        docs = list(self.objects)
        if self.events:
            docs.append(
                {"apiVersion": "sim.portal/v1", "kind": "Timeline", "metadata": {"name": "t"}, "events": self.events}
            )
        return yaml.dump_all(docs, Dumper=_Plain, sort_keys=False)

    def run(self, until: str | None = None) -> dict[str, Any]:
        """``simulate --until until`` (None: ``end``) as a document."""
        scenario = loads_scenario(self.text())
        return run_scenario(scenario, mode="replay", until=None if until is None else parse_duration(until))


def row(doc: dict[str, Any], name: str, namespace: str = NS) -> dict[str, Any]:
    """The document's row of a workload."""
    key = f"{namespace}/{name}"
    return next(w for w in doc["workloads"] if w["name"] == key)


def state(doc: dict[str, Any], *names: str, namespace: str = NS) -> dict[str, str]:
    """Each workload's state at the end of the run."""
    return {n: row(doc, n, namespace)["state"] for n in names}


def history(doc: dict[str, Any], name: str, namespace: str = NS) -> list[tuple[float, str]]:
    """What happened to a workload, in order: (seconds from the start, decision)."""
    key = f"{namespace}/{name}"
    return [(d["at"], d["decision"]) for d in doc["timeline"]["decisions"] if d["workload"] == key]


def admitted_order(doc: dict[str, Any]) -> list[str]:
    """The workloads in the order they were admitted (names without namespace)."""
    return [d["workload"].split("/", 1)[1] for d in doc["timeline"]["decisions"] if d["decision"] == "admitted"]
