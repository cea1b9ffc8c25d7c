"""Health and repair models: the policy, observations and signals, repair tickets, validation runs, directives."""

from __future__ import annotations

from django.conf import settings as _settings
from django.db import models
from django.db.models import Q

from kernel.labels import state_words
from pools.models.inventory import Device, HealthState, Node, dns_label


def _actor() -> models.ForeignKey:
    """A nullable "who did it" user reference that never blocks deleting the user."""
    return models.ForeignKey(
        _settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )


class HealthLevel(models.TextChoices):
    """What one signal says about a device; ``unknown`` is never read as healthy."""

    OK = "ok", "OK"
    UNKNOWN = "unknown", "Unknown (no data)"
    DEGRADED = "degraded", "Degraded"
    UNHEALTHY = "unhealthy", "Unhealthy"


def _default_xid_action_levels() -> dict[str, str]:
    """Device effect of each recommended action of the XID catalogue (pools/health/xid.yaml)."""
    return {
        "none": "ok",
        "restart_app": "ok",
        "follow_companion_xid": "ok",
        "investigate_software": "degraded",
        "restart_fabric_manager": "degraded",
        "check_hardware": "degraded",
        "reset_gpu": "unhealthy",
        "drain_and_reset_gpu": "unhealthy",
        "reboot_node": "unhealthy",
        "contact_support_rma": "unhealthy",
    }


def _default_xid_severity_levels() -> dict[str, str]:
    """Device effect of each catalogue severity (the worse of action and severity wins)."""
    return {"info": "ok", "app": "ok", "degraded": "degraded", "critical": "unhealthy", "fatal": "unhealthy"}


def _default_throttle_reasons() -> list[str]:
    """Clock-event reasons that mean the hardware is protecting itself (NVML clocksEventReasons names)."""
    return ["hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown"]


def _default_node_condition_types() -> list[str]:
    """Node conditions (status True) that make a node's GPUs unhealthy: NVSentinel's health check names.

    NVSentinel's platform connector sets a condition True only for a fatal health event (docs/INTEGRATIONS.md,
    "Condition vs Event Behavior"): the GPU health monitor's XID check and DCGM watches of the GPU itself, and the
    syslog health monitor's checks. Thermal and power watches are left out: throttling is what the portal's own
    DCGM thresholds grade as degraded (NVSentinel's default quarantine rules leave out its power-throttle error).
    """
    return [
        "GpuXidError",
        "GpuMemWatch",
        "GpuPcieWatch",
        "GpuInforomWatch",
        "GpuSmWatch",
        "GpuNvlinkWatch",
        "GpuMcuWatch",
        "GpuPmuWatch",
        "GpuDriverWatch",
        "SysLogsXIDError",
        "SysLogsSXIDError",
        "SysLogsGPUFallenOff",
    ]


def _default_validation_command() -> list[str]:
    """DCGM diagnostics level 3, then an NCCL all-reduce test over the pinned GPUs when the image has one."""
    return [
        "/bin/sh",
        "-c",
        "dcgmi diag -r 3 && if command -v all_reduce_perf >/dev/null; then "
        'all_reduce_perf -b 8M -e 1G -f 2 -c 1 -g "${PORTAL_VALIDATION_GPUS:-1}"; '
        "else echo 'all_reduce_perf is not in this image: NCCL test skipped'; fi",
    ]


