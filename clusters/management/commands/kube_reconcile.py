"""``python manage.py kube_reconcile [--cluster NAME ...] [--dry-run] [--json]``.

Runs the reconciler of the kubernetes clusters now (the beat task ``clusters.kube_reconcile_clusters`` runs it on a
schedule): relist, compare Kueue workloads, pods, allocations and open usage, repair what is clear, report the
rest. ``--dry-run`` repairs nothing. The report is stored (Django admin → Reconcile reports) and printed.
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from clusters.backends import backend_for
from pools.models import Cluster


class Command(BaseCommand):
    help = "Reconcile kubernetes clusters with the portal's allocations and usage; print the findings."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", action="append", default=[], help="cluster name (repeatable); default all")
        parser.add_argument("--dry-run", action="store_true", help="report, repair nothing")
        parser.add_argument("--json", action="store_true", help="print the reports as JSON")

    def handle(self, *args, **options) -> None:
        clusters = Cluster.objects.filter(backend=Cluster.Backend.KUBERNETES).order_by("name")
        if options["cluster"]:
            clusters = clusters.filter(name__in=options["cluster"])
            missing = set(options["cluster"]) - set(clusters.values_list("name", flat=True))
            if missing:
                raise CommandError(f"--cluster: no kubernetes cluster named {', '.join(sorted(missing))}")
        out = []
        for cluster in clusters:
            report = backend_for(cluster).reconcile(dry_run=options["dry_run"])
            out.append(
                {
                    "cluster": cluster.name,
                    "dryRun": report.dry_run,
                    "repaired": report.repaired,
                    "reported": report.reported,
                    "error": report.error,
                    "findings": report.findings,
                }
            )
        if options["json"]:
            self.stdout.write(json.dumps(out, indent=2, default=str))
            return
        for item in out:
            head = f"{item['cluster']}: {item['repaired']} repaired, {item['reported']} reported"
            if item["dryRun"]:
                head += " (dry run)"
            if item["error"]:
                head += f"; ERROR {item['error']}"
            self.stdout.write(head)
            for finding in item["findings"]:
                self.stdout.write(f"  [{finding['action']}] {finding['kind']}: {finding['message']}")
