"""Models of job scheduling: teams and their quotas (Kueue ClusterQueues), cohorts, priorities, jobs."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from kernel.history import PolicyHistory
from pools.models import Cluster, ResourceClass, ResourceFlavor, dns_label
from pools.workload_kinds import KindSpec, WorkloadKind, kind_spec
from queues.engine.wait_codes import WAIT_CODE_LABELS
from queues.spec_limits import (
    MAX_CHECKPOINT_PATH,
    MAX_CHECKPOINT_SIGNAL,
    MAX_IMAGE,
    MAX_RUNTIME_SECONDS,
    MAX_TOPOLOGY_LEVEL,
    MIN_CHECKPOINT_INTERVAL_SECONDS,
    MIN_RUNTIME_SECONDS,
)


class Team(models.Model):
    """A tenant: a Kubernetes namespace with a LocalQueue pointing at the team's ClusterQueue."""

    slug = models.CharField(max_length=63, unique=True, validators=[dns_label])
    name = models.CharField(max_length=120)
    namespace = models.CharField(max_length=63, unique=True, validators=[dns_label])
    local_queue_name = models.CharField(max_length=63, default="main", validators=[dns_label])
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="Membership", related_name="teams")
    priority_classes = models.ManyToManyField(
        "PriorityClass",
        blank=True,
        related_name="teams",
        verbose_name="allowed priorities",
        help_text="Priorities the team's members may submit with; none selected: every priority.",
    )
    priority_override = models.ForeignKey(
        "PriorityClass",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        editable=False,
        help_text="Set while the team is demoted (billing's budget action): its new jobs use this priority.",
    )
    history = PolicyHistory(bookkeeping=("priority_override",))

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    """A user's role in a team."""

    class Role(models.TextChoices):
        MEMBER = "member", "Member"
        LEAD = "lead", "Team lead"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")

    class Source(models.TextChoices):
        MANUAL = "manual", "Added by an admin"
        SSO = "sso", "Single sign-on group"

    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    source = models.CharField(
        max_length=10,
        choices=Source.choices,
        default=Source.MANUAL,
        help_text="Single sign-on memberships follow the identity provider's groups at every sign-in (added, "
        "changed, removed); manual ones are never touched by a sign-in.",
    )
    history = PolicyHistory()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="membership_once")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class Cohort(models.Model):
    """A borrowing cohort (Kueue Cohort); nested through ``parent``, optionally with quota of its own."""

    name = models.CharField(max_length=63, unique=True, validators=[dns_label])
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children")
    fair_weight = models.DecimalField(max_digits=8, decimal_places=3, default=1)
    history = PolicyHistory()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class PreemptionWithinClusterQueue(models.TextChoices):
    """Kueue ``preemption.withinClusterQueue``."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    LOWER_OR_NEWER_EQUAL = "LowerOrNewerEqualPriority"


class ReclaimWithinCohort(models.TextChoices):
    """Kueue ``preemption.reclaimWithinCohort``."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    ANY = "Any"


