"""Django admin for the resource truth."""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import Count, Q
from django.forms.models import BaseInlineFormSet

from pools.models import Cluster, Device, Node, ResourceClass, ResourceClassFlavor, ResourceFlavor, Topology
from pools.services import ClassSpec, resource_class_check


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    """Clusters and their sync health."""

    list_display = ("name", "display_name", "backend", "last_synced_at", "last_sync_error_at", "node_count")
    list_filter = ("backend",)
    search_fields = ("name", "display_name")
    readonly_fields = ("sync_bookmarks", "last_synced_at", "last_sync_error", "last_sync_error_at", "created_at")

    def get_queryset(self, request):
        """Count present nodes in the list query."""
        return super().get_queryset(request).annotate(_nodes=Count("nodes", filter=Q(nodes__gone_at__isnull=True)))

    @admin.display(description="nodes", ordering="_nodes")
    def node_count(self, obj: Cluster) -> int:
        """Present nodes."""
        return obj._nodes


@admin.register(Topology)
class TopologyAdmin(admin.ModelAdmin):
    """Topology levels."""

    list_display = ("name", "levels")
    search_fields = ("name",)


@admin.register(ResourceFlavor)
class ResourceFlavorAdmin(admin.ModelAdmin):
    """Flavors and how many nodes each selects."""

    list_display = ("name", "display_name", "node_labels", "topology", "node_count")
    list_filter = ("topology",)
    search_fields = ("name", "display_name")

    def get_queryset(self, request):
        """Count present nodes in the list query."""
        return super().get_queryset(request).annotate(_nodes=Count("nodes", filter=Q(nodes__gone_at__isnull=True)))

    @admin.display(description="nodes", ordering="_nodes")
    def node_count(self, obj: ResourceFlavor) -> int:
        """Present nodes of this flavor."""
        return obj._nodes


class PresentFilter(admin.SimpleListFilter):
    """Present vs gone rows."""

    title = "presence"
    parameter_name = "present"

    def lookups(self, request, model_admin):
        """The two choices."""
        return [("yes", "Present"), ("no", "Gone")]

    def queryset(self, request, queryset):
        """Filter on gone_at."""
        if self.value() == "yes":
            return queryset.filter(gone_at__isnull=True)
        if self.value() == "no":
            return queryset.filter(gone_at__isnull=False)
        return queryset


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    """Nodes as last imported."""

    list_display = ("name", "cluster", "flavor", "ready", "unschedulable", "device_count", "last_seen_at", "gone_at")
    list_filter = (PresentFilter, "cluster", "flavor", "ready", "unschedulable")
    search_fields = ("name",)
    list_select_related = ("cluster", "flavor")
    readonly_fields = ("first_seen_at", "last_seen_at", "gone_at")

    def get_queryset(self, request):
        """Count schedulable units in the list query."""
        return (
            super()
            .get_queryset(request)
            .annotate(
                _devices=Count("devices", filter=Q(devices__gone_at__isnull=True) & ~Q(devices__resource_name=""))
            )
        )

    @admin.display(description="units", ordering="_devices")
    def device_count(self, obj: Node) -> int:
        """Schedulable units on the node."""
        return obj._devices


@admin.register(Device)
class DeviceAdmin(admin.ModelAdmin):
    """Devices: cards, MIG instances, time-shared replicas."""

    list_display = ("key", "node", "vendor", "product", "kind", "resource_name", "memory_bytes", "health", "gone_at")
    list_filter = (PresentFilter, "vendor", "kind", "health", "source", "resource_name")
    search_fields = ("key", "uuid", "node__name", "product")
    list_select_related = ("node",)
    raw_id_fields = ("node", "parent")
    readonly_fields = ("first_seen_at", "last_seen_at", "gone_at")


def class_spec_from(rc: ResourceClass, flavors: list[ResourceFlavor]) -> ClassSpec:
    """The service's view of a class being edited in the admin."""
    return ClassSpec(
        slug=rc.slug,
        name=rc.name,
        resource_name=rc.resource_name,
        sharing=rc.sharing,
        flavors=flavors,
        allowed_counts=rc.allowed_counts if isinstance(rc.allowed_counts, list) else [],
        description=rc.description,
        cpu_per_device=rc.cpu_per_device,
        memory_per_device=rc.memory_per_device,
        topology_mode=rc.topology_mode,
        topology_level=rc.topology_level,
        min_driver_version=rc.min_driver_version,
        min_cuda_version=rc.min_cuda_version,
        active=rc.active,
        display_order=rc.display_order,
    )


class ResourceClassFlavorFormSet(BaseInlineFormSet):
    """Validates the whole class, flavors included, with the service's rules before anything is saved."""

    warnings: list[str]

    def clean(self) -> None:
        """Run resource_class_check on the edited class and its flavors in the order given."""
        super().clean()
        self.warnings = []
        rows = [
            f.cleaned_data
            for f in self.forms
            if f.cleaned_data and not f.cleaned_data.get("DELETE") and f.cleaned_data.get("flavor")
        ]
        flavors = [row["flavor"] for row in sorted(rows, key=lambda r: r.get("order") or 0)]
        check = resource_class_check(class_spec_from(self.instance, flavors), instance=self.instance)
        if check.errors:
            raise ValidationError([f"{name}: {msg}" for name, msgs in check.errors.items() for msg in msgs])
        self.warnings = check.warnings


class ResourceClassFlavorInline(admin.TabularInline):
    """Flavors of a class in preference order."""

    model = ResourceClassFlavor
    formset = ResourceClassFlavorFormSet
    extra = 1
    ordering = ("order",)


@admin.register(ResourceClass)
class ResourceClassAdmin(admin.ModelAdmin):
    """Resource classes, validated by the same service the API uses."""

    inlines = [ResourceClassFlavorInline]
    list_display = ("name", "slug", "resource_name", "sharing", "allowed_counts", "topology_mode", "active")
    list_filter = ("active", "sharing", "resource_name")
    search_fields = ("name", "slug", "description")
    prepopulated_fields = {"slug": ("name",)}

    def save_formset(self, request, form, formset, change):
        """Save the flavors and pass on the service's warnings."""
        super().save_formset(request, form, formset, change)
        for warning in getattr(formset, "warnings", []):
            self.message_user(request, warning, messages.WARNING)
