"""Settings of the in-process test suite: ``portal.settings`` (read from the environment as ever) with what makes
the tests fast and nothing else.

Processes that tests start (``manage.py``, a Celery worker, ``check --deploy``) run with ``portal.settings``: the
suite's conftest puts ``DJANGO_SETTINGS_MODULE`` back to it once Django is set up here, so what they test is what
is deployed.
"""

from __future__ import annotations

from portal.settings import *  # noqa: F403
from portal.settings import DATABASES

# Hashing a password is deliberately slow (PBKDF2, a million rounds): the tests sign in hundreds of times and seed
# demo users. The hasher is Django's own, never the deployed one; what is tested is who may sign in, not the hash.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # A commit returns before the disk has it: the test databases are thrown away, and transactional tests
    # (TRUNCATE after each) and migrations stop waiting for fsync.
    _options = DATABASES["default"].setdefault("OPTIONS", {})
    _options["options"] = (_options.get("options", "") + " -c synchronous_commit=off").strip()
