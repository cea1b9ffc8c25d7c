"""The common start of the benchmark scripts: the checkout on ``sys.path``, a throwaway database, Django set up.

A script builds its own argument parser, adds ``--database-url`` with :func:`add_database_argument`, then calls
:func:`setup_django` before it imports any model.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def add_database_argument(parser: argparse.ArgumentParser, sqlite_name: str) -> None:
    """Add ``--database-url``: DATABASE_URL when set, else a SQLite file named ``sqlite_name`` under var/."""
    parser.add_argument(
        "--database-url", default=os.environ.get("DATABASE_URL") or f"sqlite:///{ROOT / 'var' / sqlite_name}"
    )


def setup_django(database_url: str, *, fresh_sqlite: bool = False) -> None:
    """Point the portal's settings at ``database_url`` and set Django up (``fresh_sqlite``: delete the file first)."""
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    (ROOT / "var").mkdir(exist_ok=True)
    if fresh_sqlite and database_url.startswith("sqlite:///"):
        Path(database_url.removeprefix("sqlite:///")).unlink(missing_ok=True)

    import django

    django.setup()
