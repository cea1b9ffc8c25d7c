"""Shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connection

REPO = Path(__file__).resolve().parent.parent
#: The shared reference material (real Kubernetes / Kueue / DCGM objects) beside the checkout.
REFERENCE = REPO.parent / "shared" / "reference"


@pytest.fixture
def reference() -> Path:
    """Path of ../shared/reference, skipping the test when the checkout has no shared/ beside it."""
    if not REFERENCE.exists():
        pytest.skip("../shared/reference is not beside this checkout")
    return REFERENCE


def pytest_collection_modifyitems(config, items):
    """Skip tests marked ``postgres`` unless the database is PostgreSQL."""
    if connection.vendor == "postgresql":
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL (set DATABASE_URL=postgres://...)")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


# The browser tests' fixtures (page, browser, shots…), available to every test module.
from tests.browsing import browser, page, serialised, shots  # noqa: E402, F401
