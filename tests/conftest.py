"""Shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connection

from tests.fixtures import REFERENCE


@pytest.fixture
def reference() -> Path:
    """Path of tests/fixtures/reference, the copies of the reference material (see its SOURCE.md)."""
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
