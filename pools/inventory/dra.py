"""Devices from DRA ResourceSlices (``resource.k8s.io/v1``; the v1beta1 ``basic`` and v1beta2 shapes too).

Only NVIDIA's ``gpu.nvidia.com`` driver describes GPUs we import: ``type: gpu`` and ``type: mig`` devices,
keyed by their ``uuid`` attribute (else ``<driver>/<pool>/<device>``). ``compute-domain.nvidia.com`` slices
hold IMEX channels and daemons, not GPUs, and are skipped. The resource name a DRA device is scheduled as is
``nvidia.com/gpu`` for a GPU and ``nvidia.com/mig-<profile>`` for a MIG device: the names the reference
DeviceClasses bridge to (``extendedResourceName: nvidia.com/gpu`` on ``gpu.nvidia.com``, one per-profile
class such as ``nvidia.com/mig-1g.12gb``), which are also the device plugin's names.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from kernel.quantity import parse_quantity
from pools.inventory.records import DRA, FULL, MIG, NVIDIA, Document, InventoryError, ParsedDevice

GPU_DRIVER = "gpu.nvidia.com"
#: Drivers whose slices are known and hold no accelerators.
NOT_ACCELERATORS = {"compute-domain.nvidia.com": "IMEX channels and daemons, not GPUs"}
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
ATTRIBUTE_TYPES = ("string", "int", "bool", "version")
_GPU_NAME = re.compile(r"^gpu-(\d+)$")

Warn = Callable[[str], None]
Ignore = Callable[[str, int], None]


def _map(value: Any, where: str, path: str, *, required: bool = False) -> dict:
    """A mapping at ``path`` (empty when absent and optional)."""
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise InventoryError(where, path, "missing" if value is None else f"expected a mapping, got {value!r}")
    return value


def _list(value: Any, where: str, path: str) -> list:
    """A list at ``path`` (empty when absent)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise InventoryError(where, path, f"expected a list, got {value!r}")
    return value


def _str(value: Any, where: str, path: str, *, required: bool = False) -> str:
    """A string at ``path``."""
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise InventoryError(where, path, "missing" if value in (None, "") else f"expected a string, got {value!r}")
    return value


def _attributes(raw: Any, where: str, path: str, driver: str) -> dict[str, Any]:
    """Attribute values without their type wrapper ({"string": "gpu"} → "gpu"); the driver's own prefix dropped."""
    out = {}
    for name, wrapped in _map(raw, where, path).items():
        typed = _map(wrapped, where, f"{path}.{name}", required=True)
        kinds = [k for k in ATTRIBUTE_TYPES if k in typed]
        if len(kinds) != 1:
            raise InventoryError(where, f"{path}.{name}", f"expected exactly one of {', '.join(ATTRIBUTE_TYPES)}")
        value = typed[kinds[0]]
        if kinds[0] in ("string", "version") and not isinstance(value, str):
            raise InventoryError(where, f"{path}.{name}.{kinds[0]}", f"expected a string, got {value!r}")
        out[name.removeprefix(f"{driver}/")] = value
    return out


def _capacity(raw: Any, where: str, path: str) -> dict[str, str]:
    """Capacity quantities as strings, validated (v1: ``{value: q}``; a bare quantity is accepted too)."""
    out = {}
    for name, entry in _map(raw, where, path).items():
        value = entry.get("value") if isinstance(entry, dict) else entry
        try:
            parse_quantity(value, "memory" if name == "memory" else name)
        except ValueError:
            raise InventoryError(where, f"{path}.{name}.value", f"invalid quantity {value!r}") from None
        out[name] = str(value)
    return out


def _taint(raw: Any, where: str, path: str) -> dict[str, Any]:
    """A device taint as given, with a key and an effect."""
    taint = _map(raw, where, path, required=True)
    _str(taint.get("key"), where, f"{path}.key", required=True)
    _str(taint.get("effect"), where, f"{path}.effect", required=True)
    return {k: taint[k] for k in ("key", "value", "effect", "timeAdded") if k in taint}


def _taints(raw: Any, where: str, path: str) -> list[dict[str, Any]]:
    """Device taints as given."""
    return [_taint(taint, where, f"{path}[{i}]") for i, taint in enumerate(_list(raw, where, path))]


def taint_text(taint: dict[str, Any]) -> str:
    """``key=value:Effect`` as kubectl prints a taint."""
    value = f"={taint['value']}" if taint.get("value") not in (None, "") else ""
    return f"{taint['key']}{value}:{taint['effect']}"


