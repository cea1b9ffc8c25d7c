"""``manage.py import_inventory FILE...``: import Nodes and ResourceSlices printed by ``kubectl get -o yaml|json``."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from pools.inventory.records import InventoryError
from pools.inventory.service import ClusterChoice, ImportReport, inventory_import_into


class Command(BaseCommand):
    help = (
        "Import Kubernetes Nodes and DRA ResourceSlices (kubectl get -o yaml|json; multi-document YAML and "
        "kind: List accepted) into a cluster's pool. The files are one listing of the whole cluster: nodes "
        "missing from them are marked gone, unless --partial (a listing with no Node, or one removing more than "
        "INVENTORY_MAX_REMOVAL_SHARE of the pool, is refused unless --allow-mass-removal). Bad input changes "
        "nothing and exits with status 2."
    )

    def add_arguments(self, parser):
        parser.add_argument("files", nargs="+", metavar="FILE")
        parser.add_argument(
            "--cluster",
            help='Existing cluster to import into (default: the first simulated cluster, else "default", '
            "created if no cluster exists).",
        )
        parser.add_argument(
            "--partial", action="store_true", help="The files list some nodes only: do not mark the others gone."
        )
        parser.add_argument(
            "--allow-mass-removal",
            action="store_true",
            help="Accept a complete listing that holds no Node or marks gone more than INVENTORY_MAX_REMOVAL_SHARE "
            "of the live nodes (refused otherwise).",
        )
        parser.add_argument("--json", action="store_true", help="Print the import report as JSON.")

    def handle(self, *args, files, cluster=None, partial=False, allow_mass_removal=False, **options):
        try:
            choice, report = inventory_import_into(
                cluster_name=cluster, paths=files, complete=not partial, allow_mass_removal=allow_mass_removal
            )
        except InventoryError as exc:
            raise CommandError(f"Nothing imported. {exc}", returncode=2) from exc
        if options["json"]:
            self.stdout.write(json.dumps({"clusterChoice": choice.note, **report.as_dict()}, indent=2))
            return
        self._summary(choice, report, files, partial)

    def _summary(self, choice: ClusterChoice, report: ImportReport, files, partial: bool) -> None:
        """A short human summary."""
        scope = (
            "partial listing (other nodes left as they are)"
            if partial
            else "complete listing (nodes not in it are marked gone)"
        )
        self.stdout.write(f"Cluster {choice.cluster.name} ({choice.note}); {len(files)} file(s), {scope}")
        self.stdout.write(f"Nodes:   {report.nodes.text()}")
        self.stdout.write(f"Devices: {report.devices.text()}")
        if report.health_changes:
            self.stdout.write(f"Health changes ({len(report.health_changes)}):")
            for change in report.health_changes:
                self.stdout.write(
                    f"  {change.node} {change.key}: {change.before or 'new'} -> {change.after}"
                    + (f" ({change.reason})" if change.reason else "")
                )
        for what, n in sorted(report.ignored.items()):
            self.stdout.write(f"Ignored: {n} {what}")
        for warning in report.warnings:
            self.stdout.write(self.style.WARNING(f"Warning: {warning}"))
        if report.orphaned_allocations:
            self.stdout.write(
                self.style.WARNING(
                    f"{report.orphaned_allocations} open allocation(s) are on devices that left capacity; "
                    "the reconciler closes them."
                )
            )
        if not report.changed:
            self.stdout.write("Nothing changed.")
