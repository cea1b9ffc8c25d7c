"""Each setting's default is declared once, in portal/settings.py; the code reads ``settings.X`` with no fallback."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from django.conf import settings

from clusters.kube_sync.access import KUEUE_CONFIG_MAP_NAME, KUEUE_CONTROLLER_NAME, KUEUE_NAMESPACE

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ["kernel", "pools", "queues", "clusters", "billing", "portal"]


def _sources():
    for package in PRODUCT:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" not in path.parts:
                yield path, path.read_text()


def test_no_product_code_repeats_a_default_with_getattr():
    found = [
        f"{path.relative_to(ROOT)}: {m.group(0)}"
        for path, text in _sources()
        for m in re.finditer(r"getattr\(settings, \"[A-Z_]+\", [^)]*\)", text)
    ]
    assert not found, found


def test_every_kube_setting_the_code_reads_is_declared_in_settings():
    names = {m.group(1) for _, text in _sources() for m in re.finditer(r"kube_setting\(\"([A-Z_]+)\"\)", text)}
    assert names, "the scan found no kube_setting call"
    missing = sorted(name for name in names if not hasattr(settings, name))
    assert not missing, missing


@pytest.mark.skipif("KUEUE_CONFIG_MAP" in os.environ, reason="the environment overrides KUEUE_CONFIG_MAP")
def test_the_kueue_config_map_default_is_the_one_the_rbac_role_grants():
    assert settings.KUEUE_CONFIG_MAP == f"{KUEUE_NAMESPACE}/{KUEUE_CONFIG_MAP_NAME}"


@pytest.mark.skipif(
    {"KUEUE_CONFIG_WRITE", "KUEUE_CONTROLLER_DEPLOYMENT"} & set(os.environ),
    reason="the environment overrides the Kueue write settings",
)
def test_kueue_config_write_is_off_by_default_and_names_the_deployment_the_write_role_grants():
    assert settings.KUEUE_CONFIG_WRITE is False
    assert settings.KUEUE_CONTROLLER_DEPLOYMENT == KUEUE_CONTROLLER_NAME
