"""Plain records the parser produces (no ORM): nodes, devices, and the error that names a bad field."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kernel.errors import DomainError
from kernel.k8s_names import DNS_SUBDOMAIN_MAX, dns_subdomain_problem
from kernel.quantity import MAX_NODE_DEVICE_UNITS

# Values of pools.models.Device / HealthState, repeated here so parsing needs no Django.
NVIDIA, AMD, INTEL, HABANA, AWS_NEURON, GOOGLE_TPU = "nvidia", "amd", "intel", "habana", "aws-neuron", "google-tpu"
FULL, MIG, SHARED = "full", "mig", "shared"
DEVICE_PLUGIN, DRA = "device-plugin", "dra"
HEALTHY, UNHEALTHY = "healthy", "unhealthy"

#: Health reasons this importer writes start with one of these; only such a reason is cleared when the
#: source reports the device healthy again (a reason from DCGM or an operator is left alone).
SOURCE_REASON_PREFIXES = (
    "node allocatable ",
    "node capacity ",
    "node taint ",
    "node quarantined ",
    "DRA device taint ",
    "DeviceTaintRule ",
    "every unit of this card ",
)


#: The health reasons that say the device plugin itself reported the units missing or unhealthy (allocatable
#: below capacity, or capacity below the card count).
DEVICE_PLUGIN_REASON_PREFIXES = ("node allocatable ", "node capacity ")


def is_device_plugin_reason(reason: str) -> bool:
    """Whether a health reason says the device plugin marked the unit unhealthy (what the node itself reports)."""
    return reason.startswith(DEVICE_PLUGIN_REASON_PREFIXES)


#: What a real cluster can produce, and no more: larger values are refused naming the object and the field.
#: A Node name is an RFC 1123 DNS subdomain of at most 253 characters (what the API server accepts).
NODE_NAME_MAX = DNS_SUBDOMAIN_MAX
#: Schedulable units of one extended resource on a node (see kernel.quantity).
MAX_UNITS_PER_RESOURCE = MAX_NODE_DEVICE_UNITS
#: Physical accelerator cards a node can hold (``nvidia.com/gpu.count``; the largest servers have 16).
MAX_CARDS_PER_NODE = 64
#: Devices (cards and their units, every vendor) on one node.
MAX_DEVICES_PER_NODE = 8192
#: Longest stored value of each device field: the max_length of ``pools.models.Device`` (a test checks they match).
DEVICE_FIELD_MAX = {
    "key": 200,
    "uuid": 100,
    "product": 200,
    "architecture": 60,
    "driver_version": 40,
    "cuda_version": 40,
    "resource_name": 253,
    "mig_profile": 40,
    "dra_driver": 253,
    "dra_pool": 253,
    "dra_device": 253,
}
#: Largest device index or replica index (``PositiveIntegerField``).
MAX_INDEX = 2**31 - 1


def node_name_problem(name: str) -> str:
    """Why Kubernetes would reject a node name, or "" when it is valid."""
    return dns_subdomain_problem(name)


def is_source_reason(reason: str) -> bool:
    """Whether a health reason was written by the inventory import (and may be cleared by it)."""
    return reason.startswith(SOURCE_REASON_PREFIXES)


class InventoryError(DomainError):
    """Malformed inventory input; the message names the object and the field path."""

    def __init__(self, obj: str, path: str, problem: str) -> None:
        self.obj = obj
        self.path = path
        self.problem = problem
        text = f"{obj}: {path}: {problem}" if path else f"{obj}: {problem}"
        super().__init__(text, field=path or None)

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Document:
    """One object to import and where it came from (file, document and List item), for error messages."""

    obj: Any
    origin: str = ""
    position: str = ""

    def describe(self, kind: str = "", name: str = "") -> str:
        """'Node "gpu-1"' when the object has a name, else its position; prefixed by the file if known."""
        if name:
            text = f'{kind or "object"} "{name}"'
        else:
            text = f"{self.position or 'object'}" + (f" ({kind})" if kind else "")
        return f"{self.origin}: {text}" if self.origin else text


@dataclass
class ParsedNode:
    """A Kubernetes Node as the import stores it; ``observed`` is False for a node known only from its slices."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, Any]] = field(default_factory=list)
    conditions: list[dict[str, Any]] = field(default_factory=list)
    ready: bool = True
    unschedulable: bool = False
    #: Why a fault-quarantine controller (NVSentinel) cordoned the node, "" when it did not.
    quarantine: str = ""
    capacity: dict[str, str] = field(default_factory=dict)
    allocatable: dict[str, str] = field(default_factory=dict)
    observed: bool = True


@dataclass
class ParsedDevice:
    """One accelerator unit (or a partitioned / shared physical card) found on a node."""

    node: str
    key: str
    vendor: str
    resource_name: str
    kind: str = FULL
    uuid: str = ""
    product: str = ""
    index: int | None = None
    memory_bytes: int | None = None
    architecture: str = ""
    driver_version: str = ""
    cuda_version: str = ""
    parent_key: str | None = None
    mig_profile: str = ""
    replica_index: int | None = None
    health: str = HEALTHY
    health_reason: str = ""
    source: str = DEVICE_PLUGIN
    dra_driver: str = ""
    dra_pool: str = ""
    dra_device: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)
    taints: list[dict[str, Any]] = field(default_factory=list)

    def mark_unhealthy(self, reason: str) -> None:
        """Mark the unit unhealthy; the first reason found is kept."""
        if self.health != UNHEALTHY:
            self.health = UNHEALTHY
            self.health_reason = reason[:300]


@dataclass
class ParsedInventory:
    """Everything an input describes: nodes, their devices, what was skipped and why."""

    nodes: list[ParsedNode] = field(default_factory=list)
    devices: list[ParsedDevice] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    ignored: dict[str, int] = field(default_factory=dict)

    def devices_by_node(self) -> dict[str, list[ParsedDevice]]:
        """Devices grouped by node name, in input order."""
        out: dict[str, list[ParsedDevice]] = {}
        for device in self.devices:
            out.setdefault(device.node, []).append(device)
        return out
