"""Parse what ``kubectl get -o yaml|json`` prints into plain records: pure functions, no ORM.

Accepted input: Node objects, DRA ResourceSlices and DeviceTaintRules, alone or in ``kind: List`` (or typed
``NodeList``…) wrappers, as multi-document YAML or JSON. Other kinds are counted as ignored. Everything is
validated before anything is returned: a malformed object raises :class:`InventoryError` naming the object
and the field path, e.g. ``Node "gpu-1": status.capacity["nvidia.com/gpu"]: invalid quantity "eight"``.

A node with device-plugin capacity *and* DRA slices is not counted twice: for a vendor whose devices the
slices describe, the slices win and that vendor's device-plugin units on the node are dropped (the DRA
driver and the device plugin must not manage the same GPUs; when both show up we trust the one with UUIDs).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from kernel import safe_yaml
from kernel.quantity import is_device_resource, parse_decimal, parse_quantity
from pools.inventory.device_plugin import plugin_devices
from pools.inventory.dra import slice_devices, taint_text
from pools.inventory.records import (
    DEVICE_FIELD_MAX,
    MAX_DEVICES_PER_NODE,
    MAX_INDEX,
    MAX_UNITS_PER_RESOURCE,
    NVIDIA,
    UNHEALTHY,
    Document,
    InventoryError,
    ParsedDevice,
    ParsedInventory,
    ParsedNode,
    node_name_problem,
)

__all__ = [
    "Document",
    "InventoryError",
    "ParsedDevice",
    "ParsedInventory",
    "ParsedNode",
    "load_file",
    "load_text",
    "parse_inventory",
]

NODE_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
#: Node taints that say the node's accelerators are broken, by the vendor they concern: the keys NVSentinel's
#: fault quarantine documents and tests (docs/INTEGRATIONS.md, "Default Taint Examples": GPU XID errors, NVLink
#: failures, syslog-detected XIDs, generic GPU errors; value ``true``, effect NoSchedule). Only a NoSchedule or
#: NoExecute taint excludes the devices: NVSentinel uses PreferNoSchedule for "degraded state or warnings", and
#: kube-scheduler still places pods there. ``nvidia.com/gpu=present:NoSchedule`` only reserves GPU nodes for GPU
#: pods: it is not one of them.
HEALTH_TAINTS = {
    "nvidia.com/gpu-xid-error": NVIDIA,
    "nvidia.com/gpu-nvlink-error": NVIDIA,
    "nvidia.com/syslog-xid-error": NVIDIA,
    "nvidia.com/gpu-error": NVIDIA,
}
HEALTH_TAINT_EFFECTS = ("NoSchedule", "NoExecute")
CONDITION_FIELDS = ("type", "status", "reason", "message", "lastTransitionTime")
#: The annotation NVSentinel's fault-quarantine module puts on a node it cordons: the health event, as JSON.
QUARANTINE_ANNOTATION = "quarantineHealthEvent"


# --- loading -------------------------------------------------------------------------------------------------


def load_text(text: str, *, origin: str = "", json_only: bool = False) -> list[Document]:
    """The documents of a YAML (multi-document) or JSON text, each with its position for messages."""
    try:
        if json_only:
            loaded = json.loads(text)
            raw = loaded if isinstance(loaded, list) else [loaded]
        else:
            raw = safe_yaml.safe_load_all(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise InventoryError(origin or "input", "", f"not valid {'JSON' if json_only else 'YAML'}: {exc}") from None
    except RecursionError:
        raise InventoryError(origin or "input", "", "nested too deeply for a Kubernetes object") from None
    return [Document(obj=obj, origin=origin, position=f"document {i + 1}") for i, obj in enumerate(raw)]


def load_file(path: str | Path) -> list[Document]:
    """The documents of a ``.yaml``/``.yml``/``.json`` file (JSON is read as JSON, the rest as YAML)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InventoryError(str(path), "", f"cannot read: {exc}") from None
    return load_text(text, origin=str(path), json_only=path.suffix.lower() == ".json")


def _documents(objects: Iterable[Any]) -> list[Document]:
    """Wrap bare objects as documents ("object 3"); documents pass through."""
    return [
        o if isinstance(o, Document) else Document(obj=o, position=f"object {i + 1}") for i, o in enumerate(objects)
    ]