class TeamQuota(models.Model):
    """A team's ClusterQueue in one cluster: cohort, queueing, preemption and fungibility policy."""

    class QueueingStrategy(models.TextChoices):
        BEST_EFFORT_FIFO = "BestEffortFIFO"
        STRICT_FIFO = "StrictFIFO"

    class FungibilityBorrow(models.TextChoices):
        MAY_STOP_SEARCH = "MayStopSearch"
        TRY_NEXT_FLAVOR = "TryNextFlavor"

    class StopPolicy(models.TextChoices):
        NONE = "None"
        HOLD = "Hold"
        HOLD_AND_DRAIN = "HoldAndDrain"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="quotas")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="team_quotas")
    cluster_queue_name = models.CharField(max_length=63, validators=[dns_label])
    cohort = models.ForeignKey(Cohort, null=True, blank=True, on_delete=models.PROTECT, related_name="team_quotas")
    queueing_strategy = models.CharField(
        max_length=20, choices=QueueingStrategy.choices, default=QueueingStrategy.BEST_EFFORT_FIFO
    )
    within_cluster_queue = models.CharField(
        max_length=30, choices=PreemptionWithinClusterQueue.choices, default=PreemptionWithinClusterQueue.NEVER
    )
    reclaim_within_cohort = models.CharField(
        max_length=20, choices=ReclaimWithinCohort.choices, default=ReclaimWithinCohort.NEVER
    )
    borrow_within_cohort = models.CharField(
        max_length=20,
        choices=[("Never", "Never"), ("LowerPriority", "LowerPriority")],
        default="Never",
    )
    borrow_within_cohort_max_priority = models.IntegerField(null=True, blank=True)
    when_can_borrow = models.CharField(
        max_length=20, choices=FungibilityBorrow.choices, default=FungibilityBorrow.MAY_STOP_SEARCH
    )
    when_can_preempt = models.CharField(
        max_length=20, choices=FungibilityBorrow.choices, default=FungibilityBorrow.TRY_NEXT_FLAVOR
    )
    fair_weight = models.DecimalField(max_digits=8, decimal_places=3, default=1)
    stop_policy = models.CharField(max_length=20, choices=StopPolicy.choices, default=StopPolicy.NONE)
    history = PolicyHistory()

    class Meta:
        ordering = ["cluster", "cluster_queue_name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "cluster"], name="one_quota_per_team_and_cluster"),
            models.UniqueConstraint(fields=["cluster", "cluster_queue_name"], name="cluster_queue_name_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster_queue_name} ({self.cluster})"


class QuotaLine(models.Model):
    """Quota for one (flavor, resource) of a team's ClusterQueue or of a cohort: nominal, borrowing, lending."""

    team_quota = models.ForeignKey(TeamQuota, null=True, blank=True, on_delete=models.CASCADE, related_name="lines")
    cohort = models.ForeignKey(Cohort, null=True, blank=True, on_delete=models.CASCADE, related_name="lines")
    flavor = models.ForeignKey(ResourceFlavor, on_delete=models.PROTECT, related_name="quota_lines")
    flavor_order = models.PositiveIntegerField(default=0, help_text="Preference order of the flavor in its group.")
    resource_name = models.CharField(max_length=253)
    nominal = models.CharField(max_length=30, help_text="Kubernetes quantity.")
    borrowing_limit = models.CharField(max_length=30, blank=True, help_text="Empty: no limit.")
    lending_limit = models.CharField(max_length=30, blank=True, help_text="Empty: lend all unused quota.")
    history = PolicyHistory()

    class Meta:
        ordering = ["flavor_order", "flavor__name", "resource_name"]
        constraints = [
            models.CheckConstraint(
                condition=(Q(team_quota__isnull=False) & Q(cohort__isnull=True))
                | (Q(team_quota__isnull=True) & Q(cohort__isnull=False)),
                name="quota_line_has_one_owner",
            ),
            models.UniqueConstraint(
                fields=["team_quota", "flavor", "resource_name"],
                condition=Q(team_quota__isnull=False),
                name="quota_line_once_per_queue",
            ),
            models.UniqueConstraint(
                fields=["cohort", "flavor", "resource_name"],
                condition=Q(cohort__isnull=False),
                name="quota_line_once_per_cohort",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.flavor.name}/{self.resource_name}: {self.nominal}"


class PriorityClass(models.Model):
    """A Kueue WorkloadPriorityClass: a name, a value and whether jobs of it may preempt."""

    name = models.CharField(max_length=63, unique=True, validators=[dns_label])
    value = models.IntegerField()
    description = models.CharField(max_length=200, blank=True)
    may_preempt = models.BooleanField(default=True)
    is_default = models.BooleanField(default=False)
    history = PolicyHistory()

    class Meta:
        ordering = ["-value"]
        verbose_name_plural = "priority classes"
        constraints = [
            models.UniqueConstraint(fields=["is_default"], condition=Q(is_default=True), name="one_default_priority"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.value})"


#: The closed set of reasons a pending job waits (DESIGN.md), as choices; defined once in queues.engine.wait_codes.
WaitReason = models.TextChoices(
    "WaitReason", [(code.upper(), (code, label)) for code, label in WAIT_CODE_LABELS.items()], module=__name__
)
WaitReason.__doc__ = "The closed set of reasons a pending job waits (DESIGN.md; queues.engine.wait_codes)."


class Job(models.Model):
    """What a researcher submitted, plus what happened to it."""

    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        ADMITTED = "admitted", "Admitted"
        RUNNING = "running", "Running"
        PREEMPTING = "preempting", "Preempting"
        SUSPENDED = "suspended", "Suspended"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"
        TIMED_OUT = "timed-out", "Timed out"

    FINAL_STATES = (State.SUCCEEDED, State.FAILED, State.CANCELLED, State.TIMED_OUT)

    class TopologyMode(models.TextChoices):
        NONE = "", "Any placement"
        REQUIRED = "required", "Required"
        PREFERRED = "preferred", "Preferred"

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="jobs")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="jobs")
    name = models.CharField(max_length=63, validators=[dns_label])
    image = models.CharField(max_length=MAX_IMAGE)
    command = models.JSONField(default=list, blank=True)
    args = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    resource_class = models.ForeignKey(ResourceClass, on_delete=models.PROTECT, related_name="jobs")
    kind = models.CharField(max_length=20, choices=WorkloadKind.choices, default=WorkloadKind.BATCH)
    devices_per_pod = models.PositiveIntegerField(default=1, help_text="Devices per pod of the primary pod set.")
    pod_count = models.PositiveIntegerField(default=1, help_text="Pods of the primary pod set.")
    companion_pod_sets = models.JSONField(
        default=list,
        blank=True,
        help_text="The kind's pod sets before the primary one (launcher, head, master, leader), in Kueue's order: "
        '[{"name": "head", "count": 1, "devices_per_pod": 0, "cpu": "4", "memory": "16Gi"}].',
    )
    topology_mode = models.CharField(max_length=10, choices=TopologyMode.choices, blank=True, default="")
    topology_level = models.CharField(max_length=MAX_TOPOLOGY_LEVEL, blank=True)
    priority_class = models.ForeignKey(PriorityClass, null=True, blank=True, on_delete=models.PROTECT)
    priority = models.IntegerField(default=0, help_text="Value of the priority class at submission.")
    # The limits are queues.spec_limits', which job_spec_errors applies to every submission.
    max_runtime_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(MIN_RUNTIME_SECONDS), MaxValueValidator(MAX_RUNTIME_SECONDS)],
    )
    checkpoint_path = models.CharField(max_length=MAX_CHECKPOINT_PATH, blank=True)
    checkpoint_signal = models.CharField(max_length=MAX_CHECKPOINT_SIGNAL, blank=True)
    checkpoint_command = models.JSONField(default=list, blank=True)
    checkpoint_interval_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(MIN_CHECKPOINT_INTERVAL_SECONDS), MaxValueValidator(MAX_RUNTIME_SECONDS)],
    )
    sim_runtime_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MaxValueValidator(MAX_RUNTIME_SECONDS)],
        help_text="Simulated backend only: how long the job runs once started.",
    )
    sim_fails = models.BooleanField(
        default=False, help_text="Simulated backend only: the job's pods exit with an error at the end of its run."
    )

    state = models.CharField(max_length=12, choices=State.choices, default=State.PENDING)
    wait_reason = models.CharField(max_length=30, choices=WaitReason.choices, blank=True)
    wait_message = models.TextField(blank=True)
    kueue_message = models.TextField(blank=True)
    wait_details = models.JSONField(default=dict, blank=True)
    wait_since = models.DateTimeField(null=True, blank=True)
    assigned_flavor = models.ForeignKey(
        ResourceFlavor, null=True, blank=True, on_delete=models.PROTECT, related_name="jobs"
    )
    assignment = models.JSONField(default=dict, blank=True, help_text="Flavors per pod set and nodes per pod.")
    borrowing = models.BooleanField(default=False)
    preemption_count = models.PositiveIntegerField(default=0)
    eviction_reason = models.CharField(
        max_length=40,
        blank=True,
        help_text="Kueue's Evicted reason while the job is being evicted (Preempted, ClusterQueueStopped, ...).",
    )
    run_seconds_banked = models.PositiveIntegerField(
        default=0, help_text="Work kept by checkpoints across evictions (seconds of run time)."
    )
    k8s_namespace = models.CharField(max_length=63, blank=True)
    k8s_name = models.CharField(max_length=63, blank=True)
    k8s_uid = models.CharField(max_length=64, blank=True)
    workload_name = models.CharField(max_length=253, blank=True)

    submitted_at = models.DateTimeField()
    queued_at = models.DateTimeField(help_text="When it last entered the queue (submission or requeue).")
    admitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    state_changed_at = models.DateTimeField()

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [
            models.Index(fields=["team", "-submitted_at", "-id"], name="job_team_recent"),
            # every team's jobs, newest first: the job list of platform admins and operators
            models.Index(fields=["-submitted_at", "-id"], name="job_recent"),
            models.Index(fields=["owner", "-submitted_at", "-id"], name="job_owner_recent"),
            models.Index(fields=["team", "state", "-submitted_at"], name="job_team_state"),
            models.Index(fields=["cluster", "state"], name="job_cluster_state"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(devices_per_pod__gte=1), name="job_devices_positive"),
            models.CheckConstraint(condition=Q(pod_count__gte=1), name="job_pods_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.team.slug}/{self.name}"

    @property
    def is_final(self) -> bool:
        """Whether the job can no longer change state."""
        return self.state in self.FINAL_STATES

    @property
    def kind_spec(self) -> KindSpec:
        """What the job's kind is made of (its pod sets, whether it runs until stopped)."""
        return kind_spec(self.kind)

    @property
    def stop_verb(self) -> str:
        """How ending it early is said: a session or a service is stopped, a job is cancelled."""
        return "Stop" if self.kind_spec.runs_until_stopped else "Cancel"

    @property
    def total_devices(self) -> int:
        """Devices the whole gang asks for: every pod set's (the primary and its kind's companions)."""
        companions = sum(int(c["count"]) * int(c["devices_per_pod"]) for c in self.companion_pod_sets or ())
        return self.devices_per_pod * self.pod_count + companions


class JobEvent(models.Model):
    """One entry of a job's timeline, with a plain-language message and structured details."""

    class Kind(models.TextChoices):
        SUBMITTED = "submitted", "Submitted"
        WAIT_REASON = "wait_reason", "Wait reason changed"
        ADMITTED = "admitted", "Admitted"
        STARTED = "started", "Started"
        CHECKPOINT_REQUESTED = "checkpoint_requested", "Checkpoint requested"
        CHECKPOINT_DONE = "checkpoint_done", "Checkpoint done"
        PREEMPTED = "preempted", "Preempted"
        PREEMPTING = "preempting", "Preempting other jobs"
        EVICTED = "evicted", "Evicted"
        REQUEUED = "requeued", "Requeued"
        RESUMED = "resumed", "Resumed"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"
        TIMED_OUT = "timed_out", "Timed out"
        NODE_LOST = "node_lost", "Node lost"
        NOTE = "note", "Note"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField()
    kind = models.CharField(max_length=30, choices=Kind.choices)
    message = models.TextField()
    details = models.JSONField(default=dict, blank=True)
    source_key = models.CharField(max_length=200, blank=True, help_text="Dedupe key for events synced from a cluster.")

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["job", "at"], name="jobevent_job_at")]
        constraints = [
            models.UniqueConstraint(
                fields=["job", "source_key"], condition=~Q(source_key=""), name="jobevent_source_once"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} {self.kind} @ {self.at:%Y-%m-%d %H:%M:%S}"


class ApiToken(models.Model):
    """A REST API token scoped to one team: only a hash of the key is stored; the key is shown once."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="api_tokens")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, help_text="What the token is for, e.g. 'CI pipeline'.")
    prefix = models.CharField(max_length=12, help_text="First characters of the key, to recognise it.")
    key_hash = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the key (hex).")
    created_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: never expires.")
    revoked = models.BooleanField(default=False)

    class Meta:
        ordering = ["team", "name"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…, {self.team.slug})"


class PolicyPush(models.Model):
    """A request to make one cluster follow the portal's queue policy, with its outcome (a status row to poll)."""

    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        SUCCEEDED = "succeeded", "Applied"
        RETRYING = "retrying", "Failed, will retry"
        FAILED = "failed", "Failed, gave up"

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="policy_pushes")
    reason = models.CharField(max_length=300, help_text="What changed, e.g. 'TeamQuota vision changed'.")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_at = models.DateTimeField()
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True, help_text="When a failed push is tried again.")
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True, help_text="The last attempt's error, as the cluster or backend gave it.")
    report = models.TextField(blank=True, help_text="What the last attempt changed in the cluster.")

    class Meta:
        ordering = ["-requested_at", "-id"]
        indexes = [models.Index(fields=["state", "next_attempt_at"], name="policypush_due")]

    def __str__(self) -> str:
        return f"push to {self.cluster} at {self.requested_at:%Y-%m-%d %H:%M:%S} ({self.state})"


