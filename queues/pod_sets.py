"""A job's pod sets, as every layer sees them: the engine input, the manifests, billing and the pages.

A job's stored shape is its kind, its primary pod set (``pod_count`` x ``devices_per_pod``) and the resolved
companion pod sets of its kind (``Job.companion_pod_sets``: name, count, devices per pod, cpu and memory per
pod, filled in at submission). :func:`job_pod_sets` is the one reading of that shape: companions first, in
Kueue's order for the kind's integration, then the primary pod set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kernel.quantity import format_quantity, parse_quantity
from pools.models import ResourceClass
from pools.workload_kinds import CompanionPodSet, WorkloadKind, kind_spec
from queues.models import Job
from queues.selectors import unit_noun
from queues.spec_limits import MAX_POD_CPU, MAX_POD_MEMORY


@dataclass(frozen=True)
class PodSetShape:
    """One pod set of a job: how many pods, and what each pod asks for (quantities in Kubernetes notation)."""

    name: str
    count: int
    devices_per_pod: int
    cpu: str
    memory: str
    primary: bool

    @property
    def total_devices(self) -> int:
        """Devices the whole pod set asks for."""
        return self.count * self.devices_per_pod


def primary_requests(rc: ResourceClass, devices_per_pod: int) -> tuple[str, str]:
    """CPU and memory per pod of a pod with ``devices_per_pod`` devices of class ``rc``."""
    cpu = parse_quantity(rc.cpu_per_device, "cpu") * devices_per_pod
    memory = parse_quantity(rc.memory_per_device, "memory") * devices_per_pod
    return format_quantity(cpu, "cpu"), format_quantity(memory, "memory")


def companion_shapes(job: Job) -> tuple[PodSetShape, ...]:
    """The job's companion pod sets as resolved at submission, in Kueue's order (reads no relation)."""
    return tuple(
        PodSetShape(
            name=c["name"],
            count=int(c["count"]),
            devices_per_pod=int(c["devices_per_pod"]),
            cpu=c["cpu"],
            memory=c["memory"],
            primary=False,
        )
        for c in job.companion_pod_sets or ()
    )


def job_pod_sets(job: Job) -> tuple[PodSetShape, ...]:
    """The job's pod sets in Kueue's order: its kind's companions (as resolved at submission), then the primary."""
    cpu, memory = primary_requests(job.resource_class, job.devices_per_pod)
    primary = PodSetShape(
        name=kind_spec(job.kind).primary_pod_set,
        count=job.pod_count,
        devices_per_pod=job.devices_per_pod,
        cpu=cpu,
        memory=memory,
        primary=True,
    )
    return (*companion_shapes(job), primary)


#: The port a development session serves its notebook on (the Pod's container port and the port-forward's).
SESSION_PORT = 8888


def pod_names(job: Job) -> list[str]:
    """The job's pod names in pod-index order: ``<name>-<i>`` for one pod set, ``<name>-<pod set>-<i>`` for several.

    A development session is one plain Pod named as the job (what the cluster gets, and the simulator shows).
    """
    base = job.k8s_name or job.name
    if job.kind == WorkloadKind.SESSION:
        return [base]
    if not job.companion_pod_sets:
        return [f"{base}-{i}" for i in range(job.pod_count)]
    return [f"{base}-{ps.name}-{i}" for ps in job_pod_sets(job) for i in range(ps.count)]


@dataclass(frozen=True)
class PodSetRow:
    """A pod set as the job page and the API show it: its shape and where it was admitted (empty before)."""

    shape: PodSetShape
    flavors: tuple[str, ...]
    nodes: tuple[str, ...]


def job_pod_set_rows(job: Job) -> list[PodSetRow]:
    """Each pod set of the job with the flavors and nodes its admission (``Job.assignment``) gave it."""
    admitted = {ps.get("name"): ps for ps in (job.assignment or {}).get("podSets", [])}
    rows = []
    for shape in job_pod_sets(job):
        given = admitted.get(shape.name, {})
        flavors = tuple(sorted(set((given.get("flavors") or {}).values())))
        rows.append(PodSetRow(shape=shape, flavors=flavors, nodes=tuple(given.get("nodes") or ())))
    return rows


def pod_set_hours(job: Job, by_pod: Mapping[int, Decimal]) -> list[tuple[str, Decimal]]:
    """Metered device-hours per pod set, from the hours per pod index (pods are numbered in pod-set order)."""
    out = []
    first = 0
    for shape in job_pod_sets(job):
        out.append(
            (shape.name, sum((by_pod.get(i, Decimal(0)) for i in range(first, first + shape.count)), Decimal(0)))
        )
        first += shape.count
    return out


#: What a submission may say about one companion pod set (the rest comes from the kind's defaults).
COMPANION_FIELDS = ("count", "devices_per_pod", "cpu", "memory")


