"""Rows made once for many tests: a module's tests read them, and each test's own changes roll back.

``shared_rows`` builds the rows inside a transaction that stays open around a group of tests (a module-scoped
fixture's lifetime); each test's ``django_db`` transaction is then a savepoint inside it, so what a test writes is
undone after it, and the shared rows are undone once the group is done. Only for tests that are not
``transaction=True`` (those commit and flush)::

    @pytest.fixture(scope="module")
    def world(django_db_setup, django_db_blocker):
        with shared_rows(django_db_blocker, build_world) as world:
            yield world
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from django.db import DEFAULT_DB_ALIAS, transaction

T = TypeVar("T")


@contextmanager
def shared_rows(django_db_blocker, build: Callable[[], T], using: str = DEFAULT_DB_ALIAS) -> Iterator[T]:
    """What ``build()`` returns, its rows seen by the tests run inside (their own changes roll back), then undone."""
    with django_db_blocker.unblock():
        atomic = transaction.atomic(using=using)
        # As Django's TestCase marks its class-wide transaction: a durable atomic block inside is still allowed.
        atomic._from_testcase = True
        atomic.__enter__()
        try:
            built = build()
        except BaseException:
            transaction.set_rollback(True, using=using)
            atomic.__exit__(None, None, None)
            raise
    try:
        yield built
    finally:
        with django_db_blocker.unblock():
            transaction.set_rollback(True, using=using)
            atomic.__exit__(None, None, None)
