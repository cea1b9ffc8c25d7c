"""Django admin of the pools' policy models: clusters, flavors and resource classes.

They live with the cluster integration because each save is audited, previewed (a fair-sharing change gets the
what-if replay) and pushed to the clusters (queues.policy.admin_support), and the cluster page shows the check
of Kueue's own configuration (clusters.kube_sync.kueue_config). The models, and so the admin URLs, stay pools'.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import Count, Q
from django.utils import timezone
from django.utils.html import format_html

from clusters.kube_sync.kueue_config import fix_hint
from kernel.admin_inlines import LabelledInlineFormSet
from pools.models import Cluster, ResourceClass, ResourceClassFlavor, ResourceFlavor
from pools.services import ClassSpec, resource_class_check
from queues.policy.admin_support import PolicyAdmin, WhatIfAdminMixin

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


class NodeCount(TypedDict):
    """What the changelists' querysets annotate: the present nodes."""

    _nodes: int


@admin.register(Cluster)
class ClusterAdmin(WhatIfAdminMixin, PolicyAdmin):
    """Clusters and their sync health; changes are audited and pushed; a fair-sharing change is previewed."""

    list_display = (
        "name",
        "display_name",
        "backend",
        "fair_sharing",
        "last_synced_at",
        "last_sync_error_at",
        "node_count",
    )
    list_filter = ("backend", "fair_sharing")
    search_fields = ("name", "display_name")
    readonly_fields = (
        "kueue_config",
        "sync_bookmarks",
        "last_synced_at",
        "last_sync_error",
        "last_sync_error_at",
        "created_at",
    )

    def get_queryset(self, request):
        """Count present nodes in the list query."""
        return super().get_queryset(request).annotate(_nodes=Count("nodes", filter=Q(nodes__gone_at__isnull=True)))

    @admin.display(description="nodes", ordering="_nodes")
    def node_count(self, obj: WithAnnotations[Cluster, NodeCount]) -> int:
        """Present nodes."""
        return obj._nodes

    @admin.display(description="Kueue's configuration")
    def kueue_config(self, obj: Cluster) -> str:
        """The last check of Kueue's own fair-sharing configuration against this switch; how to fix a mismatch."""
        if obj.backend != Cluster.Backend.KUBERNETES:
            return "Not checked: the simulated cluster follows the switch itself."
        if obj.kueue_config_checked_at is None:
            return "Not checked yet: the next configuration push reads Kueue's manager ConfigMap."
        checked = f"{timezone.localtime(obj.kueue_config_checked_at):%Y-%m-%d %H:%M}"
        state = obj.get_kueue_config_state_display()
        if not obj.kueue_config_needs_attention:
            return format_html('<span id="cluster-kueue-config">{} (checked {})</span>', state, checked)
        hint = fix_hint() if obj.kueue_config_state == Cluster.KueueConfig.MISMATCH else ""
        return format_html(
            '<div id="cluster-kueue-config" class="errornote"><strong>{}</strong> (checked {}): {}'
            '<br><span id="cluster-kueue-config-fix">{}</span></div>',
            state,
            checked,
            obj.kueue_config_problem,
            hint,
        )

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        """A change of the fair-sharing switch gets the what-if preview; other edits save directly."""
        if request.method == "POST" and not _fair_sharing_edited(request, object_id):
            return PolicyAdmin.changeform_view(self, request, object_id, form_url, extra_context)
        return super().changeform_view(request, object_id, form_url, extra_context)


def _fair_sharing_edited(request, object_id) -> bool:
    """True when the posted form changes the cluster's fair-sharing switch or strategies."""
    cluster = Cluster.objects.filter(pk=object_id).first() if object_id else None
    if cluster is None:
        return False
    posted = (
        bool(request.POST.get("fair_sharing")),
        request.POST.get("fair_sharing_strategies", cluster.fair_sharing_strategies),
    )
    return posted != (cluster.fair_sharing, cluster.fair_sharing_strategies)


@admin.register(ResourceFlavor)
class ResourceFlavorAdmin(PolicyAdmin):
    """Flavors and how many nodes each selects; audited, pushed to the clusters."""

    list_display = ("name", "display_name", "node_labels", "topology", "node_count")
    list_filter = ("topology",)
    search_fields = ("name", "display_name")

    def get_queryset(self, request):
        """Count present nodes in the list query."""
        return super().get_queryset(request).annotate(_nodes=Count("nodes", filter=Q(nodes__gone_at__isnull=True)))

    @admin.display(description="nodes", ordering="_nodes")
    def node_count(self, obj: WithAnnotations[ResourceFlavor, NodeCount]) -> int:
        """Present nodes of this flavor."""
        return obj._nodes


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
        allowed_kinds=rc.allowed_kinds if isinstance(rc.allowed_kinds, list) else [],
        idle_window_seconds=rc.idle_window_seconds,
        protect_min_runtime_seconds=rc.protect_min_runtime_seconds,
        protect_min_runtime_max_seconds=rc.protect_min_runtime_max_seconds,
        protect_finishing_seconds=rc.protect_finishing_seconds,
        protect_finishing_max_seconds=rc.protect_finishing_max_seconds,
        protect_checkpoint_grace_seconds=rc.protect_checkpoint_grace_seconds,
        protect_checkpoint_default=rc.protect_checkpoint_default,
    )


class ResourceClassFlavorFormSet(LabelledInlineFormSet):
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
class ResourceClassAdmin(PolicyAdmin):
    """Resource classes, validated by the same service the API uses; audited."""

    inlines = [ResourceClassFlavorInline]
    list_display = (
        "name",
        "slug",
        "resource_name",
        "sharing",
        "allowed_counts",
        "allowed_kinds",
        "topology_mode",
        "active",
    )
    list_filter = ("active", "sharing", "resource_name")
    search_fields = ("name", "slug", "description")
    prepopulated_fields = {"slug": ("name",)}

    def save_formset(self, request, form, formset, change):
        """Save the flavors and pass on the service's warnings."""
        super().save_formset(request, form, formset, change)
        for warning in getattr(formset, "warnings", []):
            self.message_user(request, warning, messages.WARNING)
