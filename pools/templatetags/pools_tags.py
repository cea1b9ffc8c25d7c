"""Template helpers of the pool pages: the words and tooltips of a device grid."""

from __future__ import annotations

import json

from django import template

from kernel.labels import state_words
from kernel.quantity import gib
from pools.health.catalog import action_words
from pools.models import HealthState, RepairTicket

register = template.Library()

#: Every state a grid cell can have (pools.selectors.DeviceCell.state), with its legend text.
CELL_STATES: dict[str, str] = {
    "free": "Free",
    "in-use": "In use",
    "degraded": "Degraded (used last)",
    "unhealthy": "Unhealthy (excluded)",
    "quarantined": "Quarantined",
    "validating": "Validating",
    "retired": "Retired",
    "cordoned": "Node cordoned",
    "not-ready": "Node not ready",
}


@register.filter
def state_label(state: str) -> str:
    """The words for a cell state ("in-use" → "In use")."""
    return CELL_STATES.get(state, state.replace("-", " ").capitalize())


@register.filter
def health_words(state: str) -> str:
    """A device health state in words (``quarantined`` → "quarantined"; never the internal value)."""
    return state_words(HealthState, state) if state else ""


@register.filter
def ticket_state_words(state: str) -> str:
    """A repair ticket state in words (``in_repair`` → "in repair")."""
    return state_words(RepairTicket.State, state) if state else ""


register.filter("action_words", action_words)


@register.simple_tag
def cell_states() -> list[tuple[str, str]]:
    """(state, label) pairs for the legend, in display order."""
    return list(CELL_STATES.items())


def _unit_name(device) -> str:
    if device.kind == "mig":  # a partition of a card: NVIDIA's MIG, AMD's compute partitions, Neuron's cores
        if device.vendor == "nvidia":
            return f"MIG {device.mig_profile}".strip()
        if device.mig_profile == "neuroncore":
            return f"NeuronCore {device.index}" if device.index is not None else "NeuronCore"
        return f"Partition {device.mig_profile.replace('_', ' / ').upper()}".strip()
    if device.kind == "shared":
        return f"Replica {device.replica_index}" if device.replica_index is not None else "Replica"
    return f"GPU {device.index}" if device.index is not None else "Device"


@register.filter
def cell_title(cell) -> str:
    """The tooltip of one grid cell: unit, product, key/UUID, memory, resource, state and reason, holding job."""
    device = cell.device
    lines = [" · ".join(p for p in (_unit_name(device), device.product) if p)]
    lines.append(device.uuid or device.key)
    details = [p for p in (gib(device.memory_bytes), device.resource_name or "partitioned card") if p]
    lines.append(" · ".join(details))
    if cell.children:
        # A partitioned or shared card is never allocated itself: say how it is and how busy its units are.
        state = device.get_health_display()
    elif cell.job_label:
        state = f"In use by {cell.job_label}"
    else:
        state = state_label(cell.state)
    lines.append(f"{state}: {device.health_reason}" if device.health_reason else state)
    if cell.children:
        held = sum(1 for c in cell.children if c.state == "in-use")
        lines.append(f"{len(cell.children)} units, {held} in use")
    return "\n".join(lines)


@register.filter
def evidence_rows(evidence: dict | None) -> list[tuple[str, str]]:
    """A ticket's evidence as (label, value) rows: keys in words, nested values as compact JSON."""
    rows = []
    for key, value in (evidence or {}).items():
        label = str(key).replace("_", " ").strip().capitalize()
        if isinstance(value, dict | list):
            text = json.dumps(value, sort_keys=True, default=str, separators=(", ", ": "))
        else:
            text = "—" if value in (None, "") else str(value)
        rows.append((label, text))
    return rows
