"""Writes of the pool that are not inventory: resource classes, defined by admins over flavors."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction

from kernel.errors import ValidationFailed
from kernel.quantity import parse_quantity
from pools import state_version
from pools.inventory.versions import version_tuple
from pools.models import Device, ResourceClass, ResourceClassFlavor, ResourceFlavor
from pools.selectors import SHARING_KIND
from pools.workload_kinds import KINDS, default_allowed_kinds

RESOURCE_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-\d+g\.\d+gb$")
HOSTNAME_LEVEL = "kubernetes.io/hostname"
#: Shortest and longest idle window a class may set (shorter would stop a session between two cells).
MIN_IDLE_WINDOW_SECONDS = 300
MAX_IDLE_WINDOW_SECONDS = 7 * 24 * 3600
#: Protected work: the longest protection a class may set, and the shortest checkpoint grace (a tick of the simulated
#: cluster, a sync of a real one, must fall inside it).
MAX_PROTECTION_SECONDS = 7 * 24 * 3600
MIN_CHECKPOINT_GRACE_SECONDS = 60


@dataclass
class ClassSpec:
    """What an admin gives to define a resource class."""

    slug: str
    name: str
    resource_name: str
    sharing: str
    flavors: Sequence[ResourceFlavor]
    allowed_counts: Sequence[int]
    description: str = ""
    cpu_per_device: str = "8"
    memory_per_device: str = "64Gi"
    topology_mode: str = ""
    topology_level: str = ""
    min_driver_version: str = ""
    min_cuda_version: str = ""
    active: bool = True
    display_order: int = 100
    allowed_kinds: Sequence[str] = field(default_factory=default_allowed_kinds)
    idle_window_seconds: int | None = None
    protect_min_runtime_seconds: int | None = None
    protect_min_runtime_max_seconds: int | None = None
    protect_finishing_seconds: int | None = None
    protect_finishing_max_seconds: int | None = None
    protect_checkpoint_grace_seconds: int | None = None
    protect_checkpoint_default: bool = False


@dataclass
class ClassCheck:
    """Errors (the class cannot be saved) and warnings (it can, but an admin should know)."""

    errors: dict[str, list[str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def error(self, field_name: str, message: str) -> None:
        """Record an error against a field."""
        self.errors.setdefault(field_name, []).append(message)


def resource_class_check(spec: ClassSpec, *, instance: ResourceClass | None = None) -> ClassCheck:
    """Validate a class definition; every message names the field and the limit."""
    check = ClassCheck()
    _check_resource(spec, check)
    _check_counts(spec, check)
    for field_name in ("cpu_per_device", "memory_per_device"):
        value = getattr(spec, field_name)
        try:
            if parse_quantity(value) <= 0:
                check.error(field_name, f"must be more than zero, got {value!r}")
        except ValueError as exc:
            check.error(field_name, str(exc))
    for field_name in ("min_driver_version", "min_cuda_version"):
        value = getattr(spec, field_name)
        if value and not version_tuple(value):
            check.error(field_name, f"{value!r} is not a version such as 550.54.15 or 12.4")
    _check_topology(spec, check)
    _check_flavors(spec, check)
    _check_kinds(spec, check)
    _check_protection(spec, check)
    others = ResourceClass.objects.filter(active=True)
    if instance is not None and instance.pk:
        others = others.exclude(pk=instance.pk)
    active = others.count() + int(spec.active)
    limit = settings.MAX_RESOURCE_CLASSES_ADVISED
    if active > limit:
        check.warnings.append(
            f"{active} active classes (advised at most {limit}): too many near-identical options make "
            "researchers guess; merge classes that differ only in counts."
        )
    return check


def _check_resource(spec: ClassSpec, check: ClassCheck) -> None:
    """The resource name is well formed and agrees with the sharing mode."""
    rn = spec.resource_name
    if not RESOURCE_NAME.match(rn):
        check.error("resource_name", f"{rn!r} is not a Kubernetes resource name such as nvidia.com/gpu")
        return
    if spec.sharing not in SHARING_KIND:
        check.error("sharing", f"must be one of {', '.join(ResourceClass.Sharing.values)}")
        return
    if spec.sharing == ResourceClass.Sharing.MIG and not MIG_RESOURCE.match(rn):
        check.error(
            "resource_name", f"a MIG class needs a MIG profile resource such as nvidia.com/mig-1g.10gb, not {rn}"
        )
    if spec.sharing != ResourceClass.Sharing.MIG and MIG_RESOURCE.match(rn):
        check.error("sharing", f"{rn} is a MIG profile: set sharing to MIG slice")
    if spec.sharing == ResourceClass.Sharing.DEDICATED and rn.endswith(".shared"):
        check.error("sharing", f"{rn} is a time-shared resource: a dedicated class cannot hand it out")


def _check_counts(spec: ClassSpec, check: ClassCheck) -> None:
    """Allowed counts are distinct positive integers."""
    counts = list(spec.allowed_counts)
    if not counts:
        check.error("allowed_counts", "give at least one count of devices per pod, e.g. [1, 2, 4, 8]")
        return
    bad = [c for c in counts if not isinstance(c, int) or isinstance(c, bool) or c < 1]
    if bad:
        check.error("allowed_counts", f"counts must be whole numbers of at least 1, got {bad}")
    elif len(set(counts)) != len(counts):
        check.error("allowed_counts", f"a count is listed twice: {counts}")
    if spec.sharing == ResourceClass.Sharing.TIME_SHARED and any(c > 1 for c in counts if isinstance(c, int)):
        check.error("allowed_counts", "a time-shared class gives one replica per pod (device plugins reject more)")


def _check_kinds(spec: ClassSpec, check: ClassCheck) -> None:
    """Allowed kinds are known and distinct, at least one; the idle window is within its bounds."""
    kinds = list(spec.allowed_kinds) if isinstance(spec.allowed_kinds, list | tuple) else None
    if not kinds:
        check.error("allowed_kinds", f'give at least one workload kind, e.g. ["batch"] (kinds: {", ".join(KINDS)})')
    else:
        unknown = [k for k in kinds if k not in KINDS]
        if unknown:
            check.error("allowed_kinds", f"unknown workload kind(s) {unknown} (kinds: {', '.join(KINDS)})")
        elif len(set(kinds)) != len(kinds):
            check.error("allowed_kinds", f"a kind is listed twice: {kinds}")
    window = spec.idle_window_seconds
    if window is not None and (
        isinstance(window, bool)
        or not isinstance(window, int)
        or not MIN_IDLE_WINDOW_SECONDS <= window <= MAX_IDLE_WINDOW_SECONDS
    ):
        check.error(
            "idle_window_seconds",
            f"must be empty (never) or between {MIN_IDLE_WINDOW_SECONDS} s and "
            f"{MAX_IDLE_WINDOW_SECONDS // 86400} days, got {window!r}",
        )


def _check_protection(spec: ClassSpec, check: ClassCheck) -> None:
    """Protected work: each duration within its bounds, a job's maximum no shorter than the class's own default."""
    for field_name, low in (
        ("protect_min_runtime_seconds", 60),
        ("protect_min_runtime_max_seconds", 60),
        ("protect_finishing_seconds", 60),
        ("protect_finishing_max_seconds", 60),
        ("protect_checkpoint_grace_seconds", MIN_CHECKPOINT_GRACE_SECONDS),
    ):
        value = getattr(spec, field_name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_PROTECTION_SECONDS
        ):
            check.error(
                field_name,
                f"must be empty (none) or between {low} s and {MAX_PROTECTION_SECONDS // 86400} days, got {value!r}",
            )
    for default, maximum in (
        ("protect_min_runtime_seconds", "protect_min_runtime_max_seconds"),
        ("protect_finishing_seconds", "protect_finishing_max_seconds"),
    ):
        low, high = getattr(spec, default), getattr(spec, maximum)
        if isinstance(low, int) and isinstance(high, int) and high < low:
            check.error(maximum, f"must be at least the class's own {low} s (a job may ask for more, not less)")
    if spec.protect_checkpoint_default and spec.protect_checkpoint_grace_seconds is None:
        check.error(
            "protect_checkpoint_default",
            "set the checkpoint grace period too: how long after a checkpoint a job may still be preempted",
        )


def _check_topology(spec: ClassSpec, check: ClassCheck) -> None:
    """A topology rule has both a mode and a level, and the level exists in every flavor's topology."""
    if bool(spec.topology_mode) != bool(spec.topology_level):
        check.error("topology_level", "set both the topology mode (required/preferred) and the level, or neither")
        return
    if not spec.topology_level or spec.topology_level == HOSTNAME_LEVEL:
        return
    for flavor in spec.flavors:
        levels = flavor.topology.levels if flavor.topology is not None else []
        if spec.topology_level not in levels:
            check.error(
                "topology_level",
                f"flavor {flavor.name} has no topology level {spec.topology_level} "
                f"(its levels: {', '.join(levels) or 'none'})",
            )