class PolicyPreview(models.Model):
    """A what-if preview of a policy change: the proposal as submitted, replayed by a worker (a status row to poll).

    ``form_data`` is the admin form as posted (applying re-posts it); ``inputs`` holds, per cluster whose queue
    configuration the change alters, the current and proposed policy (engine data, no nodes) and a digest of
    the current one, so an apply can tell whether someone changed the policy since.
    """

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_at = models.DateTimeField()
    model_label = models.CharField(max_length=100, help_text="The policy model changed, e.g. 'queues.teamquota'.")
    object_id = models.CharField(max_length=40, blank=True, help_text="Empty when the change adds an object.")
    object_repr = models.CharField(max_length=200)
    days = models.PositiveSmallIntegerField()
    form_data = models.JSONField(default=list, help_text="[key, value] pairs of the posted admin form.")
    inputs = models.JSONField(default=list)
    policy_digests = models.JSONField(
        default=dict, help_text="Cluster id → digest of its policy when the preview was asked for (stale check)."
    )
    changes = models.JSONField(default=list, help_text="Plain-language differences, one line each.")
    warnings = models.JSONField(default=list)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    progress = models.FloatField(default=0.0, help_text="Share of the replays done, 0 to 1.")
    progress_text = models.CharField(max_length=200, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-requested_at", "-id"]
        indexes = [models.Index(fields=["status", "requested_at"], name="policypreview_status")]

    def __str__(self) -> str:
        return f"preview #{self.pk} of {self.object_repr} ({self.status})"

    @property
    def is_finished(self) -> bool:
        """Whether the replay ended (done or failed): nothing on the page changes any more."""
        return self.status in (self.Status.DONE, self.Status.FAILED)


class ClusterDiagnosis(models.Model):
    """When the stored diagnoses of a cluster's pending jobs (``JobDiagnosis``) were computed, and from what state.

    One row per cluster, written by ``queues.diagnosis_store.cluster_diagnosis_refresh``: the engine state version
    (``pools.state_version``) read before the engine input was, and the cost of the computation.
    """

    cluster = models.OneToOneField(Cluster, primary_key=True, on_delete=models.CASCADE, related_name="diagnosis")
    state_version = models.PositiveBigIntegerField()
    computed_at = models.DateTimeField()
    jobs = models.PositiveIntegerField(default=0, help_text="Pending jobs diagnosed.")
    compute_seconds = models.FloatField(default=0.0, help_text="CPU seconds of the engine input, reasons and ETAs.")

    def __str__(self) -> str:
        return f"diagnosis of {self.cluster_id} at version {self.state_version}"


class JobDiagnosis(models.Model):
    """The engine's verdict and ETA of one pending job, and its suggestions once computed.

    Read by the job page and the API instead of rebuilding the engine on every poll; valid while the cluster's
    ``ClusterDiagnosis`` is at the cluster's state version (a refresh deletes the rows of jobs no longer pending
    and rewrites only the rows whose verdict or ETA changed: ``state_version`` and ``computed_at`` say when this
    one last did). What is stored does not move with the clock: the p50 as a time, the p90 as its spread
    (``eta_spread_floor`` / ``eta_spread_share``, shown at read time). ``suggestions`` are null until the job
    page's first view after a change computes them (bounded: ``queues.diagnosis_suggestions``); they hold at
    ``suggestions_version`` only.
    """

    job = models.OneToOneField(Job, primary_key=True, on_delete=models.CASCADE, related_name="stored_diagnosis")
    state_version = models.PositiveBigIntegerField(help_text="State version at which this row last changed.")
    computed_at = models.DateTimeField()
    admissible = models.BooleanField(default=False, help_text="The engine would admit it now.")
    preempting = models.BooleanField(default=False, help_text="It can start by preempting (or is making room).")
    code = models.CharField(max_length=30, blank=True)
    message = models.TextField(blank=True)
    kueue_message = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True)
    eta_starts_now = models.BooleanField(default=False)
    eta_p50 = models.DateTimeField(null=True, blank=True, help_text="Null when it starts now or has no estimate.")
    eta_spread_floor = models.FloatField(default=0.0, help_text="Seconds the p90 lies after the p50 at least.")
    eta_spread_share = models.FloatField(default=0.0, help_text="Share of the wait left the p90 adds at least.")
    eta_method = models.TextField(blank=True)
    eta_samples = models.PositiveIntegerField(default=0)
    suggestions = models.JSONField(null=True, blank=True, help_text="Null: not computed yet.")
    suggestions_version = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="State version the suggestions were computed at."
    )
    digest = models.CharField(
        max_length=32, blank=True, help_text="Hash of the verdict and ETA: a refresh rewrites only rows that changed."
    )

    def __str__(self) -> str:
        return f"diagnosis of job {self.job_id} at version {self.state_version}"


