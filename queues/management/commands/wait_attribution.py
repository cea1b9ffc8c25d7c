"""``manage.py wait_attribution [--rebuild]``: bring the wait attribution up to date now (what the beat does every
5 minutes), or recompute every job's from its timeline (the reconcile)."""

from __future__ import annotations

from django.core.management.base import BaseCommand
from django.utils import timezone

from queues.waiting.rollup import wait_attribution_rebuild, wait_attribution_sync


class Command(BaseCommand):
    """Run the wait-attribution rollup once and print what it did."""

    help = "Roll the jobs' wait reasons up into the wait attribution (--rebuild: recompute every job)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--rebuild", action="store_true", help="recompute every job from its timeline")

    def handle(self, *args, **options) -> None:
        run = wait_attribution_rebuild if options["rebuild"] else wait_attribution_sync
        report = run(now=timezone.now())
        self.stdout.write(
            f"{report.jobs} jobs recomputed, {report.tallies} tallies, {report.open_spans} still waiting, "
            f"{report.events} events read, in {report.seconds:.2f} s"
        )
