"""Fixtures of the system tests: the portal in real processes, embedded and production shape (README.md here).

The tests of this folder are the ``system`` tier (tests/conftest.py marks them): a plain run leaves them out; name
this folder or select ``-m system`` (``scripts/test -m system``, as CI does). Each starts several processes and
takes from seconds to minutes.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.system.portals import EmbeddedPortal, Portal, ProductionPortal
from tests.system.seeding import SeedCache
from tests.system.services import PostgresServer, RedisServer

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report ends with the tail of every log of the portals it started."""
    report = yield
    if report.failed:
        for portal in getattr(item, "_system_portals", []):
            report.sections.append((f"{portal.shape} portal logs", portal.log_report()))
    return report


@pytest.fixture(scope="session")
def system_root() -> Iterator[Path]:
    """One directory for this session's portals and servers (kept when SYSTEM_TEST_KEEP=1)."""
    prefix = os.environ.get("SYSTEM_TEST_TMP_PREFIX", "portal-system-")
    root = Path(tempfile.mkdtemp(prefix=prefix))
    root.chmod(0o755)  # the private PostgreSQL runs as another user when the tests run as root
    yield root
    if os.environ.get("SYSTEM_TEST_KEEP") != "1":
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def seed_cache() -> SeedCache:
    """The seeded demo databases, made once per cache key (see SeedCache)."""
    return SeedCache()


@pytest.fixture(scope="session")
def seeded_sqlite(seed_cache) -> Path:
    """The seeded demo SQLite file (copy it; never open the original)."""
    return seed_cache.sqlite()


@pytest.fixture(scope="session")
def postgres_server(system_root) -> Iterator[PostgresServer]:
    """A private PostgreSQL for this session (its own port; tests may restart it)."""
    server = PostgresServer(system_root / "postgres").start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def seeded_postgres_dump(seed_cache, postgres_server) -> Path:
    """The seeded demo database as a pg_dump file (restored into a new database for each portal)."""
    return seed_cache.postgres_dump(postgres_server)


def _workdir(root: Path, request, kind: str) -> Path:
    name = request.node.name.replace("/", "_").replace("[", "-").replace("]", "")[:60]
    path = Path(tempfile.mkdtemp(prefix=f"{kind}-{name}-", dir=root))
    path.chmod(0o755)
    return path


def _finish(portal: Portal) -> None:
    """Stop the portal's processes, then fail the test if their logs hold a problem it did not allow."""
    portal.stop()
    problems = portal.log_problems()
    if problems:
        pytest.fail(
            f"the {portal.shape} portal's logs hold {len(problems)} problem(s) the test did not allow:\n\n"
            + "\n\n".join(problems[:10]),
            pytrace=False,
        )


@pytest.fixture
def redis_server(system_root, request) -> Iterator[RedisServer]:
    """A private Redis for this test (tests may stop and start it)."""
    server = RedisServer(_workdir(system_root, request, "redis")).start()
    yield server
    server.stop()


@pytest.fixture
def embedded_portal_factory(system_root, seeded_sqlite, request) -> Iterator[Callable[..., EmbeddedPortal]]:
    """Start embedded-shape portals: ``factory(env={...}, seeded=True)``; each is stopped and its logs checked at
    the end of the test."""
    started: list[EmbeddedPortal] = []
    request.node._system_portals = getattr(request.node, "_system_portals", [])

    def start(*, env: dict[str, str] | None = None, seeded: bool = True) -> EmbeddedPortal:
        portal = EmbeddedPortal(
            _workdir(system_root, request, "embedded"), database=seeded_sqlite if seeded else None, env=env
        )
        started.append(portal)
        request.node._system_portals.append(portal)
        return portal.start()

    yield start
    for portal in started:
        _finish(portal)


@pytest.fixture
def production_portal_factory(
    system_root, postgres_server, seeded_postgres_dump, redis_server, request
) -> Iterator[Callable[..., ProductionPortal]]:
    """Start production-shape portals on this test's Redis and a new database on the session's PostgreSQL:
    ``factory(env={...}, seeded=True)``; each is stopped and its logs checked at the end of the test."""
    started: list[ProductionPortal] = []
    request.node._system_portals = getattr(request.node, "_system_portals", [])

    def start(*, env: dict[str, str] | None = None, seeded: bool = True) -> ProductionPortal:
        name = f"portal_{secrets.token_hex(4)}"
        if seeded:
            postgres_server.restore(name, seeded_postgres_dump)
        else:
            postgres_server.create_database(name)
        portal = ProductionPortal(
            _workdir(system_root, request, "production"),
            redis=redis_server,
            postgres=postgres_server,
            database=name,
            env=env,
        )
        started.append(portal)
        request.node._system_portals.append(portal)
        return portal.start()

    yield start
    for portal in started:
        _finish(portal)


@pytest.fixture
def embedded_portal(embedded_portal_factory) -> EmbeddedPortal:
    """The embedded shape on the seeded demo data, with the settings scripts/demo uses."""
    return embedded_portal_factory()


@pytest.fixture
def production_portal(production_portal_factory) -> ProductionPortal:
    """The production shape on the seeded demo data, with the deployed settings."""
    return production_portal_factory()
