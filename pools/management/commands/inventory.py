"""``manage.py inventory [--json] [--cluster NAME]``: the accelerator pool, device by device, with capacity totals."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from kernel.quantity import format_quantity
from pools.inventory.selectors import InventoryRow, cluster_named, inventory_devices
from pools.selectors import class_capacity, flavor_capacity

TOTALS = (("exists", "exists"), ("inUse", "in_use"), ("available", "available"), ("unhealthy", "unhealthy"))


def memory_text(memory_bytes: int | None) -> str | None:
    """Memory in Kubernetes quantity notation ("80Gi", "9984Mi")."""
    return None if memory_bytes is None else format_quantity(memory_bytes, "memory")


def device_json(row: InventoryRow) -> dict:
    """One device of the JSON listing."""
    return {
        "cluster": row.cluster,
        "node": row.node,
        "key": row.key,
        "vendor": row.vendor,
        "product": row.product,
        "kind": row.kind,
        "resourceName": row.resource_name or None,
        "parent": row.parent_key,
        "memory": memory_text(row.memory_bytes),
        "health": row.health,
        "healthReason": row.health_reason or None,
        "source": row.source,
        "flavor": row.flavor,
        "allocatedTo": row.allocated_to,
    }


def _counts(cap) -> dict:
    """The shared count fields of a capacity row."""
    return {
        **{name: getattr(cap, attr) for name, attr in TOTALS},
        "cordoned": cap.cordoned,
        "teamsAllowed": list(cap.teams_allowed),
    }


class Command(BaseCommand):
    help = "Show the pool: every present device with its health and holder, and capacity per class and flavor."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="Print JSON instead of tables.")
        parser.add_argument("--cluster", help="Only this cluster (default: all clusters).")

    def handle(self, *args, cluster=None, **options):
        target = None
        if cluster:
            target = cluster_named(cluster)
            if target is None:
                raise CommandError(f'No cluster named "{cluster}".', returncode=2)
        rows = inventory_devices(cluster=target)
        classes = [
            {
                "class": cap.resource_class.slug,
                "name": cap.resource_class.name,
                "resourceName": cap.resource_name,
                "flavors": [f.name for f in cap.flavors],
                **_counts(cap),
            }
            for cap in class_capacity(cluster=target)
        ]
        flavors = [
            {"flavor": cap.flavor.name if cap.flavor else None, "resourceName": cap.resource_name, **_counts(cap)}
            for cap in flavor_capacity(cluster=target)
        ]
        if options["json"]:
            payload = {
                "cluster": target.name if target else None,
                "devices": [device_json(r) for r in rows],
                "totals": {"classes": classes, "flavors": flavors},
            }
            self.stdout.write(json.dumps(payload, indent=2))
            return
        self._table(
            ["NODE", "DEVICE", "VENDOR", "PRODUCT", "KIND", "RESOURCE", "MEMORY", "HEALTH", "ALLOCATED TO"],
            [self._device_cells(r) for r in rows],
        )
        count_headers = ["EXISTS", "IN USE", "AVAILABLE", "UNHEALTHY", "CORDONED", "TEAMS"]
        self.stdout.write("")
        self._table(
            ["CLASS", "RESOURCE", *count_headers],
            [[c["class"], c["resourceName"], *self._count_cells(c)] for c in classes],
        )
        self.stdout.write("")
        self._table(
            ["FLAVOR", "RESOURCE", *count_headers],
            [[f["flavor"] or "(no flavor)", f["resourceName"], *self._count_cells(f)] for f in flavors],
        )

    @staticmethod
    def _device_cells(r: InventoryRow) -> list[str]:
        """Columns of a device row."""
        memory = memory_text(r.memory_bytes) or "-"
        return [
            r.node,
            r.key,
            r.vendor,
            r.product,
            r.kind,
            r.resource_name or "-",
            memory,
            r.health,
            r.allocated_to or "-",
        ]

    @staticmethod
    def _count_cells(entry: dict) -> list[str]:
        """Count columns of a totals row."""
        teams = ", ".join(entry["teamsAllowed"]) or "-"
        return [str(entry[k]) for k in ("exists", "inUse", "available", "unhealthy", "cordoned")] + [teams]

    def _table(self, headers: list[str], rows: list[list[str]]) -> None:
        """Left-aligned columns as wide as their widest cell."""
        if not rows:
            self.stdout.write(f"{headers[0]}: none")
            return
        widths = [max(len(str(c)) for c in column) for column in zip(headers, *rows, strict=False)]
        for line in [headers, *rows]:
            self.stdout.write("  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
