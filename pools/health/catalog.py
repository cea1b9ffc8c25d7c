"""The XID catalogue (``xid.yaml``, a copy of the reference dcgm/xid.yaml: SOURCE.md) and XID chain correlation.

One XID event is not one state: a GPU often logs a chain (48 → 45 → 63, or 94/95 + 154). Events of one GPU
closer than a window form a chain; the chain's recommended action is the worst of its events' actions. XID 45
alone means "restart Fabric Manager", beside others it only follows them; XID 154 names the recovery action the
driver now requires, which can only make the chain's action worse. No Django here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path

import yaml

CATALOGUE = Path(__file__).with_name("xid.yaml")

#: Recommended actions from least to most disruptive; the worst one of a chain wins.
ACTION_RANK: tuple[str, ...] = (
    "none",
    "restart_app",
    "follow_companion_xid",
    "investigate_software",
    "restart_fabric_manager",
    "check_hardware",
    "reset_gpu",
    "drain_and_reset_gpu",
    "reboot_node",
    "contact_support_rma",
)
#: What each recommended action asks a person to do, in words.
ACTION_WORDS: dict[str, str] = {
    "none": "No action needed",
    "restart_app": "Restart the application",
    "follow_companion_xid": "Follow the accompanying XID's action",
    "investigate_software": "Investigate the software (driver, CUDA, application)",
    "restart_fabric_manager": "Restart Fabric Manager",
    "check_hardware": "Check the hardware",
    "reset_gpu": "Reset the GPU",
    "drain_and_reset_gpu": "Drain the GPU, then reset it",
    "reboot_node": "Reboot the node",
    "contact_support_rma": "Contact support (RMA)",
    "unknown": "Unknown XID: investigate",
}


def action_words(action: str) -> str:
    """A recommended action in words (``reset_gpu`` → "Reset the GPU"); empty for none given."""
    if not action:
        return ""
    return ACTION_WORDS.get(action, action.replace("_", " ").capitalize())


SEVERITY_RANK: tuple[str, ...] = ("info", "app", "degraded", "critical", "fatal")
UNKNOWN_ACTION = "unknown"

#: NVML nvmlDeviceGpuRecoveryAction values carried by XID 154 ("... changed from 0x0 (None) to 0x2 (Node Reboot
#: Required)"), as catalogue actions.
RECOVERY_ACTIONS = {0: "none", 1: "reset_gpu", 2: "reboot_node", 3: "drain_and_reset_gpu", 4: "drain_and_reset_gpu"}
_RECOVERY_TO = re.compile(r"\bto\s+0x([0-9a-f]+)", re.IGNORECASE)
_RECOVERY_WORDS = (
    ("drain and reset", "drain_and_reset_gpu"),
    ("drain p2p", "drain_and_reset_gpu"),
    ("reboot", "reboot_node"),
    ("reset", "reset_gpu"),
)


@dataclass(frozen=True)
class XidInfo:
    """What the catalogue says about one XID."""

    xid: int
    name: str
    severity: str
    action: str
    device_plugin: str = ""
    notes: str = ""

    @property
    def known(self) -> bool:
        """Whether the catalogue lists this XID."""
        return self.action != UNKNOWN_ACTION


@cache
def catalogue() -> dict[int, XidInfo]:
    """XID → catalogue entry, read once from xid.yaml."""
    raw = yaml.safe_load(CATALOGUE.read_text(encoding="utf-8"))
    out = {}
    for entry in raw["xids"]:
        out[int(entry["xid"])] = XidInfo(
            xid=int(entry["xid"]),
            name=str(entry.get("name", "")),
            severity=str(entry.get("severity", "info")),
            action=str(entry.get("recommended_action", "none")),
            device_plugin=str(entry.get("k8s_device_plugin", "")),
            notes=" ".join(str(entry.get("notes", "")).split()),
        )
    return out


def xid_info(xid: int) -> XidInfo:
    """The catalogue entry of an XID, or an "unknown" entry for one the catalogue does not list."""
    info = catalogue().get(int(xid))
    if info is not None:
        return info
    return XidInfo(xid=int(xid), name=f"XID {xid} (not in the catalogue)", severity="unknown", action=UNKNOWN_ACTION)


def worst_action(actions: Iterable[str]) -> str:
    """The most disruptive of the given catalogue actions ("none" for none)."""
    ranked = [a for a in actions if a in ACTION_RANK]
    return max(ranked, key=ACTION_RANK.index, default="none")


def recovery_action(message: str) -> str | None:
    """The recovery action an XID 154 message states, or None when it states none we recognise."""
    match = _RECOVERY_TO.search(message or "")
    if match:
        return RECOVERY_ACTIONS.get(int(match.group(1), 16))
    lowered = (message or "").lower()
    tail = lowered.split(" to ", 1)[-1]
    for words, action in _RECOVERY_WORDS:
        if words in tail:
            return action
    return None


@dataclass(frozen=True)
class XidEvent:
    """One XID seen on one GPU at one time (``message`` is the driver's text when known)."""

    xid: int
    at: datetime
    message: str = ""


@dataclass
class XidChain:
    """XIDs of one GPU close together in time, with the action the chain calls for."""

    events: list[XidEvent] = field(default_factory=list)
    action: str = "none"
    explanation: str = ""

    @property
    def xids(self) -> list[int]:
        """The chain's XIDs in time order."""
        return [e.xid for e in self.events]

    @property
    def started_at(self) -> datetime:
        """Time of the first XID."""
        return self.events[0].at

    @property
    def ended_at(self) -> datetime:
        """Time of the last XID."""
        return self.events[-1].at


def chain_action(events: Sequence[XidEvent]) -> tuple[str, str]:
    """The recommended action of one chain and a sentence saying why."""
    xids = [e.xid for e in events]
    actions = []
    why = []
    for event in events:
        info = xid_info(event.xid)
        if event.xid == 154:
            stated = recovery_action(event.message)
            if stated:
                actions.append(stated)
                why.append(f"XID 154 states the driver now requires {stated}")
            continue
        if event.xid == 45:
            continue  # secondary: decided below
        actions.append(info.action)
    if 45 in xids and all(x in (45, 154) for x in xids):
        actions.append("restart_fabric_manager")
        why.append("XID 45 alone: restart Fabric Manager")
    action = worst_action(actions)
    if any(a == UNKNOWN_ACTION for a in actions) and action == "none":
        action = UNKNOWN_ACTION
    names = ", ".join(str(x) for x in xids)
    text = f"XID chain [{names}]: worst action {action}"
    return action, text + (f" ({'; '.join(why)})" if why else "")


def correlate(events: Iterable[XidEvent], *, window: timedelta) -> list[XidChain]:
    """Group one GPU's XID events into chains (gaps no longer than ``window``), each with its action."""
    ordered = sorted(events, key=lambda e: (e.at, e.xid))
    chains: list[XidChain] = []
    for event in ordered:
        if chains and event.at - chains[-1].ended_at <= window:
            chains[-1].events.append(event)
        else:
            chains.append(XidChain(events=[event]))
    for chain in chains:
        chain.action, chain.explanation = chain_action(chain.events)
    return chains
