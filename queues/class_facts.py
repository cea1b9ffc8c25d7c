"""What every job of one resource class shares in the engine: node affinity, topology default, per-device requests.

Read once per class for an engine input of many jobs (``queues.engine_input``), and by the pod templates.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db.models import Prefetch

from kernel.quantity import parse_quantity
from pools.models import ResourceClass, ResourceClassFlavor
from queues.engine import model as m
from queues.models import Job
from queues.protection import ClassProtection, class_protection


@dataclass(frozen=True)
class ClassFacts:
    """What every job of one resource class shares in the engine: its node affinity, topology default, requests."""

    resource_name: str
    cpu_per_device: int
    memory_per_device: int
    node_affinity: tuple[m.NodeSelectorTerm, ...]
    topology_aware: bool  # a flavor of the class has a topology: ask for an unconstrained one at least
    protection: ClassProtection = field(default_factory=ClassProtection)  # what protects its jobs from preemption


def class_facts(rc: ResourceClass) -> ClassFacts:
    """The engine facts of a class (reads its flavor links: prefetch ``flavor_links__flavor`` for many classes)."""
    links = list(rc.flavor_links.all())
    return ClassFacts(
        resource_name=rc.resource_name,
        cpu_per_device=parse_quantity(rc.cpu_per_device, "cpu"),
        memory_per_device=parse_quantity(rc.memory_per_device, "memory"),
        node_affinity=_class_affinity(rc, links),
        topology_aware=any(link.flavor.topology_id for link in links),
        protection=class_protection(rc),
    )


def classes_facts(class_ids: set[int]) -> dict[int, ClassFacts]:
    """The engine facts of these classes (two queries: the classes, their flavor links with the flavors)."""
    if not class_ids:
        return {}
    links = Prefetch("flavor_links", queryset=ResourceClassFlavor.objects.select_related("flavor"))
    return {rc.pk: class_facts(rc) for rc in ResourceClass.objects.filter(pk__in=class_ids).prefetch_related(links)}


def class_node_affinity(job: Job) -> tuple[m.NodeSelectorTerm, ...]:
    """Required node affinity that keeps a job on its class's flavors (one term per flavor, ORed).

    This is how the portal confines a class in Kueue too: Kueue skips a flavor whose nodeLabels the pod's
    required affinity excludes ("flavor X doesn't match node affinity"). A minimum NVIDIA driver adds a
    ``Gt`` on the GFD driver major version (finer minimums are checked against devices by the portal).
    """
    return _class_affinity(job.resource_class, job.resource_class.flavor_links.all())


def _class_affinity(rc: ResourceClass, links: Iterable[ResourceClassFlavor]) -> tuple[m.NodeSelectorTerm, ...]:
    extra: tuple[m.NodeSelectorRequirement, ...] = ()
    minimum = rc.min_driver_version
    if minimum and rc.resource_name.startswith("nvidia.com/"):
        major = int(minimum.split(".")[0])
        extra = (m.NodeSelectorRequirement("nvidia.com/cuda.driver-version.major", "Gt", (str(major - 1),)),)
    terms = []
    for link in links:
        labels = link.flavor.node_labels or {}
        exprs = tuple(m.NodeSelectorRequirement(k, "In", (v,)) for k, v in sorted(labels.items()))
        terms.append(m.NodeSelectorTerm(match_expressions=exprs + extra))
    return tuple(terms)