class HealthPolicy(models.Model):
    """Thresholds that turn health observations into device states; the one ``active`` row is in force."""

    class DrainMode(models.TextChoices):
        EVICT = "evict", "Evict jobs without a checkpoint policy at once (GPU time lost is recorded)"
        WAIT = "wait", "Let jobs without a checkpoint policy finish; the device leaves when they end"

    name = models.CharField(max_length=63, unique=True, default="default")
    active = models.BooleanField(default=True)
    ecc_dbe_unhealthy = models.PositiveIntegerField(
        default=1, help_text="Double-bit (uncorrectable) ECC errors at or above this make a GPU unhealthy; 0: off."
    )
    ecc_sbe_per_hour_degraded = models.PositiveIntegerField(
        default=100, help_text="Single-bit (corrected) ECC errors per hour at or above this degrade a GPU; 0: off."
    )
    temperature_degraded_c = models.PositiveSmallIntegerField(
        default=87, help_text="GPU temperature (°C) that degrades the GPU when sustained; 0: off."
    )
    temperature_unhealthy_c = models.PositiveSmallIntegerField(
        default=95, help_text="GPU temperature (°C) that makes the GPU unhealthy when sustained; 0: off."
    )
    temperature_sustained_seconds = models.PositiveIntegerField(
        default=300, help_text="How long a temperature must stay at or above a threshold to count; 0: at once."
    )
    resets_per_day_degraded = models.PositiveSmallIntegerField(
        default=3, help_text="GPU resets (or driver reloads) within 24 hours that degrade the GPU; 0: off."
    )
    throttle_reasons = models.JSONField(
        default=_default_throttle_reasons,
        blank=True,
        help_text="Clock-throttle reasons that count: hw_slowdown, hw_thermal_slowdown, hw_power_brake_slowdown, "
        "sw_thermal_slowdown, sw_power_cap, sync_boost, applications_clocks_setting, display_clock_setting.",
    )
    throttle_sustained_seconds = models.PositiveIntegerField(
        default=600, help_text="How long a counted throttle reason must stay active to degrade the GPU; 0: at once."
    )
    row_remap_failure_unhealthy = models.BooleanField(
        default=True, help_text="A failed DRAM row remap (out of spare rows) makes the GPU unhealthy."
    )
    pcie_replays_per_hour_degraded = models.PositiveIntegerField(
        default=480, help_text="PCIe replays per hour at or above this degrade the GPU; 0: off."
    )
    rate_min_window_seconds = models.PositiveIntegerField(
        default=300, help_text="Rates (ECC, PCIe) are judged over at least this long, so one burst is not a rate."
    )
    xid_action_levels = models.JSONField(
        default=_default_xid_action_levels,
        help_text="Catalogue recommended action → ok | degraded | unhealthy.",
    )
    xid_severity_levels = models.JSONField(
        default=_default_xid_severity_levels,
        help_text="Catalogue severity → ok | degraded | unhealthy (the worse of action and severity wins).",
    )
    xid_overrides = models.JSONField(
        default=dict, blank=True, help_text='Per-XID level that overrides the catalogue, e.g. {"109": "ok"}.'
    )
    unknown_xid_level = models.CharField(
        max_length=10,
        choices=[("ok", "OK"), ("degraded", "Degraded"), ("unhealthy", "Unhealthy")],
        default="unhealthy",
        help_text="Level of an XID the catalogue does not list (NVIDIA's device plugin marks those unhealthy).",
    )
    xid_window_seconds = models.PositiveIntegerField(
        default=300, help_text="XIDs of one GPU closer than this form one chain; the chain's worst action wins."
    )
    xid_decay_hours = models.PositiveIntegerField(
        default=24, help_text="A degrading XID stops counting after this many hours without another XID."
    )
    node_condition_types = models.JSONField(
        default=_default_node_condition_types,
        blank=True,
        help_text="Node condition types that, when True, make every GPU of the node unhealthy.",
    )
    auto_open_ticket = models.BooleanField(
        default=True, help_text="Open a repair ticket (and drain) as soon as a device turns unhealthy."
    )
    drain_without_checkpoint = models.CharField(max_length=10, choices=DrainMode.choices, default=DrainMode.EVICT)
    validation_image = models.CharField(
        max_length=500,
        default="nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04",
        help_text="Image of the burn-in job (use your site's mirror on air-gapped clusters).",
    )
    validation_command = models.JSONField(default=_default_validation_command)
    validation_max_runtime_seconds = models.PositiveIntegerField(default=3600)
    validation_sim_runtime_seconds = models.PositiveIntegerField(
        default=300, help_text="Simulated backend only: how long the burn-in job runs."
    )
    validation_failures_before_rma = models.PositiveSmallIntegerField(
        default=2, help_text="Failed validations after which the device goes to RMA (retired) instead of repair."
    )
    validation_team_slug = models.CharField(max_length=63, default="platform-validation", validators=[dns_label])
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        _settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )

    class Meta:
        ordering = ["-active", "name"]
        verbose_name_plural = "health policies"
        constraints = [models.UniqueConstraint(fields=["active"], condition=Q(active=True), name="one_active_policy")]

    def __str__(self) -> str:
        return f"{self.name}{' (active)' if self.active else ''}"


