"""Seed the demo: pool, teams, users, quotas, classes and a month of simulated history (idempotent)."""

from __future__ import annotations

import secrets
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, OutputWrapper
from django.utils import timezone

from billing.demo import billing_demo_seed
from portal.demo import DEMO_PASSWORD, USERS, demo_seed

BAR_WIDTH = 30
#: Without a terminal, a progress line per step at most every this many percent.
LINE_STEP = 10


class ProgressPrinter:
    """Says what seeding is doing: a bar redrawn in place on a terminal, plain lines (every 10 %) otherwise."""

    def __init__(self, out: OutputWrapper, *, tty: bool) -> None:
        self.out = out
        self.tty = tty
        self.step = ""
        self.shown = -1
        self.started = time.monotonic()

    def __call__(self, step: str, fraction: float) -> None:
        """Report ``fraction`` (0 to 1) of ``step``."""
        percent = int(max(0.0, min(1.0, fraction)) * 100)
        if step != self.step:
            self.end_line()
            self.step, self.shown = step, -1
        if self.tty:
            if percent != self.shown:
                filled = BAR_WIDTH * percent // 100
                bar = "#" * filled + "." * (BAR_WIDTH - filled)
                elapsed = time.monotonic() - self.started
                self.out.write(f"\r[{bar}] {percent:3d}% {step} ({elapsed:.0f}s)", ending="")
                self.out.flush()
        elif self.shown < 0 or percent >= self.shown + LINE_STEP or (percent == 100 and self.shown < 100):
            self.out.write(f"seed_demo: {step}: {percent}%")
        else:
            return
        self.shown = percent

    def end_line(self) -> None:
        """Finish the bar's line on a terminal (before other output)."""
        if self.tty and self.step:
            self.out.write("")


class Command(BaseCommand):
    """``manage.py seed_demo [--days N]``."""

    help = "Create the demo pool, teams, users, quotas, classes and history (safe to run again)."

    def add_arguments(self, parser):
        """Options."""
        parser.add_argument("--days", type=int, default=30, help="days of history to generate (default 30)")
        parser.add_argument(
            "--i-know-this-is-production",
            action="store_true",
            dest="production_ok",
            help="seed although PORTAL_MODE=production; new demo users get a random password, printed once",
        )

    def handle(self, *args, **options):
        """Seed, saying what it is doing, and report."""
        password = self._password(options["production_ok"])
        started = time.monotonic()
        now = timezone.now()
        progress = ProgressPrinter(self.stdout, tty=self.stdout.isatty())
        report = demo_seed(now=now, days=options["days"], progress=progress, password=password)
        progress("billing: rates, metering, daily rollups and budget checks", 0.0)
        billing = billing_demo_seed(now=now, days=options["days"])
        progress("billing: rates, metering, daily rollups and budget checks", 1.0)
        progress.end_line()
        took = time.monotonic() - started
        if report.history_jobs:
            self.stdout.write(
                f"Demo seeded in {took:.1f}s: {report.history_jobs} jobs replayed through the simulated cluster "
                f"({report.ticks} ticks), {report.created_users} users created."
            )
        else:
            self.stdout.write(f"Demo already seeded; pool and policy checked in {took:.1f}s.")
        self.stdout.write(
            f"Billing: {billing.rates} rates and {billing.budgets} budgets added, {billing.records} usage records "
            f"metered, {billing.days} days rolled up."
        )
        logins = ", ".join(username for username, *_ in USERS)
        self.stdout.write(f"Logins: {logins} (password {password!r}).")

    def _password(self, production_ok: bool) -> str:
        """The demo users' password: the published one in development, never in production (refused unless asked)."""
        if settings.PORTAL_MODE == "development":
            return DEMO_PASSWORD
        if not production_ok:
            raise CommandError(
                f'PORTAL_MODE={settings.PORTAL_MODE}: seed_demo creates a superuser "admin" and demo users; '
                "refused. Pass --i-know-this-is-production to seed anyway with a random password.",
                returncode=2,
            )
        password = secrets.token_urlsafe(18)
        self.stdout.write(
            self.style.WARNING("PORTAL_MODE=production: new demo users get this password (shown only here): ")
            + password
        )
        return password