def slice_devices(
    slices: list[Document], rules: list[Document], *, warn: Warn, ignore: Ignore
) -> tuple[list[ParsedDevice], dict[str, str]]:
    """GPU and MIG devices of every slice (latest pool generation), taint rules applied; and each node's first slice."""
    parsed = [_slice_header(doc, warn) for doc in slices]
    latest: dict[tuple[str, str], int] = {}
    for header in parsed:
        if header:
            key = (header["driver"], header["pool"])
            latest[key] = max(latest.get(key, header["generation"]), header["generation"])
    devices: list[ParsedDevice] = []
    seen: dict[tuple[str, str], str] = {}
    node_slice: dict[str, str] = {}
    for header in parsed:
        if not header:
            continue
        if header["generation"] < latest[(header["driver"], header["pool"])]:
            ignore("ResourceSlice of an older pool generation", 1)
            continue
        where, driver, spec = header["where"], header["driver"], header["spec"]
        entries = _list(spec.get("devices"), where, "spec.devices")
        if driver in NOT_ACCELERATORS:
            ignore(f"{driver} device ({NOT_ACCELERATORS[driver]})", len(entries))
            continue
        if driver != GPU_DRIVER:
            warn(f"{where}: DRA driver {driver!r} is not known to the inventory: {len(entries)} devices not imported")
            continue
        node_slice.setdefault(header["node"], where)
        for i, entry in enumerate(entries):
            device = _gpu_device(entry, header, f"spec.devices[{i}]", ignore)
            if device is None:
                continue
            where_key = seen.get((device.node, device.key))
            if where_key:
                raise InventoryError(
                    where, f"spec.devices[{i}]", f"device {device.key!r} on node {device.node!r} already in {where_key}"
                )
            seen[(device.node, device.key)] = f"{where} spec.devices[{i}]"
            devices.append(device)
    devices = _link_parents(devices)
    _apply_rules(devices, rules, warn)
    return devices, node_slice


def _slice_header(doc: Document, warn: Warn) -> dict[str, Any] | None:
    """Driver, node, pool and generation of a slice; None for a slice not tied to a node."""
    obj = doc.obj
    name = obj.get("metadata", {}).get("name", "") if isinstance(obj.get("metadata"), dict) else ""
    where = doc.describe("ResourceSlice", name if isinstance(name, str) else "")
    spec = _map(obj.get("spec"), where, "spec", required=True)
    driver = _str(spec.get("driver"), where, "spec.driver", required=True)
    node = _str(spec.get("nodeName"), where, "spec.nodeName")
    if not node:
        warn(f"{where}: no spec.nodeName (an allNodes / nodeSelector pool): devices not on one node are not imported")
        return None
    pool = _map(spec.get("pool"), where, "spec.pool")
    generation = pool.get("generation", 0)
    if not isinstance(generation, int) or isinstance(generation, bool):
        raise InventoryError(where, "spec.pool.generation", f"expected an integer, got {generation!r}")
    pool_name = _str(pool.get("name"), where, "spec.pool.name") or node
    return {"where": where, "driver": driver, "node": node, "pool": pool_name, "generation": generation, "spec": spec}


def _gpu_device(entry: Any, header: dict[str, Any], path: str, ignore: Ignore) -> ParsedDevice | None:
    """One ``gpu.nvidia.com`` device; None (counted as ignored) for types other than gpu and mig."""
    where, driver = header["where"], header["driver"]
    entry = _map(entry, where, path, required=True)
    name = _str(entry.get("name"), where, f"{path}.name", required=True)
    body = entry["basic"] if isinstance(entry.get("basic"), dict) else entry  # v1beta1 nests under "basic"
    body_path = f"{path}.basic" if body is not entry else path
    attrs = _attributes(body.get("attributes"), where, f"{body_path}.attributes", driver)
    capacity = _capacity(body.get("capacity"), where, f"{body_path}.capacity")
    taints = _taints(body.get("taints", entry.get("taints")), where, f"{body_path}.taints")
    kind = attrs.get("type")
    if kind not in ("gpu", "mig"):
        ignore(f"{driver} device of type {kind or 'unknown'}", 1)
        return None
    uuid = str(attrs.get("uuid", ""))
    product = str(attrs.get("productName", ""))
    device = ParsedDevice(
        node=header["node"],
        key=uuid or f"{driver}/{header['pool']}/{name}",
        uuid=uuid,
        vendor=NVIDIA,
        resource_name="nvidia.com/gpu",
        kind=FULL,
        product=product,
        memory_bytes=parse_quantity(capacity["memory"], "memory") if "memory" in capacity else None,
        architecture=str(attrs.get("architecture", "")),
        driver_version=str(attrs.get("driverVersion", "")),
        cuda_version=str(attrs.get("cudaDriverVersion", "")),
        source=DRA,
        dra_driver=driver,
        dra_pool=header["pool"],
        dra_device=name,
        attributes={**attrs, **{f"capacity.{k}": v for k, v in capacity.items() if k != "memory"}},
        taints=taints,
    )
    if kind == "gpu":
        match = _GPU_NAME.match(name)
        device.index = int(match[1]) if match else None
    else:
        profile = _str(attrs.get("profile"), where, f"{body_path}.attributes.profile", required=True)
        device.kind, device.mig_profile = MIG, profile
        device.resource_name = f"nvidia.com/mig-{profile}"
        device.parent_key = str(attrs.get("parentUUID", "")) or None
        device.product = f"{product} MIG {profile}" if product else f"MIG {profile}"
    for taint in taints:
        if taint["effect"] in BLOCKING_EFFECTS:
            device.mark_unhealthy(f"DRA device taint {taint_text(taint)}")
    return device