def companions_resolve(
    *,
    kind: str,
    rc: ResourceClass,
    devices_per_pod: int,
    overrides: Mapping[str, Mapping[str, Any]],
    err: Callable[[str, str], None],
) -> list[dict[str, Any]]:
    """The companion pod sets a job of ``kind`` stores (``Job.companion_pod_sets``): the kind's defaults with the
    submission's ``overrides`` (by pod set name) applied; every problem is reported through ``err("pod_sets", ...)``
    naming the pod set and the limit it breaks."""
    spec = kind_spec(kind)
    known = {c.name for c in spec.companions}
    for name in overrides:
        if name in known:
            continue
        if name == spec.primary_pod_set:
            err("pod_sets", f"{name} is the primary pod set of a {spec.label}: set it with pod_count, devices_per_pod")
        else:
            others = ", ".join(sorted(known)) or "none"
            err("pod_sets", f"a {spec.label} has no pod set {name!r} (its other pod sets: {others})")
    resolved = []
    for companion in spec.companions:
        given = dict(overrides.get(companion.name) or {})
        for key in sorted(set(given) - set(COMPANION_FIELDS)):
            err("pod_sets", f"pod set {companion.name}: unknown field {key!r} (allowed: {', '.join(COMPANION_FIELDS)})")
        resolved.append(_companion(companion, rc=rc, devices_per_pod=devices_per_pod, given=given, err=err))
    return resolved


def _companion(
    companion: CompanionPodSet,
    *,
    rc: ResourceClass,
    devices_per_pod: int,
    given: Mapping[str, Any],
    err: Callable[[str, str], None],
) -> dict[str, Any]:
    """One companion pod set, resolved and checked against the class and the pod limits."""
    name = companion.name
    count = given.get("count", companion.count)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= companion.max_count:
        err("pod_sets", f"pod set {name}: count must be between 1 and {companion.max_count}, got {count!r}")
        count = companion.count
    default_devices = devices_per_pod if companion.devices_like_primary else companion.devices_per_pod
    devices = given.get("devices_per_pod", default_devices)
    allowed = [0, *(rc.allowed_counts or [])]
    if isinstance(devices, bool) or not isinstance(devices, int) or devices not in allowed:
        err(
            "pod_sets",
            f"pod set {name}: {rc.name} allows {', '.join(map(str, allowed))} devices per pod, not {devices!r}",
        )
        devices = default_devices
    if devices:
        default_cpu, default_memory = primary_requests(rc, devices)
    else:
        default_cpu, default_memory = companion.cpu, companion.memory
    cpu = _quantity(name, "cpu", given.get("cpu", default_cpu), MAX_POD_CPU, err)
    memory = _quantity(name, "memory", given.get("memory", default_memory), MAX_POD_MEMORY, err)
    return {"name": name, "count": count, "devices_per_pod": devices, "cpu": cpu, "memory": memory}


def _quantity(name: str, resource: str, value: Any, limit: str, err: Callable[[str, str], None]) -> str:
    """A per-pod cpu or memory request in Kubernetes notation, above zero and at most ``limit``; canonical text."""
    try:
        amount = parse_quantity(value if isinstance(value, str | int) else repr(value), resource)
    except ValueError as exc:
        err("pod_sets", f"pod set {name}: {resource} {exc}")
        return str(value)
    if not 0 < amount <= parse_quantity(limit, resource):
        err("pod_sets", f"pod set {name}: {resource} must be above 0 and at most {limit}, got {value!r}")
    return format_quantity(amount, resource)


def pod_sets_phrase(shapes: Sequence[PodSetShape], unit: str) -> str:
    """The pod sets in words: "head: 1 pod (4 CPUs, 16Gi) + workers: 4 pods x 2 GPUs"."""
    parts = []
    for ps in shapes:
        pods = f"{ps.count} pod{'s' if ps.count != 1 else ''}"
        if ps.devices_per_pod:
            parts.append(f"{ps.name}: {pods} x {unit_noun(unit, ps.devices_per_pod)}")
        else:
            parts.append(f"{ps.name}: {pods} ({ps.cpu} CPU, {ps.memory} memory)")
    return " + ".join(parts)


def session_access(job: Job, *, ingress_domain: str = "") -> dict[str, str]:
    """How a researcher reaches a session: the ``kubectl port-forward`` command, and its URL (local, or the
    ingress host when the cluster's sessions are served under ``ingress_domain``)."""
    namespace = job.k8s_namespace or job.team.namespace
    pod = pod_names(job)[0]
    access = {
        "port_forward": f"kubectl -n {namespace} port-forward pod/{pod} {SESSION_PORT}:{SESSION_PORT}",
        "url": f"http://localhost:{SESSION_PORT}/",
    }
    if ingress_domain:
        access["url"] = f"https://{pod}.{ingress_domain}/"
    return access
