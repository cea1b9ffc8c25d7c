"""Django admin for the resource truth: topologies, nodes, devices, and health and repair.

The admins of the policy models (clusters, flavors, classes: audited, previewed and pushed to the clusters) live
with the cluster integration, in clusters.pool_admin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import path, reverse
from django.utils import timezone as _tz

from kernel.errors import DomainError
from kernel.labels import state_words
from pools import state_version
from pools.admin_actions import DEVICE_ACTIONS, NODE_ACTIONS
from pools.health import policy as _health_policy
from pools.health import services as _health
from pools.health import tickets as _tickets
from pools.health.catalog import action_words
from pools.health.settle import health_mark
from pools.models import (
    Device,
    DeviceHealthTransition,
    HealthObservation,
    HealthPolicy,
    Node,
    NodeHealthDirective,
    RepairTicket,
    RepairTicketEvent,
    Topology,
    ValidationRun,
)


@admin.register(Topology)
class TopologyAdmin(admin.ModelAdmin):
    """Topology levels."""

    list_display = ("name", "levels")
    search_fields = ("name",)


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
    """Nodes as last imported; the health actions (cordon, quarantine, drain, open a ticket) call the services."""

    list_display = ("name", "cluster", "flavor", "ready", "unschedulable", "device_count", "last_seen_at", "gone_at")
    actions = NODE_ACTIONS
    list_filter = (PresentFilter, "cluster", "flavor", "ready", "unschedulable")
    search_fields = ("name",)
    list_select_related = ("cluster", "flavor")
    readonly_fields = ("first_seen_at", "last_seen_at", "gone_at")
    ordering = ("name", "pk")

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
    """Devices: cards, MIG instances, time-shared replicas; the health actions act on each one's card."""

    list_display = ("key", "node", "vendor", "product", "kind", "resource_name", "memory_bytes", "health", "gone_at")
    list_filter = (PresentFilter, "vendor", "kind", "health", "source", "resource_name")
    search_fields = ("key", "uuid", "node__name", "product")
    list_select_related = ("node",)
    autocomplete_fields = ("node", "parent")
    actions = DEVICE_ACTIONS
    ordering = ("node__name", "index", "key")
    readonly_fields = ("first_seen_at", "last_seen_at", "gone_at")

    def delete_model(self, request, obj: Device) -> None:
        """Delete one device, counting the change of its cluster's engine state."""
        state_version.bump_for_deleted_devices([obj])
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset) -> None:
        """Delete the selected devices, counting the change once per cluster."""
        state_version.bump_for_deleted_devices(list(queryset.only("id", "node_id")))
        super().delete_queryset(request, queryset)


# --- Health and repair (pools/health/): admin actions call the health services --------------------------------


def _adopt(obj, saved) -> None:
    """Make the admin's unsaved object the row a service wrote (for the admin's log and redirect)."""
    for field in type(saved)._meta.concrete_fields:
        setattr(obj, field.attname, getattr(saved, field.attname))
    obj._state.adding = False


