"""Jobs, their timeline, their stored diagnoses (verdicts, ETAs, catalogue estimates) and idle negotiation."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from pools.models import Cluster, ResourceClass, ResourceFlavor, dns_label
from pools.workload_kinds import KindSpec, WorkloadKind, kind_spec
from queues.engine.wait_codes import WAIT_CODE_LABELS
from queues.models.teams import PriorityClass, Team
from queues.spec_limits import (
    MAX_CHECKPOINT_PATH,
    MAX_CHECKPOINT_SIGNAL,
    MAX_IMAGE,
    MAX_RUNTIME_SECONDS,
    MAX_TOPOLOGY_LEVEL,
    MIN_CHECKPOINT_INTERVAL_SECONDS,
    MIN_RUNTIME_SECONDS,
)

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
    # Protected work, within what its class allows (queues.protection); empty: the class's default.
    protect_min_runtime_seconds = models.PositiveIntegerField(
        null=True, blank=True, help_text="Not preempted before it has run this long (empty: the class's default)."
    )
    protect_finishing_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Not preempted in the last this-many seconds of its maximum runtime (empty: the class's default).",
    )
    preempt_after_checkpoint = models.BooleanField(
        null=True,
        blank=True,
        help_text="Preempted only just after one of its periodic checkpoints (empty: the class's default).",
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
    def state_label(self) -> str:
        """The state in words; a session or service that was stopped reads "Stopped", not "Cancelled"."""
        if self.state == self.State.CANCELLED and self.kind_spec.runs_until_stopped:
            return "Stopped"
        return self.get_state_display()

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


class ClusterDiagnosis(models.Model):
    """When the stored diagnoses of a cluster's pending jobs (``DiagnosisPage``) were computed, and from what state.

    One row per cluster, written by ``queues.diagnosis_store.cluster_diagnosis_refresh``: the engine state version
    (``pools.state_version``) read before the engine input was, and the cost of the computation. A page view that
    finds it behind asks for a refresh once (``requested_version``, ``requested_at``) and shows the stored diagnosis
    meanwhile.
    """

    cluster = models.OneToOneField(Cluster, primary_key=True, on_delete=models.CASCADE, related_name="diagnosis")
    state_version = models.PositiveBigIntegerField()
    computed_at = models.DateTimeField()
    jobs = models.PositiveIntegerField(default=0, help_text="Pending jobs diagnosed.")
    compute_seconds = models.FloatField(default=0.0, help_text="CPU seconds of the engine input, reasons and ETAs.")
    requested_version = models.PositiveBigIntegerField(
        default=0, help_text="The latest state version a refresh was asked for (by a page view that found it behind)."
    )
    requested_at = models.DateTimeField(null=True, blank=True, help_text="When that refresh was asked for.")
    window = models.JSONField(
        default=dict,
        blank=True,
        help_text="The replay's window (start, end, grants) and per queue its pending jobs and those it admitted.",
    )

    def __str__(self) -> str:
        return f"diagnosis of {self.cluster_id} at version {self.state_version}"


class DiagnosisPage(models.Model):
    """The stored diagnoses of the pending jobs of a cluster whose ids fall in one page (``queues.diagnosis_pages``).

    ``data`` is JSON: the verdicts and ETA kinds the page's jobs use, and per job its verdict, ETA kind, p50 and place
    in its queue, and (``b``) the last estimate that differed much from it, when there was one. Read by the job
    page, its poll and the API (one indexed read per job), valid while the cluster's ``ClusterDiagnosis`` is at the
    cluster's state version; a refresh rewrites only the pages whose content changed (``digest``, over the entries)
    and deletes those left without a pending job. ``state_version`` and ``computed_at`` say when this page last
    changed.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="diagnosis_pages")
    page = models.PositiveIntegerField(help_text="Job id // the page span.")
    state_version = models.PositiveBigIntegerField(help_text="State version at which this page last changed.")
    computed_at = models.DateTimeField()
    digest = models.CharField(max_length=32, help_text="Hash of ``data``: a refresh rewrites only pages that changed.")
    data = models.TextField(
        help_text="JSON: verdicts, ETA kinds, and per job id its diagnosis; per job whose estimate moved much, the "
        "estimate before and when it was held (the job page says what changed since)."
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "page"], name="diagnosispage_once")]

    def __str__(self) -> str:
        return f"diagnosis page {self.page} of {self.cluster_id} at version {self.state_version}"


class JobSuggestions(models.Model):
    """A pending job's verified suggestions ("would start now if…"), computed on its page's first view after a
    change (bounded: ``queues.diagnosis_suggestions``); they hold at ``state_version`` only."""

    job = models.OneToOneField(Job, primary_key=True, on_delete=models.CASCADE, related_name="stored_suggestions")
    state_version = models.PositiveBigIntegerField(help_text="State version the suggestions were computed at.")
    computed_at = models.DateTimeField()
    suggestions = models.JSONField(default=list, blank=True)

    def __str__(self) -> str:
        return f"suggestions of job {self.job_id} at version {self.state_version}"


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
