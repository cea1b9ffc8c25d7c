"""``manage.py simulate FILE [--once] [--until DURATION|end] [--json]``: run a what-if scenario file."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from queues.engine.scenario import ScenarioError, load_scenario, parse_duration, render_table, run_scenario


class Command(BaseCommand):
    """Run the admission engine over a scenario file (kubectl YAML/JSON plus sim.portal/* annotations)."""

    help = (
        "Simulate Kueue admission for a scenario file. Default: run cycles at the start time until nothing "
        "changes; --once: exactly one scheduling cycle; --until DURATION|end: replay over simulated time."
    )
    # A pure-engine command: it touches no database, URLconf or settings the system checks look at.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        """Declare FILE, --once, --until and --json."""
        parser.add_argument("file", help="scenario file (YAML, multi-document, or JSON as kubectl prints it)")
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--once", action="store_true", help="run exactly one scheduling cycle")
        mode.add_argument("--until", metavar="DURATION", help="replay over simulated time (e.g. 2h, 90m, end)")
        parser.add_argument("--json", action="store_true", help="print the JSON document instead of a table")

    def handle(self, *args: object, **options: object) -> None:
        """Load, run and print; bad input exits with status 2 and prints no partial result."""
        until: float | None = None
        mode = "settle"
        if options.get("once"):
            mode = "once"
        elif options.get("until") is not None:
            mode = "replay"
            text = str(options["until"])
            if text != "end":
                try:
                    until = parse_duration(text)
                except ValueError as exc:
                    raise CommandError(f"--until: {exc}", returncode=2) from None
        try:
            scenario = load_scenario(str(options["file"]))
            document = run_scenario(scenario, mode=mode, until=until)
        except ScenarioError as exc:
            raise CommandError(str(exc), returncode=2) from None
        if options.get("json"):
            self.stdout.write(json.dumps(document, indent=2))
        else:
            self.stdout.write(render_table(document))
