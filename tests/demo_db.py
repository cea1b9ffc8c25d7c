"""The seeded demo, made once per test session (per xdist worker) for the browser tests that only read it.

Seeding the demo replays its history through the simulated cluster and prices it (seconds of CPU); loading the
rows it wrote takes a fraction of that. ``demo_snapshot`` (a session fixture in tests/conftest.py) seeds once and
keeps the rows serialized. A module that only reads the demo marks its tests ``django_db(transaction=True)`` and
takes two autouse fixtures: ``demo_each_test`` for the module (once it is done the database holds what it held
before) and ``demo_load`` for each test (the database emptied, then the demo loaded; Django empties it after).

The load is the fixture's own, not Django's ``serialized_rollback``: run after another browser module in the same
process (tests/admin/test_browser.py before tests/admin/test_every_admin_page.py reproduces it), Django's load
left the database empty and the tests failed in CI; why inside Django was not pinned down, and an explicit load
does not depend on it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from billing.demo import billing_demo_seed
from portal.demo import demo_seed

#: Days of demo history (``ROLE_TOUR_DAYS=30`` seeds the full demo: that takes minutes).
DAYS = int(os.environ.get("ROLE_TOUR_DAYS", "2"))


@dataclass(frozen=True)
class DemoSnapshot:
    """The database with the demo seeded, and as it was before, each serialized; when the demo was seeded."""

    demo: str
    before: str
    seeded_at: datetime


def _empty() -> None:
    """Every table emptied, nothing re-created (what Django's serialized rollback loads into). The sequences go on
    from where the seeding left them, as Django's own flush between tests does: rows loaded with their ids, new
    rows get ids none of them has (PostgreSQL does not move a sequence past ids inserted explicitly)."""
    call_command("flush", interactive=False, verbosity=0, inhibit_post_migrate=True, reset_sequences=False)


def demo_snapshot_make(django_db_blocker) -> DemoSnapshot:
    """Seed the demo (DAYS days, billing included), serialize it, and put the database back as it was."""
    with django_db_blocker.unblock():
        before = connection.creation.serialize_db_to_string()
        now = timezone.now()
        demo_seed(now=now, days=DAYS)
        billing_demo_seed(now=now, days=DAYS)
        demo = connection.creation.serialize_db_to_string()
        _empty()
        connection.creation.deserialize_db_from_string(before)
    return DemoSnapshot(demo=demo, before=before, seeded_at=now)


@contextmanager
def demo_each_test(snapshot: DemoSnapshot, django_db_blocker) -> Iterator[DemoSnapshot]:
    """For a module's lifetime: its tests load the demo (``demo_load``); afterwards the database is as before."""
    try:
        yield snapshot
    finally:
        with django_db_blocker.unblock():
            _empty()
            connection.creation.deserialize_db_from_string(snapshot.before)


def demo_load(snapshot: DemoSnapshot) -> None:
    """The database emptied (what Django's flush after the last test left included), then the demo loaded."""
    _empty()
    connection.creation.deserialize_db_from_string(snapshot.demo)