def _flatten(docs: Iterable[Document]) -> list[Document]:
    """Kubernetes objects with every ``List`` expanded; empty YAML documents dropped."""
    out: list[Document] = []
    for doc in docs:
        obj = doc.obj
        if obj is None:
            continue
        if not isinstance(obj, dict):
            raise InventoryError(
                doc.describe(), "", f"expected a Kubernetes object (a mapping), got {type(obj).__name__}"
            )
        kind = obj.get("kind")
        if not isinstance(kind, str) or not kind:
            raise InventoryError(doc.describe(), "kind", "missing: not a Kubernetes object")
        if kind.endswith("List") and "items" in obj:
            items = obj["items"]
            if not isinstance(items, list):
                raise InventoryError(doc.describe(kind), "items", "expected a list")
            item_kind = kind.removesuffix("List")
            children = []
            for i, item in enumerate(items):
                if isinstance(item, dict) and "kind" not in item and item_kind:
                    item = {"kind": item_kind, **item}  # typed lists (NodeList) leave kind off their items
                children.append(Document(obj=item, origin=doc.origin, position=f"{doc.position}, item {i + 1}"))
            out += _flatten(children)
            continue
        out.append(doc)
    return out


# --- nodes ---------------------------------------------------------------------------------------------------


def _quoted(value: Any) -> str:
    """A value as it should appear in a message: strings in double quotes."""
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _map(value: Any, where: str, path: str) -> dict:
    """A mapping at ``path`` (empty when absent)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InventoryError(where, path, f"expected a mapping, got {_quoted(value)}")
    return value


def _labels(raw: Any, where: str) -> dict[str, str]:
    """Labels as strings (hand-written YAML may leave numbers and booleans unquoted)."""
    out = {}
    for key, value in _map(raw, where, "metadata.labels").items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif value is None:
            value = ""
        elif isinstance(value, int | float):
            value = str(value)
        elif not isinstance(value, str):
            raise InventoryError(where, f'metadata.labels["{key}"]', f"expected a string, got {_quoted(value)}")
        out[str(key)] = value
    return out


def _quantities(raw: Any, where: str, path: str) -> tuple[dict[str, str], dict[str, int]]:
    """Resource quantities as strings (stored) and as canonical integers (counted); each one validated."""
    strings, numbers = {}, {}
    for resource, value in _map(raw, where, path).items():
        field_path = f'{path}["{resource}"]'
        try:
            numbers[resource] = parse_quantity(value, resource)
        except ValueError:
            raise InventoryError(where, field_path, f"invalid quantity {_quoted(value)}") from None
        if is_device_resource(str(resource)):
            # Kubernetes accepts only whole numbers for extended resources: "8.5" or "8500m" is not a GPU count
            if parse_decimal(value) != numbers[resource]:
                raise InventoryError(where, field_path, f"{_quoted(value)} is not a whole number of devices")
            if numbers[resource] > MAX_UNITS_PER_RESOURCE:
                raise InventoryError(
                    where, field_path, f"{numbers[resource]} devices, at most {MAX_UNITS_PER_RESOURCE} on a node"
                )
        strings[resource] = str(value)
    return strings, numbers


def _node_taints(raw: Any, where: str) -> list[dict[str, Any]]:
    """Node taints, each with a key and a known effect."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InventoryError(where, "spec.taints", f"expected a list, got {_quoted(raw)}")
    out = []
    for i, taint in enumerate(raw):
        path = f"spec.taints[{i}]"
        taint = _map(taint, where, path)
        if not isinstance(taint.get("key"), str) or not taint["key"]:
            raise InventoryError(where, f"{path}.key", "missing")
        if taint.get("effect") not in NODE_TAINT_EFFECTS:
            raise InventoryError(
                where,
                f"{path}.effect",
                f"expected one of {', '.join(NODE_TAINT_EFFECTS)}, got {_quoted(taint.get('effect'))}",
            )
        out.append({k: taint[k] for k in ("key", "value", "effect", "timeAdded") if k in taint})
    return out