class ServiceAddMixin:
    """For admins whose add form calls a service: when the service refused, log nothing and go back to the list."""

    def log_addition(self, request, obj, message):
        """Log only what the service wrote."""
        if obj.pk is not None:
            super().log_addition(request, obj, message)

    def response_add(self, request, obj, post_url_continue=None):
        """Back to the list (with the service's message) when nothing was written."""
        if obj.pk is None:
            opts = obj._meta
            return HttpResponseRedirect(reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"))
        return super().response_add(request, obj, post_url_continue)


class HealthPolicyForm(forms.ModelForm):
    """The policy form, checked by the same rules as the service."""

    class Meta:
        model = HealthPolicy
        fields = [f.name for f in HealthPolicy._meta.fields if f.editable and not f.primary_key]

    def clean(self):
        """Reject JSON settings the policy engine would not understand, naming the field."""
        data = super().clean()
        for name, messages_ in _health_policy.policy_errors(data).items():
            if name in self.fields:
                self.add_error(name, messages_)
        return data


@admin.register(HealthPolicy)
class HealthPolicyAdmin(admin.ModelAdmin):
    """Health thresholds; saving an active policy deactivates the one in force."""

    form = HealthPolicyForm
    list_display = ("name", "active", "ecc_dbe_unhealthy", "temperature_degraded_c", "auto_open_ticket", "updated_at")
    readonly_fields = ("updated_at", "updated_by")
    fieldsets = (
        (None, {"fields": ("name", "active", "auto_open_ticket", "drain_without_checkpoint")}),
        (
            "ECC and memory",
            {"fields": ("ecc_dbe_unhealthy", "ecc_sbe_per_hour_degraded", "row_remap_failure_unhealthy")},
        ),
        (
            "Temperature, clocks, resets, PCIe",
            {
                "fields": (
                    "temperature_degraded_c",
                    "temperature_unhealthy_c",
                    "temperature_sustained_seconds",
                    "throttle_reasons",
                    "throttle_sustained_seconds",
                    "resets_per_day_degraded",
                    "pcie_replays_per_hour_degraded",
                    "rate_min_window_seconds",
                )
            },
        ),
        (
            "XID catalogue",
            {
                "fields": (
                    "xid_action_levels",
                    "xid_severity_levels",
                    "xid_overrides",
                    "unknown_xid_level",
                    "xid_window_seconds",
                    "xid_decay_hours",
                )
            },
        ),
        ("Kubernetes", {"fields": ("node_condition_types",)}),
        (
            "Validation (burn-in)",
            {
                "fields": (
                    "validation_image",
                    "validation_command",
                    "validation_max_runtime_seconds",
                    "validation_sim_runtime_seconds",
                    "validation_failures_before_rma",
                    "validation_team_slug",
                )
            },
        ),
        ("Changed", {"fields": ("updated_at", "updated_by")}),
    )

    def save_model(self, request, obj, form, change):
        """Save through the service (it keeps one policy active)."""
        _health.health_policy_save(policy=obj, actor=_health.Actor.of(request.user))


class ManualObservationForm(forms.ModelForm):
    """An operator's own observation of a device: degraded, unhealthy, or ok to clear an earlier one."""

    level = forms.ChoiceField(choices=[("degraded", "Degraded"), ("unhealthy", "Unhealthy"), ("ok", "OK (clear)")])
    note = forms.CharField(max_length=400)

    class Meta:
        model = HealthObservation
        fields = ("device",)


@admin.register(HealthObservation)
class HealthObservationAdmin(ServiceAddMixin, admin.ModelAdmin):
    """Health evidence from every source; adding one records a manual observation through the service."""

    list_display = ("observed_at", "device", "node", "source", "signal", "level", "value", "message")
    list_filter = ("source", "level", "signal")
    search_fields = ("device__key", "device__uuid", "node__name", "message")
    list_select_related = ("device", "device__node", "node")
    autocomplete_fields = ("device", "node")
    date_hierarchy = "observed_at"

    def get_form(self, request, obj=None, **kwargs):
        """The manual-observation form when adding."""
        if obj is None:
            kwargs["form"] = ManualObservationForm
        return super().get_form(request, obj, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        """Observations are evidence: never edited."""
        if obj is None:
            return ()
        return [f.name for f in HealthObservation._meta.fields]

    def save_model(self, request, obj, form, change):
        """Record the manual observation through the health service."""
        if change:
            return
        try:
            report = health_mark(
                device=form.cleaned_data["device"],
                level=form.cleaned_data["level"],
                note=form.cleaned_data["note"],
                actor=_health.Actor.of(request.user),
            )
        except DomainError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return
        for change_ in report.changes:
            self.message_user(request, str(change_))
        latest = HealthObservation.objects.filter(device=form.cleaned_data["device"]).order_by("-id").first()
        if latest is not None:
            _adopt(obj, latest)


class RepairTicketEventInline(admin.TabularInline):
    """The ticket's history."""

    model = RepairTicketEvent
    extra = 0
    can_delete = False
    fields = ("at", "from_words", "to_words", "actor_label", "note")
    readonly_fields = fields

    @admin.display(description="from")
    def from_words(self, obj: RepairTicketEvent) -> str:
        """The state the ticket left, in words."""
        return state_words(RepairTicket.State, obj.from_state) if obj.from_state else "—"

    @admin.display(description="to")
    def to_words(self, obj: RepairTicketEvent) -> str:
        """The state the ticket went to, in words ("note" for a note)."""
        return state_words(RepairTicket.State, obj.to_state) if obj.to_state else "note"

    def has_add_permission(self, request, obj=None):
        """History is written by the services only."""
        return False


class ValidationRunInline(admin.TabularInline):
    """Burn-in runs of the ticket."""

    model = ValidationRun
    extra = 0
    can_delete = False
    fields = ("attempt", "job", "result", "started_at", "finished_at", "message")
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        """Runs are started with the "start validation" action."""
        return False


class RepairTicketAddForm(forms.ModelForm):
    """Open a ticket by hand for a device (its card) or a whole node."""

    class Meta:
        model = RepairTicket
        fields = ("node", "device", "reason")

    def clean(self):
        """A device's node is its own; a node alone means the whole node."""
        data = super().clean()
        device, node = data.get("device"), data.get("node")
        if device is not None and node is not None and device.node_id != node.pk:
            self.add_error("device", f"{device.key} is on node {device.node.name}, not {node.name}")
        return data


class RecommendedActionFilter(admin.SimpleListFilter):
    """Tickets by the XID catalogue's recommended action, in words ("none" for tickets without one)."""

    title = "recommended action"
    parameter_name = "recommended_action"

    def lookups(self, request, model_admin):
        """Each action the tickets have, said in words."""
        found = RepairTicket.objects.order_by().values_list("recommended_action", flat=True).distinct()
        return [(value or "-", action_words(value) if value else "none") for value in sorted(set(found))]

    def queryset(self, request, queryset):
        """The tickets with the chosen action ("-": none)."""
        value = self.value()
        if value is None:
            return queryset
        return queryset.filter(recommended_action="" if value == "-" else value)


@dataclass(frozen=True)
class TicketAction:
    """A repair step an admin takes on tickets: from the list's actions or a button on the ticket's page."""

    name: str
    label: str
    service: Callable
    #: The states the step starts from (its service refuses the others).
    states: tuple[str, ...]
    #: What was done, in words, from the service's return value.
    done: Callable[[object], str]


T = RepairTicket.State
TICKET_ACTIONS = (
    TicketAction(
        "start_validation",
        "Repair done: start validation",
        _tickets.ticket_start_validation,
        (T.IN_REPAIR,),
        lambda run: f"validation started: burn-in job #{run.job_id} submitted",
    ),
    TicketAction(
        "drain_now",
        "Drain now (evict remaining jobs)",
        _tickets.ticket_drain_now,
        (T.DRAINING,),
        lambda evicted: f"{len(evicted)} job(s) evicted to drain it" if evicted else "no job left to evict",
    ),
    TicketAction(
        "mark_rma",
        "Send to RMA (retire)",
        _tickets.ticket_mark_rma,
        RepairTicket.OPEN_STATES,
        lambda ticket: "sent to RMA: its device(s) are retired",
    ),
)


def _ticket_act(modeladmin, request, step: TicketAction, ticket: RepairTicket) -> None:
    """Run one step on one ticket and say what happened (or why not) in the admin's messages."""
    try:
        result = step.service(ticket=ticket, actor=_health.Actor.of(request.user))
    except DomainError as exc:
        modeladmin.message_user(request, f"Ticket #{ticket.pk}: not done: {exc}", messages.ERROR)
    else:
        modeladmin.message_user(request, f"Ticket #{ticket.pk}: {step.done(result)}.")


def _ticket_action(step: TicketAction):
    def action(modeladmin, request, queryset):
        for ticket in queryset.order_by("pk"):
            _ticket_act(modeladmin, request, step, ticket)

    action.short_description = step.label
    action.__name__ = f"ticket_{step.service.__name__}"
    return action


@admin.register(RepairTicket)
class RepairTicketAdmin(ServiceAddMixin, admin.ModelAdmin):
    """The repair queue: open tickets by hand, start validation after repair, force a drain, send to RMA."""

    list_display = ("id", "node", "device", "state", "age", "action", "validation_failures", "reason")
    list_filter = ("state", RecommendedActionFilter, "node__cluster")
    search_fields = ("node__name", "device__key", "device__uuid", "reason")
    list_select_related = ("node", "device")
    # pickers that search (node name; device key, uuid or node), not raw ids
    autocomplete_fields = ("node", "device")
    inlines = [RepairTicketEventInline, ValidationRunInline]
    actions = [_ticket_action(step) for step in TICKET_ACTIONS]
    change_form_template = "admin/pools/repairticket/change_form.html"

    def get_urls(self):
        """The ticket page's step buttons post to ``<id>/step/<name>/``."""
        step = path(
            "<path:object_id>/step/<str:name>/",
            self.admin_site.admin_view(self.step_view),
            name="pools_repairticket_step",
        )
        return [step, *super().get_urls()]

    def step_view(self, request, object_id: str, name: str):
        """Run one repair step on this ticket (POST, with the change permission), then back to its page."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        ticket = self.get_object(request, object_id)
        if ticket is None:
            raise Http404("No such repair ticket.")
        if not self.has_change_permission(request, ticket):
            raise PermissionDenied
        step = next((s for s in TICKET_ACTIONS if s.name == name), None)
        if step is None:
            raise Http404("No such repair step.")
        _ticket_act(self, request, step, ticket)
        return HttpResponseRedirect(reverse("admin:pools_repairticket_change", args=[ticket.pk]))

    def change_view(self, request, object_id, form_url="", extra_context=None):
        """The ticket page, with a button for each step its state allows."""
        ticket = self.get_object(request, object_id)
        steps = []
        if ticket is not None and self.has_change_permission(request, ticket):
            steps = [
                {"label": s.label, "url": reverse("admin:pools_repairticket_step", args=[ticket.pk, s.name])}
                for s in TICKET_ACTIONS
                if ticket.state in s.states
            ]
        return super().change_view(request, object_id, form_url, {**(extra_context or {}), "ticket_steps": steps})

    @admin.display(description="recommended action", ordering="recommended_action")
    def action(self, obj: RepairTicket) -> str:
        """The XID catalogue's recommended action, in words."""
        return action_words(obj.recommended_action)

    @admin.display(description="age")
    def age(self, obj: RepairTicket) -> str:
        """Time since opened (to close for closed tickets)."""
        end = obj.closed_at or _tz.now()
        hours = (end - obj.opened_at).total_seconds() / 3600
        return f"{hours / 24:.1f} d" if hours >= 48 else f"{hours:.1f} h"

    def get_form(self, request, obj=None, **kwargs):
        """The short "open a ticket" form when adding."""
        if obj is None:
            kwargs["form"] = RepairTicketAddForm
        return super().get_form(request, obj, **kwargs)

    def get_fields(self, request, obj=None):
        """Add: node, device, reason; change: everything, read-only."""
        if obj is None:
            return ("node", "device", "reason")
        return super().get_fields(request, obj)

    def get_readonly_fields(self, request, obj=None):
        """Tickets move only through the actions."""
        if obj is None:
            return ()
        return [f.name for f in RepairTicket._meta.fields]

    def get_inlines(self, request, obj):
        """History and runs on existing tickets only."""
        return self.inlines if obj is not None else []

    def save_model(self, request, obj, form, change):
        """Open the ticket through the service (it drains and quarantines)."""
        if change:
            return
        try:
            ticket = _tickets.ticket_open(
                device=form.cleaned_data.get("device"),
                node=form.cleaned_data.get("node"),
                reason=form.cleaned_data["reason"],
                actor=_health.Actor.of(request.user),
            )
        except DomainError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return
        _adopt(obj, ticket)

    def save_related(self, request, form, formsets, change):
        """Nothing else to save: the service wrote the ticket."""


@admin.register(DeviceHealthTransition)
class DeviceHealthTransitionAdmin(admin.ModelAdmin):
    """Every health state change, with its evidence."""

    list_display = ("at", "device", "before", "after", "actor_label", "ticket", "reason")
    list_filter = ("after", "before")
    search_fields = ("device__key", "device__uuid", "device__node__name", "reason")
    list_select_related = ("device", "device__node", "ticket")
    date_hierarchy = "at"

    def has_add_permission(self, request):
        """Transitions are written by the state machine only."""
        return False

    def has_change_permission(self, request, obj=None):
        """Evidence is never edited."""
        return False


@admin.register(NodeHealthDirective)
class NodeHealthDirectiveAdmin(admin.ModelAdmin):
    """Taints and cordons the portal wants on managed kubernetes nodes, and whether the backend applied them."""

    list_display = ("node", "kind", "key", "value", "device", "ticket", "created_at", "applied_at", "released_at")
    list_filter = ("kind",)
    list_select_related = ("node", "device", "ticket")

    def has_add_permission(self, request):
        """Written by the repair workflow only."""
        return False

    def has_change_permission(self, request, obj=None):
        """Written by the repair workflow and the backend only."""
        return False
