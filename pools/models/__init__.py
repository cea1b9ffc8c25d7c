"""Models of the resource truth: what hardware exists, where, of what kind, and whether it is usable.

``inventory`` holds the hardware and classes, ``health`` the health policy and repair; the DCGM utilisation
samples live in ``pools.gpu_usage``. Everything is importable from ``pools.models`` (migrations name the
policy's default callables by this path).
"""

from pools.gpu_usage import GpuUtilSample
from pools.models.health import (
    DeviceHealthTransition,
    HealthLevel,
    HealthObservation,
    HealthPolicy,
    HealthSignal,
    NodeHealthDirective,
    RepairTicket,
    RepairTicketEvent,
    ValidationRun,
    _default_node_condition_types,
    _default_throttle_reasons,
    _default_validation_command,
    _default_xid_action_levels,
    _default_xid_severity_levels,
)
from pools.models.inventory import (
    USABLE_HEALTH,
    Allocation,
    Cluster,
    Device,
    EngineStateChange,
    EngineStateVersion,
    HealthState,
    Node,
    ResourceClass,
    ResourceClassFlavor,
    ResourceFlavor,
    Topology,
    dns_label,
)

__all__ = [
    "USABLE_HEALTH",
    "Allocation",
    "Cluster",
    "Device",
    "DeviceHealthTransition",
    "EngineStateChange",
    "EngineStateVersion",
    "GpuUtilSample",
    "HealthLevel",
    "HealthObservation",
    "HealthPolicy",
    "HealthSignal",
    "HealthState",
    "Node",
    "NodeHealthDirective",
    "RepairTicket",
    "RepairTicketEvent",
    "ResourceClass",
    "ResourceClassFlavor",
    "ResourceFlavor",
    "Topology",
    "ValidationRun",
    "_default_node_condition_types",
    "_default_throttle_reasons",
    "_default_validation_command",
    "_default_xid_action_levels",
    "_default_xid_severity_levels",
    "dns_label",
]