def _conditions(raw: Any, where: str) -> list[dict[str, Any]]:
    """Conditions without their heartbeat times, which change on every report and would make every import a write."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InventoryError(where, "status.conditions", f"expected a list, got {_quoted(raw)}")
    out = []
    for i, cond in enumerate(raw):
        cond = _map(cond, where, f"status.conditions[{i}]")
        for key in ("type", "status"):
            if not isinstance(cond.get(key), str):
                raise InventoryError(where, f"status.conditions[{i}].{key}", "missing")
        out.append({k: cond[k] for k in CONDITION_FIELDS if k in cond})
    return out


def _parse_node(doc: Document) -> tuple[ParsedNode, dict[str, int], dict[str, int], str]:
    """A Node, its capacity and allocatable as integers, and how to name it in messages."""
    obj = doc.obj
    meta = _map(obj.get("metadata"), doc.describe("Node"), "metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise InventoryError(doc.describe("Node"), "metadata.name", "missing")
    if problem := node_name_problem(name):
        raise InventoryError(doc.describe("Node", name[:80]), "metadata.name", problem)
    where = doc.describe("Node", name)
    spec = _map(obj.get("spec"), where, "spec")
    status = _map(obj.get("status"), where, "status")
    unschedulable = spec.get("unschedulable", False)
    if not isinstance(unschedulable, bool):
        raise InventoryError(where, "spec.unschedulable", f"expected true or false, got {_quoted(unschedulable)}")
    capacity, cap_n = _quantities(status.get("capacity"), where, "status.capacity")
    allocatable, alloc_n = _quantities(status.get("allocatable"), where, "status.allocatable")
    conditions = _conditions(status.get("conditions"), where)
    ready_condition = next((c for c in conditions if c["type"] == "Ready"), None)
    annotations = _map(meta.get("annotations"), where, "metadata.annotations")
    node = ParsedNode(
        name=name,
        labels=_labels(meta.get("labels"), where),
        taints=_node_taints(spec.get("taints"), where),
        conditions=conditions,
        # A node without a Ready condition (a hand-made excerpt) is taken as ready; kubectl always prints one.
        ready=ready_condition is None or ready_condition["status"] == "True",
        unschedulable=unschedulable,
        quarantine=_quarantine(annotations.get(QUARANTINE_ANNOTATION)) if unschedulable else "",
        capacity=capacity,
        allocatable=allocatable,
    )
    return node, cap_n, alloc_n, where


def _quarantine(event: Any) -> str:
    """What a fault-quarantine health event says, in a few words ("" without one).

    NVSentinel writes the event as JSON (a health event or a list of them); the check name, error codes and
    message are quoted when present, and an event we cannot read still counts as a quarantine.
    """
    if event is None or event == "":
        return ""
    try:
        loaded = json.loads(event) if isinstance(event, str) else event
    except json.JSONDecodeError:
        return "NVSentinel fault quarantine"
    events = loaded if isinstance(loaded, list) else [loaded]
    parts = []
    for item in events:
        if not isinstance(item, dict):
            continue
        codes = item.get("errorCode")
        codes = ", ".join(str(c) for c in codes) if isinstance(codes, list) else str(codes or "")
        words = [str(item.get(k) or "") for k in ("checkName", "message")]
        parts.append(" ".join(w for w in [words[0], codes, words[1]] if w))
    detail = "; ".join(p for p in parts if p)
    return "NVSentinel fault quarantine" + (f": {detail}" if detail else "")


# --- the whole input -----------------------------------------------------------------------------------------


def parse_inventory(objects: Iterable[Any]) -> ParsedInventory:
    """Nodes and devices of a set of Kubernetes objects (dicts or :class:`Document`), validated as a whole."""
    inv = ParsedInventory()

    def ignore(what: str, n: int) -> None:
        if n:
            inv.ignored[what] = inv.ignored.get(what, 0) + n

    node_docs, slices, rules = [], [], []
    for doc in _flatten(_documents(objects)):
        kind, api = doc.obj["kind"], str(doc.obj.get("apiVersion", ""))
        if kind == "Node" and api in ("", "v1"):
            node_docs.append(doc)
        elif kind == "ResourceSlice" and (not api or api.startswith("resource.k8s.io/")):
            slices.append(doc)
        elif kind == "DeviceTaintRule":
            rules.append(doc)
        else:
            ignore(kind, 1)

    plugin: dict[str, list[ParsedDevice]] = {}
    where_of: dict[str, str] = {}
    for doc in node_docs:
        node, cap_n, alloc_n, where = _parse_node(doc)
        if node.name in where_of:
            raise InventoryError(where, "metadata.name", f"the same node appears twice (also {where_of[node.name]})")
        where_of[node.name] = where
        inv.nodes.append(node)
        plugin[node.name] = plugin_devices(
            node, capacity=cap_n, allocatable=alloc_n, where=where, warn=inv.warnings.append
        )

    dra_devices, node_slice = slice_devices(slices, rules, warn=inv.warnings.append, ignore=ignore)
    described = {(d.node, d.vendor) for d in dra_devices}
    for node in inv.nodes:
        kept = [d for d in plugin[node.name] if (d.node, d.vendor) not in described]
        dropped = sum(1 for d in plugin[node.name] if d.resource_name and (d.node, d.vendor) in described)
        if dropped:
            inv.warnings.append(
                f"{where_of[node.name]}: {dropped} device-plugin units ignored: ResourceSlices describe this node's "
                f"devices (DRA wins)"
            )
        inv.devices += kept
    for name in sorted({d.node for d in dra_devices} - set(where_of)):
        inv.nodes.append(ParsedNode(name=name, observed=False))
        where_of[name] = node_slice.get(name, f'node "{name}"')
    inv.devices += dra_devices

    by_node = inv.devices_by_node()
    for node in inv.nodes:
        devices = by_node.get(node.name, [])
        _check_limits(node, devices, where_of[node.name])
        _apply_health_taints(node, devices)
        _settle_health(devices, where_of[node.name])
    return inv


def _check_limits(node: ParsedNode, devices: list[ParsedDevice], where: str) -> None:
    """Refuse what no real cluster produces and the database could not store: bad names, too many, too long."""
    if problem := node_name_problem(node.name):  # a node known from its slices: spec.nodeName
        raise InventoryError(where[:200], "spec.nodeName", problem)
    if len(devices) > MAX_DEVICES_PER_NODE:
        raise InventoryError(where, "", f"{len(devices)} devices on one node, at most {MAX_DEVICES_PER_NODE}")
    for device in devices:
        for name, limit in DEVICE_FIELD_MAX.items():
            value = getattr(device, name)
            if len(value) > limit:
                raise InventoryError(
                    where, f"device {device.key[:80]!r} {name}", f"{len(value)} characters, at most {limit}"
                )
        for name in ("index", "replica_index"):
            value = getattr(device, name)
            if value is not None and not 0 <= value <= MAX_INDEX:
                raise InventoryError(where, f"device {device.key!r} {name}", f"{value} is out of range")


def _apply_health_taints(node: ParsedNode, devices: list[ParsedDevice]) -> None:
    """Health taints on a node make its devices of that vendor unhealthy; so does a fault-quarantine cordon."""
    if node.quarantine:
        for device in devices:
            if device.vendor == NVIDIA:
                device.mark_unhealthy(f"node quarantined ({node.quarantine})")
    for taint in node.taints:
        vendor = HEALTH_TAINTS.get(taint["key"])
        if vendor is None or taint["effect"] not in HEALTH_TAINT_EFFECTS:
            continue
        for device in devices:
            if device.vendor == vendor:
                device.mark_unhealthy(f"node taint {taint_text(taint)}")


def _settle_health(devices: list[ParsedDevice], where: str) -> None:
    """An unhealthy card makes its units unhealthy; a card whose every unit is unhealthy is unhealthy."""
    by_key = {d.key: d for d in devices}
    children: dict[str, list[ParsedDevice]] = {}
    for device in devices:
        if device.parent_key:
            if device.parent_key not in by_key:
                raise InventoryError(
                    where, "", f"device {device.key!r} refers to a missing parent {device.parent_key!r}"
                )
            children.setdefault(device.parent_key, []).append(device)

    def depth(device: ParsedDevice) -> int:
        n = 0
        while device.parent_key:
            device, n = by_key[device.parent_key], n + 1
        return n

    ordered = sorted(devices, key=depth)
    for device in ordered:  # top down
        parent = by_key.get(device.parent_key or "")
        if parent is not None and parent.health == UNHEALTHY:
            device.mark_unhealthy(parent.health_reason)
    for device in reversed(ordered):  # bottom up
        kids = children.get(device.key)
        if kids and all(k.health == UNHEALTHY for k in kids):
            device.mark_unhealthy(f"every unit of this card is unhealthy ({kids[0].health_reason})")
