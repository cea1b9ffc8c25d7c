"""Shared fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.core.cache import caches
from django.db import connection
from hypothesis import settings as hypothesis_settings

from tests.fixtures import REFERENCE

# Property tests draw the same examples on every run ("repeatable", the default: the README's test command and CI
# give the same answer on any machine); HYPOTHESIS_PROFILE=explore draws new ones each run, to hunt for bugs.
hypothesis_settings.register_profile("repeatable", derandomize=True, database=None)
hypothesis_settings.register_profile("explore")
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Each test starts with an empty cache: the API throttles count in it."""
    caches["default"].clear()
    yield
    caches["default"].clear()


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