class CatalogueEstimate(models.Model):
    """The catalogue card's expected wait of a typical job (one team, one class) at one state version."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="catalogue_estimates")
    key = models.CharField(max_length=200, help_text="team, class, count and priority of the typical job.")
    state_version = models.PositiveBigIntegerField()
    computed_at = models.DateTimeField()
    eta = models.JSONField(default=dict)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "key"], name="catalogueestimate_unique")]

    def __str__(self) -> str:
        return f"{self.key} at version {self.state_version}"


class JobIdle(models.Model):
    """The idle-GPU negotiation of one job (queues.idle): warned, checkpoint requested, released; one snooze."""

    class Phase(models.TextChoices):
        ACTIVE = "active", "GPUs in use (or not judged idle)"
        WARNED = "warned", "Warned: GPUs idle"
        CHECKPOINTING = "checkpointing", "Checkpoint requested before release"
        RELEASED = "released", "Released for idle GPUs"

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="idle")
    phase = models.CharField(max_length=13, choices=Phase.choices, default=Phase.ACTIVE)
    idle_since = models.DateTimeField(null=True, blank=True, help_text="Start of the idle window that was warned.")
    warned_at = models.DateTimeField(null=True, blank=True)
    due_at = models.DateTimeField(
        null=True, blank=True, help_text="When the next step is taken: the checkpoint request, or the release."
    )
    checkpoint_requested_at = models.DateTimeField(null=True, blank=True)
    watch_from = models.DateTimeField(
        null=True, blank=True, help_text="Idle time before this instant does not count (set by the snooze)."
    )
    snoozed_at = models.DateTimeField(null=True, blank=True, help_text="The one snooze a job gets.")
    snoozed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    changed_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["phase"], name="jobidle_phase")]

    def __str__(self) -> str:
        return f"job {self.job_id}: {self.phase}"
