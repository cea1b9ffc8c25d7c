"""Parse explicit XID / reset event records (no Django): JSON or YAML records, or NVRM kernel-log lines.

Records: a list (or ``{"events": [...]}``) of mappings with ``xid`` (or ``event: reset``), a GPU reference —
``uuid``, or ``node`` with ``gpu`` (index) or ``pci_bus_id`` — an optional ``at`` (ISO 8601, with a zone) and
``message``. Kernel-log lines are the driver's ``NVRM: Xid (PCI:0000:3b:00): 79, pid=…, GPU has fallen off the
bus.``; their node comes from the caller, their time from an ISO timestamp at the line's start when present.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import yaml

from kernel import safe_yaml

NVRM_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F:.]+)\): (?P<xid>\d+),\s*(?P<message>.*)$")
ISO_PREFIX = re.compile(r"^\s*(?P<ts>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d))\s")


#: XIDs are positive integers; NVIDIA's catalogue (xid.yaml) ends near 160, new ones are added slowly.
MAX_XID = 999
#: GPU indices on one node (nvidia-smi numbers from 0; the largest servers hold 16 cards).
MAX_GPU_INDEX = 63
#: A GPU UUID is "GPU-" and 36 characters; a MIG UUID "MIG-" and 36; longer is not one.
MAX_UUID = 100
#: A node name: an RFC 1123 DNS subdomain of at most 253 characters.
MAX_NODE_NAME = 253


class EventError(ValueError):
    """A record that cannot be read; the message names it and the field."""


@dataclass(frozen=True)
class EventRecord:
    """One XID (or GPU reset) event, with whatever identifies its GPU."""

    kind: str  # "xid" | "reset"
    xid: int | None
    at: datetime | None
    message: str = ""
    uuid: str = ""
    node: str = ""
    gpu: int | None = None
    pci_bus_id: str = ""
    origin: str = ""


def normalise_pci(raw: str) -> str:
    """A PCI address as ``dddd:bb:dd`` (domain, bus, device; no function) so DCGM, NVRM and DRA forms compare."""
    parts = (raw or "").strip().lower().removeprefix("pci:").split(":")
    if len(parts) < 3:
        return ""
    domain, bus, dev = parts[-3], parts[-2], parts[-1].split(".")[0]
    try:
        return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}"
    except ValueError:
        return ""


def _time(raw: Any, where: str) -> datetime | None:
    if raw in (None, ""):
        return None
    if isinstance(raw, datetime):
        value = raw
    else:
        try:
            value = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
        except ValueError:
            raise EventError(f"{where}: at: {raw!r} is not an ISO 8601 time") from None
    if value.tzinfo is None:
        raise EventError(f"{where}: at: {raw!r} has no time zone (write e.g. 2025-01-31T12:00:00Z)")
    return value


def _int(raw: Any, where: str, name: str, *, minimum: int, maximum: int) -> int | None:
    """A whole number within [minimum, maximum], or None when absent; anything else names the field."""
    if raw in (None, ""):
        return None
    if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
        raise EventError(f"{where}: {name}: {raw!r} is not a whole number")
    try:
        value = int(raw)
    except (TypeError, ValueError, OverflowError):
        raise EventError(f"{where}: {name}: {raw!r} is not a whole number") from None
    if not minimum <= value <= maximum:
        raise EventError(f"{where}: {name}: {value} is out of range ({minimum} to {maximum})")
    return value


def _text(raw: Any, where: str, name: str, maximum: int) -> str:
    """A string field of at most ``maximum`` characters."""
    value = str(raw or "")
    if len(value) > maximum or "\x00" in value:
        raise EventError(f"{where}: {name}: {len(value)} characters or a NUL byte; at most {maximum} characters")
    return value


def parse_records(objects: Any, *, origin: str = "") -> list[EventRecord]:
    """Event records from loaded JSON/YAML (a list or ``{"events": [...]}``)."""
    if isinstance(objects, dict):
        objects = objects.get("events", objects.get("items"))
    if not isinstance(objects, list):
        raise EventError(f"{origin or 'input'}: expected a list of event records or {{events: [...]}}")
    out = []
    for i, raw in enumerate(objects):
        where = f"{origin or 'input'}: record {i + 1}"
        if not isinstance(raw, dict):
            raise EventError(f"{where}: expected a mapping, got {type(raw).__name__}")
        kind = str(raw.get("event") or raw.get("kind") or "xid").lower()
        if kind not in ("xid", "reset"):
            raise EventError(f"{where}: event: {kind!r} is not xid or reset")
        xid = _int(raw.get("xid"), where, "xid", minimum=1, maximum=MAX_XID)
        if kind == "xid" and xid is None:
            raise EventError(f"{where}: xid: required for an XID event")
        record = EventRecord(
            kind=kind,
            xid=xid,
            at=_time(raw.get("at") or raw.get("time") or raw.get("timestamp"), where),
            message=_text(raw.get("message"), where, "message", 4000),
            uuid=_text(raw.get("uuid") or raw.get("UUID"), where, "uuid", MAX_UUID),
            node=_text(raw.get("node") or raw.get("hostname") or raw.get("Hostname"), where, "node", MAX_NODE_NAME),
            gpu=_int(raw.get("gpu"), where, "gpu", minimum=0, maximum=MAX_GPU_INDEX),
            pci_bus_id=normalise_pci(str(raw.get("pci_bus_id") or raw.get("pci") or "")),
            origin=where,
        )
        if not record.uuid and not (record.node and (record.gpu is not None or record.pci_bus_id)):
            raise EventError(f"{where}: name the GPU: uuid, or node with gpu (index) or pci_bus_id")
        out.append(record)
    return out


def parse_nvrm_lines(text: str, *, node: str = "", origin: str = "") -> list[EventRecord]:
    """XID events from kernel-log text (``dmesg``/journal lines holding ``NVRM: Xid (PCI:…): N, …``)."""
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        match = NVRM_XID.search(line)
        if not match:
            continue
        ts = ISO_PREFIX.match(line)
        where = f"{origin or 'input'}: line {number}"
        out.append(
            EventRecord(
                kind="xid",
                xid=_int(match.group("xid"), where, "xid", minimum=1, maximum=MAX_XID),
                at=_time(ts.group("ts"), f"{origin} line {number}") if ts else None,
                message=match.group("message").strip(),
                node=node,
                pci_bus_id=normalise_pci(match.group("pci")),
                origin=where,
            )
        )
    return out


def looks_like_exposition(text: str) -> bool:
    """Whether a text is a Prometheus exposition rather than event records or a kernel log."""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith(("# HELP", "# TYPE")):
            return True
        if stripped.startswith("#"):
            continue
        return bool(re.match(r"^[A-Za-z_:][A-Za-z0-9_:]*(\{.*\})?\s+\S+", stripped)) and "NVRM" not in stripped
    return False


def load_event_text(text: str, *, node: str = "", origin: str = "") -> list[EventRecord]:
    """Event records from a JSON/YAML text, or XID events from kernel-log lines when it is neither."""
    if "NVRM: Xid" in text:
        return parse_nvrm_lines(text, node=node, origin=origin)
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError:
        try:
            loaded = safe_yaml.safe_load(text)
        except yaml.YAMLError as exc:
            where = origin or "input"
            raise EventError(f"{where}: neither a scrape, JSON/YAML records nor NVRM lines: {exc}") from None
        except RecursionError:
            raise EventError(f"{origin or 'input'}: nested too deeply for event records") from None
    except RecursionError:
        raise EventError(f"{origin or 'input'}: nested too deeply for event records") from None
    return parse_records(loaded, origin=origin)