def _check_flavors(spec: ClassSpec, check: ClassCheck) -> None:
    """Flavors are listed once, carry the class's resource, and never mix device kinds."""
    if not spec.flavors:
        check.error("flavors", "pick at least one flavor the class may land on")
        return
    names = [f.name for f in spec.flavors]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        check.error("flavors", f"flavor listed twice: {', '.join(dupes)}")
    if check.errors.get("resource_name") or check.errors.get("sharing"):
        return
    wanted = SHARING_KIND[spec.sharing]
    kinds = (
        Device.objects.filter(
            node__flavor__in=spec.flavors,
            node__gone_at__isnull=True,
            gone_at__isnull=True,
            resource_name=spec.resource_name,
        )
        .values_list("node__flavor__name", "kind")
        .distinct()
    )
    by_flavor: dict[str, set[str]] = {}
    for flavor_name, kind in kinds:
        by_flavor.setdefault(flavor_name, set()).add(kind)
    for flavor in spec.flavors:
        found = by_flavor.get(flavor.name)
        if found is None:
            if flavor.nodes.filter(gone_at__isnull=True).exists():
                check.error("flavors", f"flavor {flavor.name} has nodes but none offers {spec.resource_name}")
            else:
                check.warnings.append(f"flavor {flavor.name} has no nodes yet: the class offers nothing there")
            continue
        wrong = sorted(found - {wanted})
        if wrong:
            labels = ", ".join(Device.Kind(k).label.lower() for k in wrong)
            check.error(
                "flavors",
                f"flavor {flavor.name} offers {spec.resource_name} as {labels}; a "
                f"{ResourceClass.Sharing(spec.sharing).label.lower()} class must not mix device kinds",
            )


