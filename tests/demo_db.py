"""The seeded demo, made once per test session (per xdist worker) for the browser tests that only read it.

Seeding the demo replays its history through the simulated cluster and prices it (seconds of CPU); loading the
rows it wrote takes a fraction of that. ``demo_snapshot`` (a session fixture in tests/conftest.py) seeds once and
keeps the rows serialized; a module that only reads the demo takes ``demo_each_test`` as a module-scoped autouse
fixture and marks its tests ``django_db(transaction=True, serialized_rollback=True)``: Django then loads the demo
before each of them and empties the database after it, and once the module is done the database holds what it
held before. Tests that change the demo, or test seeding itself, keep calling ``demo_seed``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from django.core.management import call_command
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.utils import timezone

from billing.demo import billing_demo_seed
from portal.demo import demo_seed

#: Days of demo history (``ROLE_TOUR_DAYS=30`` seeds the full demo: that takes minutes).
DAYS = int(os.environ.get("ROLE_TOUR_DAYS", "2"))
_UNSET = object()
#: The connection attribute Django's serialized rollback loads from.
SERIALIZED = "_test_serialized_contents"


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
    """For a module's lifetime: each ``serialized_rollback`` test starts from the demo; then the database is back.

    What Django loads is the connection's ``_test_serialized_contents``. Playwright's sync API runs the test in
    another context than its fixtures, where ``django.db.connection`` is another wrapper object: the snapshot is
    set on this wrapper and on its class (which a wrapper made in another context reads).
    """
    wrapper = connections[DEFAULT_DB_ALIAS]
    saved_instance = wrapper.__dict__.get(SERIALIZED, _UNSET)
    saved_class = type(wrapper).__dict__.get(SERIALIZED, _UNSET)
    with django_db_blocker.unblock():
        _empty()
    setattr(wrapper, SERIALIZED, snapshot.demo)
    setattr(type(wrapper), SERIALIZED, snapshot.demo)
    try:
        yield snapshot
    finally:
        for owner, saved in ((wrapper, saved_instance), (type(wrapper), saved_class)):
            if saved is _UNSET:
                delattr(owner, SERIALIZED)
            else:
                setattr(owner, SERIALIZED, saved)
        with django_db_blocker.unblock():
            _empty()
            connection.creation.deserialize_db_from_string(snapshot.before)
