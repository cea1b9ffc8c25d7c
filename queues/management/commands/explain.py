"""``manage.py explain FILE [--json]``: why each Kueue Workload in a kubectl dump waits, in the portal's codes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from queues.explain import ExplainError, explain_text, render_table


class Command(BaseCommand):
    """Translate the Workloads of FILE (with their ClusterQueues, Nodes, … when present) into wait reasons."""

    help = (
        "Explain Kueue Workloads from FILE, as kubectl get -o yaml|json prints them (a List, multi-document YAML "
        "or JSON; ClusterQueues, LocalQueues, ResourceFlavors, Nodes and Pods in the same file refine the "
        "reason). Prints per workload its name, wait-reason code and message; '-' reads standard input."
    )
    # A pure translation: no database, URLconf or settings the system checks look at.
    requires_system_checks: list[str] = []
    stealth_options = ("stdin",)

    def add_arguments(self, parser: CommandParser) -> None:
        """Declare FILE and --json."""
        parser.add_argument("file", help="kubectl dump (YAML or JSON); '-' for standard input")
        parser.add_argument("--json", action="store_true", help='print a JSON list of {"name","code","message"}')

    def handle(self, *args: object, **options: object) -> None:
        """Read, explain, print; bad input exits with status 2 and prints no partial result."""
        name = str(options["file"])
        try:
            if name == "-":
                text = (options.get("stdin") or sys.stdin).read()
            else:
                text = Path(name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"{name}: cannot read: {exc}", returncode=2) from None
        try:
            explanations = explain_text(text, source=name)
        except ExplainError as exc:
            raise CommandError(str(exc), returncode=2) from None
        if options.get("json"):
            self.stdout.write(json.dumps([e.record() for e in explanations], indent=2))
        else:
            self.stdout.write(render_table(explanations), ending="")