def _link_parents(devices: list[ParsedDevice]) -> list[ParsedDevice]:
    """Partitioned GPUs lose their resource name; a MIG device whose GPU is not in the slice gets a stand-in parent."""
    by_key = {(d.node, d.key): d for d in devices}
    stand_ins: dict[tuple[str, str], ParsedDevice] = {}
    for mig in [d for d in devices if d.kind == MIG and d.parent_key]:
        parent = by_key.get((mig.node, mig.parent_key)) or stand_ins.get((mig.node, mig.parent_key))
        if parent is None:
            parent = stand_ins[(mig.node, mig.parent_key)] = ParsedDevice(
                node=mig.node,
                key=mig.parent_key,
                uuid=mig.parent_key,
                vendor=NVIDIA,
                resource_name="",
                product=mig.product.removesuffix(f" MIG {mig.mig_profile}"),
                architecture=mig.architecture,
                driver_version=mig.driver_version,
                cuda_version=mig.cuda_version,
                source=DRA,
                dra_driver=mig.dra_driver,
                dra_pool=mig.dra_pool,
                attributes={"note": "physical GPU of MIG devices; not itself listed in the ResourceSlice"},
            )
        # NVIDIA's driver has been seen advertising a partitioned GPU as a whole GPU too: it is not schedulable.
        parent.resource_name = ""
    out = list(stand_ins.values()) + devices
    _number_mig(out)
    return out


def _number_mig(devices: list[ParsedDevice]) -> None:
    """MIG devices are numbered per node and resource, in order of parent GPU and device name."""
    index_of = {(d.node, d.key): d.index for d in devices if d.kind == FULL}
    migs = sorted(
        (d for d in devices if d.kind == MIG),
        key=lambda d: (d.node, d.resource_name, index_of.get((d.node, d.parent_key or "")) or 0, d.dra_device),
    )
    counters: dict[tuple[str, str], int] = {}
    for mig in migs:
        n = counters[(mig.node, mig.resource_name)] = counters.get((mig.node, mig.resource_name), -1) + 1
        mig.index = n


def _apply_rules(devices: list[ParsedDevice], rules: list[Document], warn: Warn) -> None:
    """DeviceTaintRules (resource.k8s.io v1alpha3/v1beta2) selecting by driver, pool and device name."""
    for doc in rules:
        meta = doc.obj.get("metadata") if isinstance(doc.obj.get("metadata"), dict) else {}
        name = meta.get("name", "") if isinstance(meta.get("name"), str) else ""
        where = doc.describe("DeviceTaintRule", name)
        spec = _map(doc.obj.get("spec"), where, "spec", required=True)
        selector = _map(spec.get("deviceSelector"), where, "spec.deviceSelector")
        taint = _taint(spec.get("taint"), where, "spec.taint")
        if selector.get("selectors") or selector.get("deviceClassName"):
            warn(f"{where}: CEL selectors and device classes are not evaluated by the inventory: rule not applied")
            continue
        wanted = {f: _str(selector.get(f), where, f"spec.deviceSelector.{f}") for f in ("driver", "pool", "device")}
        for device in devices:
            if all(not value or getattr(device, f"dra_{f}") == value for f, value in wanted.items()):
                device.taints = [*device.taints, {**taint, "deviceTaintRule": name}]
                if taint["effect"] in BLOCKING_EFFECTS:
                    device.mark_unhealthy(f"DeviceTaintRule {name}: {taint_text(taint)}")