class HealthObservation(models.Model):
    """One piece of health evidence about a device (or a whole node), as a source reported it."""

    class Source(models.TextChoices):
        DCGM = "dcgm", "DCGM exporter"
        NVML = "nvml", "NVML"
        NODE_CONDITION = "node-condition", "Kubernetes node condition / taint / allocatable"
        XID = "xid", "XID event"
        MANUAL = "manual", "Manual"

    device = models.ForeignKey(Device, null=True, blank=True, on_delete=models.CASCADE, related_name="observations")
    node = models.ForeignKey(Node, null=True, blank=True, on_delete=models.CASCADE, related_name="observations")
    source = models.CharField(max_length=20, choices=Source.choices)
    signal = models.CharField(max_length=40, help_text="e.g. xid, ecc_dbe, temperature, node_condition.")
    level = models.CharField(max_length=10, choices=HealthLevel.choices)
    value = models.FloatField(null=True, blank=True)
    message = models.CharField(max_length=500)
    evidence = models.JSONField(default=dict, blank=True, help_text="Raw labels, values and catalogue facts.")
    observed_at = models.DateTimeField()
    recorded_at = models.DateTimeField(auto_now_add=True)
    dedupe_key = models.CharField(max_length=200, blank=True, help_text="Makes re-importing the same event a no-op.")

    class Meta:
        ordering = ["-observed_at", "-id"]
        indexes = [
            models.Index(fields=["device", "signal", "-observed_at"], name="healthobs_device_signal"),
            models.Index(fields=["node", "-observed_at"], name="healthobs_node"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["dedupe_key"], condition=~Q(dedupe_key=""), name="healthobs_dedupe_once"),
        ]

    def __str__(self) -> str:
        when = f" @ {self.observed_at:%Y-%m-%d %H:%M:%S}" if self.observed_at else ""
        return f"{self.signal}={self.level}{when}"


class HealthSignal(models.Model):
    """The last known level of one signal of one device, with what rates and "sustained" checks need to remember.

    A series missing from a scrape leaves the row as it was (missing is unknown, never healthy).
    """

    device = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="health_signals")
    signal = models.CharField(max_length=40)
    level = models.CharField(max_length=10, choices=HealthLevel.choices, default=HealthLevel.UNKNOWN)
    value = models.FloatField(null=True, blank=True)
    message = models.CharField(max_length=500, blank=True)
    since = models.DateTimeField(null=True, blank=True, help_text="When the signal took its current level.")
    observed_at = models.DateTimeField(null=True, blank=True, help_text="Last time a source reported it.")
    data = models.JSONField(default=dict, blank=True, help_text="Baselines: counter windows, breach start times.")

    class Meta:
        ordering = ["device", "signal"]
        constraints = [models.UniqueConstraint(fields=["device", "signal"], name="healthsignal_once_per_device")]

    def __str__(self) -> str:
        return f"{self.device_id} {self.signal}={self.level}"


class RepairTicket(models.Model):
    """A device (or a whole node) taken out for repair: opened → draining → in repair → validating → returned | RMA.

    The device returns to the pool only after a validation (burn-in) job passed.
    """

    class State(models.TextChoices):
        OPENED = "opened", "Opened"
        DRAINING = "draining", "Draining"
        IN_REPAIR = "in_repair", "In repair"
        VALIDATING = "validating", "Validating"
        RETURNED = "returned", "Returned to the pool"
        RMA = "rma", "RMA (retired)"

    OPEN_STATES = (State.OPENED, State.DRAINING, State.IN_REPAIR, State.VALIDATING)
    CLOSED_STATES = (State.RETURNED, State.RMA)

    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="repair_tickets")
    device = models.ForeignKey(
        Device,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="repair_tickets",
        help_text="Empty: the whole node.",
    )
    state = models.CharField(max_length=12, choices=State.choices, default=State.OPENED)
    reason = models.CharField(max_length=500)
    recommended_action = models.CharField(max_length=40, blank=True, help_text="From the XID catalogue, if any.")
    evidence = models.JSONField(default=dict, blank=True)
    validation_failures = models.PositiveSmallIntegerField(default=0)
    opened_at = models.DateTimeField()
    opened_by = _actor()
    draining_at = models.DateTimeField(null=True, blank=True)
    draining_by = _actor()
    in_repair_at = models.DateTimeField(null=True, blank=True)
    in_repair_by = _actor()
    validating_at = models.DateTimeField(null=True, blank=True)
    validating_by = _actor()
    closed_at = models.DateTimeField(null=True, blank=True)
    closed_by = _actor()
    state_changed_at = models.DateTimeField()
    expected_back_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the devices are expected back in the pool (an operator's estimate; empty: the pages estimate "
        "it from past repairs).",
    )

    class Meta:
        ordering = ["-opened_at", "-id"]
        indexes = [models.Index(fields=["state", "opened_at"], name="ticket_state_opened")]
        constraints = [
            models.UniqueConstraint(
                fields=["device"],
                condition=Q(device__isnull=False) & Q(state__in=["opened", "draining", "in_repair", "validating"]),
                name="one_open_ticket_per_device",
            ),
            models.UniqueConstraint(
                fields=["node"],
                condition=Q(device__isnull=True) & Q(state__in=["opened", "draining", "in_repair", "validating"]),
                name="one_open_node_ticket",
            ),
        ]

    def __str__(self) -> str:
        what = self.device.key if self.device_id else "whole node"
        return f"#{self.pk} {self.node.name}/{what} ({self.get_state_display().lower()})"

    @property
    def is_open(self) -> bool:
        """Whether the ticket still holds its devices out of the pool."""
        return self.state in self.OPEN_STATES


