"""Inventory models: clusters, topologies, flavors, nodes, devices, allocations, classes and the state version."""

from __future__ import annotations

from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

from kernel.history import PolicyHistory
from pools.workload_kinds import default_allowed_kinds

dns_label = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
    "Use a DNS-1123 label: lower-case letters, digits and '-', starting and ending with a letter or digit, "
    "at most 63 characters.",
)


class Cluster(models.Model):
    """A Kubernetes cluster (or the embedded simulated one) whose nodes feed the pool."""

    class Backend(models.TextChoices):
        SIMULATED = "simulated", "Simulated (embedded)"
        KUBERNETES = "kubernetes", "Kubernetes + Kueue"

    class FairSharingStrategies(models.TextChoices):
        """Kueue's ``fairSharing.preemptionStrategies`` lists its validation accepts (comma-joined, in order)."""

        BOTH = (
            "LessThanOrEqualToFinalShare,LessThanInitialShare",
            "LessThanOrEqualToFinalShare, then LessThanInitialShare",
        )
        FINAL_SHARE = "LessThanOrEqualToFinalShare", "LessThanOrEqualToFinalShare only"
        INITIAL_SHARE = "LessThanInitialShare", "LessThanInitialShare only"

    class KueueConfig(models.TextChoices):
        """Outcome of the last check of Kueue's manager configuration against the fair-sharing switch."""

        UNCHECKED = "", "Not checked yet"
        MATCHES = "matches", "Matches the switch"
        MISMATCH = "mismatch", "Does not match the switch"
        MISSING = "missing", "ConfigMap not found"
        FORBIDDEN = "forbidden", "Not allowed to read it"
        INVALID = "invalid", "Cannot be read (bad content)"
        ERROR = "error", "The cluster refused the read"

    name = models.CharField(max_length=63, unique=True, validators=[dns_label])
    display_name = models.CharField(max_length=120, blank=True)
    backend = models.CharField(max_length=20, choices=Backend.choices, default=Backend.SIMULATED)
    kubeconfig_path = models.CharField(max_length=500, blank=True, help_text="Empty: in-cluster config.")
    kube_context = models.CharField(max_length=200, blank=True)
    in_cluster = models.BooleanField(default=False)
    sync_bookmarks = models.JSONField(default=dict, blank=True, help_text="resourceVersion per watched kind.")
    last_synced_at = models.DateTimeField(null=True, blank=True)
    last_sync_error = models.TextField(blank=True)
    last_sync_error_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    fair_sharing = models.BooleanField(
        default=False,
        help_text="Kueue fair sharing (its Configuration's fairSharing). On a real cluster this must match "
        "Kueue's own configuration: the portal does not manage it.",
    )
    fair_sharing_strategies = models.CharField(
        max_length=60,
        choices=FairSharingStrategies.choices,
        default=FairSharingStrategies.BOTH,
        help_text="fairSharing.preemptionStrategies, used when fair sharing is on.",
    )
    kueue_config_state = models.CharField(
        max_length=20,
        choices=KueueConfig.choices,
        default=KueueConfig.UNCHECKED,
        blank=True,
        editable=False,
        help_text="Kueue's own configuration (its manager ConfigMap) compared with the fair-sharing switch.",
    )
    kueue_config_problem = models.TextField(
        blank=True, editable=False, help_text="What is wrong, when the check did not match (empty when it matches)."
    )
    kueue_config_checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    history = PolicyHistory(
        bookkeeping=(
            "sync_bookmarks",
            "last_synced_at",
            "last_sync_error",
            "last_sync_error_at",
            "kueue_config_state",
            "kueue_config_problem",
            "kueue_config_checked_at",
        )
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.display_name or self.name

    @property
    def kueue_config_needs_attention(self) -> bool:
        """Whether the last check of Kueue's configuration found something an admin must look at."""
        return self.kueue_config_state not in (self.KueueConfig.UNCHECKED, self.KueueConfig.MATCHES)


class Topology(models.Model):
    """Ordered topology levels (highest first), as Kueue's Topology object: e.g. block → rack → hostname."""

    name = models.CharField(max_length=63, unique=True, validators=[dns_label])
    levels = models.JSONField(default=list, help_text="Node label keys, highest level first.")
    history = PolicyHistory()

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "topologies"

    def __str__(self) -> str:
        return self.name


class ResourceFlavor(models.Model):
    """One hardware variety, as Kueue's ResourceFlavor: the node labels that select it, its taints."""

    name = models.CharField(max_length=63, unique=True, validators=[dns_label])
    display_name = models.CharField(max_length=120, blank=True, help_text='Short name users read, e.g. "H100".')
    node_labels = models.JSONField(default=dict, blank=True)
    node_taints = models.JSONField(default=list, blank=True, help_text="[{key, value, effect}]")
    tolerations = models.JSONField(default=list, blank=True)
    topology = models.ForeignKey(Topology, null=True, blank=True, on_delete=models.PROTECT, related_name="flavors")
    history = PolicyHistory()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.display_name or self.name

    @property
    def label(self) -> str:
        """The name shown to users."""
        return self.display_name or self.name


class HealthState(models.TextChoices):
    """Per-device health: healthy → degraded → unhealthy → quarantined → validating → healthy | retired."""

    HEALTHY = "healthy", "Healthy"
    DEGRADED = "degraded", "Degraded (used last)"
    UNHEALTHY = "unhealthy", "Unhealthy (excluded)"
    QUARANTINED = "quarantined", "Quarantined (drained, ticket open)"
    VALIDATING = "validating", "Validating"
    RETIRED = "retired", "Retired"


#: States whose devices take new work. Degraded devices are used, but last.
USABLE_HEALTH = (HealthState.HEALTHY, HealthState.DEGRADED)


class Node(models.Model):
    """A Kubernetes node as last seen; a node that disappears is marked gone, never deleted."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=253)
    labels = models.JSONField(default=dict, blank=True)
    taints = models.JSONField(default=list, blank=True)
    conditions = models.JSONField(default=list, blank=True)
    ready = models.BooleanField(default=True)
    unschedulable = models.BooleanField(default=False, help_text="Cordoned.")
    capacity = models.JSONField(default=dict, blank=True, help_text="Resource name → quantity, as the node reports.")
    allocatable = models.JSONField(default=dict, blank=True)
    flavor = models.ForeignKey(ResourceFlavor, null=True, blank=True, on_delete=models.SET_NULL, related_name="nodes")
    first_seen_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    gone_at = models.DateTimeField(null=True, blank=True, help_text="Set when the node disappeared from the cluster.")

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="node_unique_per_cluster")]
        indexes = [models.Index(fields=["cluster", "gone_at"], name="node_cluster_present")]

    def __str__(self) -> str:
        return self.name

    @property
    def is_present(self) -> bool:
        """Whether the node was in the cluster at the last import."""
        return self.gone_at is None


class Device(models.Model):
    """One accelerator unit: a full card, a MIG instance (with its parent card), or a time-shared replica.

    ``resource_name`` is the extended resource the unit is scheduled as (``nvidia.com/gpu``,
    ``nvidia.com/mig-1g.10gb``, ``nvidia.com/gpu.shared``…); a physical card that is partitioned or shared
    keeps an empty ``resource_name`` and its schedulable units point at it through ``parent``.
    """

    class Vendor(models.TextChoices):
        NVIDIA = "nvidia", "NVIDIA"
        AMD = "amd", "AMD"
        INTEL = "intel", "Intel"
        HABANA = "habana", "Intel Gaudi"
        AWS_NEURON = "aws-neuron", "AWS Neuron"
        GOOGLE_TPU = "google-tpu", "Google TPU"
        OTHER = "other", "Other"

    class Kind(models.TextChoices):
        FULL = "full", "Full card"
        MIG = "mig", "Partition (MIG instance, AMD partition, NeuronCore)"
        SHARED = "shared", "Time-shared replica"

    class Source(models.TextChoices):
        DEVICE_PLUGIN = "device-plugin", "Device plugin (node capacity)"
        DRA = "dra", "DRA ResourceSlice"
        MANUAL = "manual", "Manual"

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="devices")
    key = models.CharField(max_length=200, help_text="Stable identity on the node: the UUID, else a synthetic key.")
    uuid = models.CharField(max_length=100, blank=True)
    vendor = models.CharField(max_length=20, choices=Vendor.choices)
    product = models.CharField(max_length=200, blank=True)
    index = models.PositiveIntegerField(null=True, blank=True)
    memory_bytes = models.BigIntegerField(null=True, blank=True)
    architecture = models.CharField(max_length=60, blank=True)
    driver_version = models.CharField(max_length=40, blank=True)
    cuda_version = models.CharField(max_length=40, blank=True)
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.FULL)
    resource_name = models.CharField(max_length=253, blank=True, db_index=True)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="children")
    mig_profile = models.CharField(max_length=40, blank=True)
    replica_index = models.PositiveIntegerField(null=True, blank=True)
    health = models.CharField(max_length=12, choices=HealthState.choices, default=HealthState.HEALTHY)
    health_reason = models.CharField(max_length=300, blank=True)
    health_changed_at = models.DateTimeField(null=True, blank=True)
    source = models.CharField(max_length=20, choices=Source.choices, default=Source.DEVICE_PLUGIN)
    dra_driver = models.CharField(max_length=253, blank=True)
    dra_pool = models.CharField(max_length=253, blank=True)
    dra_device = models.CharField(max_length=253, blank=True)
    attributes = models.JSONField(default=dict, blank=True)
    taints = models.JSONField(default=list, blank=True, help_text="DRA device taints.")
    first_seen_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    gone_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["node", "resource_name", "index", "key"]
        constraints = [models.UniqueConstraint(fields=["node", "key"], name="device_unique_key_per_node")]
        indexes = [
            models.Index(fields=["node", "resource_name"], name="device_node_resource"),
            models.Index(fields=["uuid"], name="device_uuid", condition=~Q(uuid="")),
        ]

    def __str__(self) -> str:
        return f"{self.node.name}/{self.key}"

    @property
    def schedulable(self) -> bool:
        """Whether this unit is offered to jobs (a partitioned parent card is not)."""
        return bool(self.resource_name) and self.gone_at is None


class Allocation(models.Model):
    """A device bound to a workload (a job of the queues app), from when to when; closed on every way a job can end.

    The binding is resource truth: pools counts devices in use from it. Only queues.services opens and closes it.
    """

    job = models.ForeignKey("queues.Job", on_delete=models.CASCADE, related_name="allocations")
    device = models.ForeignKey(Device, on_delete=models.PROTECT, related_name="allocations")
    pod_index = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=40, blank=True)

    class Meta:
        ordering = ["job", "pod_index", "device"]
        constraints = [
            models.UniqueConstraint(
                fields=["device"], condition=Q(ended_at__isnull=True), name="one_open_allocation_per_device"
            ),
        ]
        indexes = [models.Index(fields=["job", "ended_at"], name="allocation_job_open")]

    def __str__(self) -> str:
        return f"{self.job_id} holds {self.device_id}"


class ResourceClass(models.Model):
    """What a researcher picks: "8 x H100 80GB, one NVLink domain, for large training"."""

    class Sharing(models.TextChoices):
        DEDICATED = "dedicated", "Dedicated card"
        MIG = "mig", "MIG slice"
        TIME_SHARED = "time-shared", "Time-shared"

    class TopologyMode(models.TextChoices):
        NONE = "", "No rule"
        REQUIRED = "required", "Required"
        PREFERRED = "preferred", "Preferred"

    slug = models.CharField(max_length=63, unique=True, validators=[dns_label])
    name = models.CharField(max_length=120)
    description = models.TextField(blank=True, help_text="What the class is for, in the researcher's words.")
    resource_name = models.CharField(
        max_length=253, help_text="e.g. nvidia.com/gpu, nvidia.com/mig-1g.10gb, amd.com/gpu"
    )
    sharing = models.CharField(max_length=12, choices=Sharing.choices, default=Sharing.DEDICATED)
    flavors = models.ManyToManyField(ResourceFlavor, through="ResourceClassFlavor", related_name="resource_classes")
    allowed_counts = models.JSONField(default=list, help_text="Devices per pod a user may ask for, e.g. [1, 2, 4, 8].")
    cpu_per_device = models.CharField(max_length=20, default="8", help_text="Kubernetes quantity, e.g. 8 or 500m.")
    memory_per_device = models.CharField(max_length=20, default="64Gi", help_text="Kubernetes quantity, e.g. 64Gi.")
    topology_mode = models.CharField(max_length=10, choices=TopologyMode.choices, default="", blank=True)
    topology_level = models.CharField(
        max_length=253, blank=True, help_text="Node label key of the topology level, e.g. kubernetes.io/hostname."
    )
    min_driver_version = models.CharField(max_length=40, blank=True)
    min_cuda_version = models.CharField(max_length=40, blank=True)
    allowed_kinds = models.JSONField(
        default=default_allowed_kinds,
        help_text="Workload kinds a job of this class may be (pools.workload_kinds.WorkloadKind), e.g. "
        '["batch", "jobset", "session"].',
    )
    idle_window_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="How long a job's GPUs may stay idle before it is warned and then released (empty: never).",
    )
    # Protected work (queues.protection, docs/admin.md): what shields a running job of the class from preemption.
    protect_min_runtime_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Minimum runtime: a job of this class is not preempted before it has run this long "
        "(every job's default; empty: no minimum).",
    )
    protect_min_runtime_max_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="The longest minimum runtime a job may ask for itself (empty: no more than the class's own).",
    )
    protect_finishing_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Finishing soon: no preemption in the last this-many seconds of a job's maximum runtime "
        "(every job's default; empty: none).",
    )
    protect_finishing_max_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="The longest finishing-soon window a job may ask for itself (empty: no more than the class's own).",
    )
    protect_checkpoint_grace_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Preempt only just after a checkpoint: a job that checkpoints on an interval may be preempted "
        "only this long after each checkpoint (empty: jobs of this class may not ask for it).",
    )
    protect_checkpoint_default = models.BooleanField(
        default=False,
        help_text="Jobs of this class with a checkpoint interval are preempted only just after a checkpoint "
        "unless they opt out (needs the grace above).",
    )
    active = models.BooleanField(default=True)
    display_order = models.PositiveIntegerField(default=100)
    history = PolicyHistory()

    class Meta:
        ordering = ["display_order", "name"]
        verbose_name_plural = "resource classes"

    def __str__(self) -> str:
        return self.name


class ResourceClassFlavor(models.Model):
    """A flavor a class may land on, in preference order."""

    resource_class = models.ForeignKey(ResourceClass, on_delete=models.CASCADE, related_name="flavor_links")
    flavor = models.ForeignKey(ResourceFlavor, on_delete=models.PROTECT, related_name="class_links")
    order = models.PositiveIntegerField(default=0)
    history = PolicyHistory()

    class Meta:
        ordering = ["resource_class", "order"]
        constraints = [
            models.UniqueConstraint(fields=["resource_class", "flavor"], name="class_flavor_once"),
        ]

    def __str__(self) -> str:
        return f"{self.resource_class.slug} → {self.flavor.name}"


class EngineStateVersion(models.Model):
    """A counter of changes to what the admission engine reads (``queues.engine_input``): one per cluster, one global.

    A cluster's state version is its counter plus the global one (``pools.state_version.state_version``): it only
    grows, and it grows with every change of its jobs, quotas, nodes and devices, and of the shared configuration
    (cohorts, flavors, topologies, classes, priority classes, teams). Diagnoses computed from the engine (ETAs,
    suggestions) are stored with the version they were computed from and recomputed when it moved.
    """

    GLOBAL = "global"

    scope = models.CharField(max_length=40, primary_key=True, help_text='"global" or "cluster:<id>".')
    version = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.scope}: {self.version}"


class EngineStateChange(models.Model):
    """One step of a scope's ``EngineStateVersion`` and, when the step changed job rows only, which jobs.

    Written in the same transaction as the step (``pools.state_version``), so a reader that has read a version sees
    every step up to it. ``job_ids`` null: anything the engine reads may have changed (a quota, a node, a bulk
    write). The diagnosis keeps its engine input between refreshes and re-reads only the jobs listed here
    (``queues.diagnosis_input``); steps older than an hour are pruned, and a reader that finds a step missing reads
    everything again.
    """

    scope = models.CharField(max_length=40, help_text='"global" or "cluster:<id>", as on EngineStateVersion.')
    version = models.PositiveBigIntegerField(help_text="The scope's version after this step.")
    job_ids = models.JSONField(null=True, blank=True, help_text="Jobs whose rows this step changed (null: unknown).")
    at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["scope", "version"], name="enginestatechange_step_once")]
        indexes = [models.Index(fields=["at"], name="enginestatechange_at")]

    def __str__(self) -> str:
        return f"{self.scope} → {self.version}"
