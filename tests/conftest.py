"""Shared fixtures, the suite's tiers and profiles, and how the tests are spread over pytest-xdist's workers.

Tiers (markers declared in pyproject.toml; docs/operations.md, "Tests and CI", says where each runs):
- the fast suite: everything not marked below; what ``scripts/test`` runs with no arguments;
- ``system``: real processes (web server, worker, beat, browser against them): everything under ``tests/system/``;
- ``realcluster``: a real kube-apiserver with Kueue (``scripts/testbed``).
A run with no paths and no ``-m`` (``scripts/test``, ``pytest``) leaves the last two out and says so; name their
folder or select them with ``-m system`` / ``-m realcluster`` (they skip where what they need is missing).

Hypothesis profiles (``HYPOTHESIS_PROFILE``): ``full`` (the default; each property's own number of examples, the same
examples on every run), ``ci`` (every property, at most ``CI_MAX_EXAMPLES`` examples each; what CI runs) and
``explore`` (new random examples each run, to hunt for bugs).

With pytest-xdist (``scripts/test`` runs ``-n auto --dist loadgroup``) tests that share something that is not per
worker are kept on one worker: a browser (one Chromium per module: the module's browser tests form a group), the
real processes of a ``system`` module (its group too), and whatever a module marks ``xdist_group(name)`` (the Redis
broker tests: one queue on one Redis database).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.core.cache import caches
from django.db import connection
from hypothesis import settings as hypothesis_settings

from tests.demo_db import DemoSnapshot, demo_snapshot_make
from tests.fixtures import REFERENCE

#: Folders whose tests are the ``system`` tier, marked or not.
SYSTEM_TESTS = ("tests/system/",)
#: Tests CI runs again on the plain-Python engine (marked ``engine``): the engine's own.
ENGINE_TESTS = ("tests/engine/",)
#: Tests CI runs again on SQLite (marked ``sqlite``; a module may also mark itself): those of code with a SQLite
#: branch (kernel/db.py's UPDATE … FROM, notify's claim that meets a concurrent SQLite writer), the settings of the
#: embedded default, and the demo, which the README runs on SQLite.
SQLITE_TESTS = (
    "tests/portal/test_db.py",
    "tests/notify/",
    "tests/portal/test_settings_defaults.py",
    "tests/queues/test_demo.py",
    "tests/billing/test_demo.py",
    "tests/health/test_demo_health.py",
    "tests/portal/test_seed_demo_guard.py",
    "tests/portal/test_seed_demo_output.py",
)
#: Examples per property under the ``ci`` profile (a property asking for fewer keeps its own number).
CI_MAX_EXAMPLES = 10
#: Tiers a run with no paths and no ``-m`` leaves out.
SEPARATE_TIERS = ("system", "realcluster")

# Every profile but "explore" draws the same examples on every run (the README's test command and CI give the same
# answer on any machine); "repeatable" is the old name of "full".
hypothesis_settings.register_profile("full", derandomize=True, database=None)
hypothesis_settings.register_profile("repeatable", derandomize=True, database=None)
hypothesis_settings.register_profile("ci", derandomize=True, database=None, max_examples=CI_MAX_EXAMPLES)
hypothesis_settings.register_profile("explore")
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "full")
hypothesis_settings.load_profile(HYPOTHESIS_PROFILE)


def pytest_configure(config):
    """Processes the tests start get the deployed settings, not the suite's (tests/settings.py)."""
    if os.environ.get("DJANGO_SETTINGS_MODULE") == "tests.settings":
        os.environ["DJANGO_SETTINGS_MODULE"] = "portal.settings"


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Each test starts with an empty cache: the API throttles count in it."""
    caches["default"].clear()
    yield
    caches["default"].clear()


@pytest.fixture(scope="session")
def demo_snapshot(django_db_setup, django_db_blocker) -> DemoSnapshot:
    """The demo seeded once per session (per xdist worker), for the modules that only read it (tests/demo_db.py)."""
    return demo_snapshot_make(django_db_blocker)


@pytest.fixture
def reference() -> Path:
    """Path of tests/fixtures/reference, the copies of the reference material (see its SOURCE.md)."""
    return REFERENCE


def _cap_examples(item: pytest.Item) -> None:
    """Under the ``ci`` profile, a property that asks for more than CI_MAX_EXAMPLES examples gets that many."""
    test = getattr(item, "obj", None)
    test = getattr(test, "__func__", test)
    if not getattr(test, "is_hypothesis_test", False):
        return
    own = test._hypothesis_internal_use_settings
    if own.max_examples > CI_MAX_EXAMPLES:
        test._hypothesis_internal_use_settings = hypothesis_settings(own, max_examples=CI_MAX_EXAMPLES)


def _group(item: pytest.Item) -> str | None:
    """The xdist group an item joins when its module does not name one: its module's, where it needs a browser or
    is a ``system`` test (their module-scoped servers and browser are started once, on one worker)."""
    if "browser" in getattr(item, "fixturenames", ()) or item.get_closest_marker("system"):
        return item.nodeid.split("::", 1)[0]
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the groups
def pytest_collection_modifyitems(config, items):
    """Skip ``postgres`` tests on SQLite, leave the separate tiers out of a plain run, mark the tests CI runs again
    (``engine``, ``sqlite``), cap Hypothesis under ``ci``, and group the tests that must share one xdist worker."""
    skip_postgres = None
    if connection.vendor != "postgresql":
        skip_postgres = pytest.mark.skip(reason="needs PostgreSQL (set DATABASE_URL=postgres://...)")
    plain_run = not config.option.markexpr and config.args_source == pytest.Config.ArgsSource.TESTPATHS
    kept, left_out = [], []
    for item in items:
        if item.nodeid.startswith(SYSTEM_TESTS) and not item.get_closest_marker("system"):
            item.add_marker(pytest.mark.system)
        if plain_run and any(item.get_closest_marker(tier) for tier in SEPARATE_TIERS):
            left_out.append(item)
            continue
        kept.append(item)
        path = item.nodeid.split("::", 1)[0]
        if path.startswith(ENGINE_TESTS):
            item.add_marker(pytest.mark.engine)
        if path.startswith(SQLITE_TESTS):
            item.add_marker(pytest.mark.sqlite)
        if skip_postgres is not None and "postgres" in item.keywords:
            item.add_marker(skip_postgres)
        if HYPOTHESIS_PROFILE == "ci":
            _cap_examples(item)
        if not item.get_closest_marker("xdist_group") and (group := _group(item)):
            item.add_marker(pytest.mark.xdist_group(group))
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept
    config.stash[_LEFT_OUT] = len(left_out)
    if hasattr(config, "workeroutput"):  # an xdist worker: the controller prints the summary
        config.workeroutput["left_out"] = len(left_out)


_LEFT_OUT = pytest.StashKey[int]()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """(xdist controller) what a worker left out: each worker collects the same items, one count is the count."""
    node.config.stash[_LEFT_OUT] = getattr(node, "workeroutput", {}).get("left_out", 0)


def pytest_terminal_summary(terminalreporter, config):
    """Say how many tests of the separate tiers a plain run left out, and how to run them."""
    if count := config.stash.get(_LEFT_OUT, 0):
        terminalreporter.write_line(
            f"{count} tests of the separate tiers ({', '.join(SEPARATE_TIERS)}) not run: "
            "scripts/test -m system, scripts/test -m realcluster (docs/operations.md, 'Tests and CI')"
        )


# The browser tests' fixtures (page, browser, shots…), available to every test module.
from tests.browsing import browser, page, serialised, shots  # noqa: E402, F401