class RepairTicketEvent(models.Model):
    """One step of a ticket's history: the state it moved to (or a note), when, and who did it."""

    ticket = models.ForeignKey(RepairTicket, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField()
    from_state = models.CharField(max_length=12, blank=True)
    to_state = models.CharField(max_length=12, blank=True, help_text="Empty: a note, no state change.")
    actor = _actor()
    actor_label = models.CharField(max_length=120, help_text='Who or what acted: a user name, "dcgm scrape"…')
    note = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        was = state_words(RepairTicket.State, self.from_state) if self.from_state else "new"
        to = state_words(RepairTicket.State, self.to_state) if self.to_state else "note"
        return f"#{self.ticket_id} {was} → {to} @ {self.at:%Y-%m-%d %H:%M:%S}"


class DeviceHealthTransition(models.Model):
    """A change of a device's health state, with the evidence that caused it kept beside it."""

    device = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="health_transitions")
    before = models.CharField(max_length=12, choices=HealthState.choices)
    after = models.CharField(max_length=12, choices=HealthState.choices)
    at = models.DateTimeField()
    reason = models.CharField(max_length=500)
    evidence = models.JSONField(default=dict, blank=True)
    observation = models.ForeignKey(
        HealthObservation, null=True, blank=True, on_delete=models.SET_NULL, related_name="transitions"
    )
    ticket = models.ForeignKey(
        RepairTicket, null=True, blank=True, on_delete=models.SET_NULL, related_name="transitions"
    )
    actor = _actor()
    actor_label = models.CharField(max_length=120)

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["device", "at"], name="healthtransition_device_at")]

    def __str__(self) -> str:
        before = state_words(HealthState, self.before) if self.before else "new"
        return f"{self.device_id} {before} → {state_words(HealthState, self.after)} @ {self.at:%Y-%m-%d %H:%M:%S}"


class ValidationRun(models.Model):
    """A burn-in job run for a ticket on the ticket's own devices (the only job a validating device takes)."""

    class Result(models.TextChoices):
        PENDING = "pending", "Pending"
        PASSED = "passed", "Passed"
        FAILED = "failed", "Failed"

    ticket = models.ForeignKey(RepairTicket, on_delete=models.CASCADE, related_name="validation_runs")
    job = models.OneToOneField("queues.Job", on_delete=models.PROTECT, related_name="validation_run")
    devices = models.ManyToManyField(Device, related_name="validation_runs")
    attempt = models.PositiveSmallIntegerField(default=1)
    result = models.CharField(max_length=10, choices=Result.choices, default=Result.PENDING)
    message = models.CharField(max_length=500, blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["ticket", "attempt"]

    def __str__(self) -> str:
        return f"validation of #{self.ticket_id} (attempt {self.attempt}): {self.result}"


class NodeHealthDirective(models.Model):
    """Desired state for the kubernetes backend: a taint or cordon on a node, or a DRA device taint, for health.

    The portal writes these (only on nodes the settings let it manage); the backend applies each active row,
    sets ``applied_at`` (or ``last_error``), and removes what a row with ``released_at`` asked for.
    """

    class Kind(models.TextChoices):
        NODE_TAINT = "node-taint", "Node taint"
        CORDON = "cordon", "Cordon (spec.unschedulable)"
        DEVICE_TAINT = "device-taint", "DRA device taint (DeviceTaintRule)"

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="health_directives")
    device = models.ForeignKey(
        Device, null=True, blank=True, on_delete=models.CASCADE, related_name="health_directives"
    )
    kind = models.CharField(max_length=20, choices=Kind.choices)
    key = models.CharField(max_length=253, blank=True)
    value = models.CharField(max_length=63, blank=True)
    effect = models.CharField(max_length=20, blank=True, help_text="NoSchedule | NoExecute (taints only).")
    reason = models.CharField(max_length=500)
    ticket = models.ForeignKey(
        RepairTicket, null=True, blank=True, on_delete=models.SET_NULL, related_name="directives"
    )
    created_at = models.DateTimeField()
    released_at = models.DateTimeField(null=True, blank=True, help_text="Set when the portal no longer wants it.")
    applied_at = models.DateTimeField(null=True, blank=True, help_text="Set by the backend once applied.")
    removed_at = models.DateTimeField(null=True, blank=True, help_text="Set by the backend once removed.")
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ["node", "kind", "key"]
        constraints = [
            models.UniqueConstraint(
                fields=["node", "kind", "key", "device"],
                condition=Q(released_at__isnull=True),
                name="one_active_directive",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.node.name} {self.kind} {self.key}"
