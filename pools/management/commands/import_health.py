"""``python manage.py import_health FILE [--json] [--node-map HOST=NODE | --node-map FILE]``.

Ingests a dcgm-exporter scrape (``.prom``/``.txt``), XID / reset event records (``.json``/``.yaml``) or kernel-log
lines holding ``NVRM: Xid`` (give ``--node``), for air-gapped sites and tests, and prints the state changes it
caused. ``-`` reads standard input.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kernel import safe_yaml
from kernel.errors import DomainError
from pools.health.ingest import health_ingest_text
from pools.health.services import Actor
from pools.models import Cluster


def _node_map(values: list[str]) -> dict[str, str]:
    """``HOST=NODE`` pairs and/or YAML/JSON files of {host: node}."""
    out: dict[str, str] = {}
    for value in values:
        if "=" in value and not Path(value).exists():
            host, _, node = value.partition("=")
            if not host or not node:
                raise CommandError(f"--node-map {value!r}: write HOST=NODE", returncode=2)
            out[host] = node
            continue
        path = Path(value)
        try:
            loaded = safe_yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, safe_yaml.YAMLError, RecursionError) as exc:
            raise CommandError(
                f"--node-map {value}: not HOST=NODE and not a readable YAML/JSON file ({exc})", returncode=2
            ) from None
        pairs = loaded.items() if isinstance(loaded, dict) else []
        if not isinstance(loaded, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in pairs):
            raise CommandError(
                f"--node-map {value}: expected a mapping of exporter host name to node name", returncode=2
            )
        out.update(loaded)
    return out


class Command(BaseCommand):
    help = "Ingest a DCGM scrape, XID event records or NVRM kernel-log lines and print the health changes."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="scrape (.prom/.txt), event records (.json/.yaml), kernel log; - for stdin")
        parser.add_argument("--json", action="store_true", help="print the full report as JSON")
        parser.add_argument(
            "--node-map",
            action="append",
            default=[],
            metavar="HOST=NODE|FILE",
            help="map the exporter's Hostname/hostname label to a node name (repeatable, or a YAML/JSON file)",
        )
        parser.add_argument("--cluster", help="only match devices of this cluster")
        parser.add_argument("--node", default="", help="node of kernel-log lines (NVRM Xid lines name only PCI)")
        parser.add_argument("--at", help="observation time (ISO 8601 with zone); default: now")

    def handle(self, *args, **options) -> None:
        name = options["file"]
        try:
            text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"{name}: cannot read: {exc}", returncode=2) from None
        cluster = None
        if options["cluster"]:
            cluster = Cluster.objects.filter(name=options["cluster"]).first()
            if cluster is None:
                raise CommandError(f"no cluster named {options['cluster']!r}", returncode=2)
        now = None
        if options["at"]:
            try:
                now = datetime.fromisoformat(options["at"].replace("Z", "+00:00"))
            except ValueError:
                raise CommandError(f"--at {options['at']!r} is not an ISO 8601 time", returncode=2) from None
            if now.tzinfo is None:
                raise CommandError("--at needs a time zone, e.g. 2025-01-31T12:00:00Z", returncode=2)
        try:
            report = health_ingest_text(
                text=text,
                now=now,
                node_map=_node_map(options["node_map"]),
                cluster=cluster,
                origin=name,
                node=options["node"],
                actor=Actor(label=f"import_health {Path(name).name}"),
            )
        except DomainError as exc:
            raise CommandError(str(exc), returncode=2) from None
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict(), indent=2, default=str))
            return
        self.stdout.write(
            f"{name}: {report.gpus} GPU(s)/event(s) read, {len(report.matched)} device(s) matched, "
            f"{len(report.unmatched)} unmatched, {report.observations} observation(s) recorded"
        )
        for change in report.changes:
            ticket = f" [ticket #{change.ticket}]" if change.ticket else ""
            self.stdout.write(f"  {change}{ticket}: {change.reason}")
        if not report.changes:
            self.stdout.write("  no state changes")
        for ticket in report.tickets_opened:
            self.stdout.write(f"  repair ticket #{ticket} open")
        if report.jobs_protected:
            self.stdout.write(f"  jobs being moved off: {', '.join(map(str, report.jobs_protected))}")
        for seen in report.matched:
            if seen.unknown:
                missing = ", ".join(sorted(seen.unknown))
                self.stdout.write(f"  {seen.node}/{seen.device}: unknown (no series): {missing}")
        for line in report.unmatched:
            self.stdout.write(f"  unmatched: {line}")
        for line in report.not_in_input:
            self.stdout.write(f"  {line}")
