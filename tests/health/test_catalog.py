"""The XID catalogue and chain correlation: worst action wins, 45 alone, 154's stated action, the window."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta

import pytest

from pools.health.catalog import CATALOGUE, XidEvent, catalogue, correlate, recovery_action, xid_info
from pools.health.policy import Rules, xid_chain_level, xid_event_level
from pools.models import _default_xid_action_levels, _default_xid_severity_levels

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
WINDOW = timedelta(minutes=5)
RULES = Rules(xid_action_levels=_default_xid_action_levels(), xid_severity_levels=_default_xid_severity_levels())


def ev(xid: int, seconds: float = 0, message: str = "") -> XidEvent:
    return XidEvent(xid=xid, at=T0 + timedelta(seconds=seconds), message=message)


def test_catalogue_is_the_unmodified_copy_its_source_note_names():
    recorded = re.search(r"sha256 \| `([0-9a-f]{64})`", CATALOGUE.with_name("SOURCE.md").read_text())
    assert recorded, "pools/health/SOURCE.md records no sha256"
    assert hashlib.sha256(CATALOGUE.read_bytes()).hexdigest() == recorded[1]


def test_catalogue_entries_have_severity_and_action():
    info = xid_info(79)
    assert (info.severity, info.action) == ("fatal", "reboot_node")
    assert xid_info(48).action == "drain_and_reset_gpu"
    assert len(catalogue()) >= 40
    unknown = xid_info(999)
    assert not unknown.known


def test_correlate_chain_takes_the_worst_action():
    [chain] = correlate([ev(48), ev(45, 1), ev(63, 2)], window=WINDOW)
    assert chain.xids == [48, 45, 63]
    assert chain.action == "drain_and_reset_gpu"


def test_correlate_splits_chains_beyond_the_window():
    chains = correlate([ev(13), ev(13, 30), ev(79, 3600)], window=WINDOW)
    assert [c.xids for c in chains] == [[13, 13], [79]]
    assert [c.action for c in chains] == ["restart_app", "reboot_node"]


def test_correlate_xid_45_alone_means_restart_fabric_manager():
    [chain] = correlate([ev(45)], window=WINDOW)
    assert chain.action == "restart_fabric_manager"
    [chain] = correlate([ev(45), ev(94, 1)], window=WINDOW)
    assert chain.action == "restart_app"


def test_correlate_xid_154_raises_the_action_it_states():
    message = "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
    [chain] = correlate([ev(94), ev(154, 1, message)], window=WINDOW)
    assert chain.action == "reboot_node"
    assert "XID 154 states" in chain.explanation
    assert recovery_action("changed from None to GPU Reset Required") == "reset_gpu"
    assert recovery_action("nothing we know") is None


@pytest.mark.parametrize(
    ("xid", "level"),
    [
        (79, "unhealthy"),
        (48, "unhealthy"),
        (13, "ok"),
        (43, "ok"),
        (63, "degraded"),
        (92, "degraded"),
        (999, "unhealthy"),
    ],
)
def test_xid_event_level_by_catalogue_action_and_severity(xid, level):
    assert xid_event_level(xid, RULES) == level


def test_xid_override_and_unknown_level_are_policy():
    rules = Rules(
        xid_action_levels=RULES.xid_action_levels,
        xid_severity_levels=RULES.xid_severity_levels,
        xid_overrides={"109": "ok"},
        unknown_xid_level="degraded",
    )
    assert xid_event_level(109, RULES) == "unhealthy"
    assert xid_event_level(109, rules) == "ok"
    assert xid_event_level(999, rules) == "degraded"
    [chain] = correlate([ev(109)], window=WINDOW)
    assert xid_chain_level(chain, rules) == "ok"
    [chain] = correlate([ev(94), ev(154, 1, "to 0x1 (GPU Reset Required)")], window=WINDOW)
    assert xid_chain_level(chain, RULES) == "unhealthy"