@transaction.atomic
def resource_class_save(*, spec: ClassSpec, instance: ResourceClass | None = None) -> tuple[ResourceClass, list[str]]:
    """Create or update a resource class; raises ValidationFailed with every problem; returns warnings."""
    check = resource_class_check(spec, instance=instance)
    if check.errors:
        raise ValidationFailed(check.errors)
    rc = instance or ResourceClass()
    for attr in (
        "slug",
        "name",
        "description",
        "resource_name",
        "sharing",
        "cpu_per_device",
        "memory_per_device",
        "topology_mode",
        "topology_level",
        "min_driver_version",
        "min_cuda_version",
        "active",
        "display_order",
        "idle_window_seconds",
        "protect_min_runtime_seconds",
        "protect_min_runtime_max_seconds",
        "protect_finishing_seconds",
        "protect_finishing_max_seconds",
        "protect_checkpoint_grace_seconds",
        "protect_checkpoint_default",
    ):
        setattr(rc, attr, getattr(spec, attr))
    rc.allowed_counts = sorted(spec.allowed_counts)
    rc.allowed_kinds = [str(k) for k in KINDS if k in spec.allowed_kinds]  # one order everywhere: the kinds' own
    rc.full_clean(exclude=["allowed_counts", "allowed_kinds"])
    rc.save()
    resource_class_set_flavors(resource_class=rc, flavors=spec.flavors)
    return rc, check.warnings


def resource_class_set_flavors(*, resource_class: ResourceClass, flavors: Sequence[ResourceFlavor]) -> None:
    """Replace the class's flavors with ``flavors`` in that preference order."""
    ResourceClassFlavor.objects.filter(resource_class=resource_class).delete()
    ResourceClassFlavor.objects.bulk_create(
        ResourceClassFlavor(resource_class=resource_class, flavor=f, order=i) for i, f in enumerate(flavors)
    )
    state_version.bump()  # bulk_create sends no signal
