"""Teams and their quotas (Kueue ClusterQueues), cohorts, priorities, API tokens, policy pushes and previews."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import models
from django.db.models import Q

from kernel.history import PolicyHistory
from pools.models import Cluster, ResourceFlavor, dns_label


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
    """A borrowing cohort (Kueue Cohort); nested through ``parent``, optionally with quota of its own.

    A root cohort's ``shortfall_policy`` says what happens to its teams' guaranteed quotas when repairs leave fewer
    healthy devices than they add up to (queues.guarantees, docs/admin.md, *Effective quota*).
    """

    class ShortfallPolicy(models.TextChoices):
        WARN = "warn", "Warn only (quotas stay; the shortfall is shown)"
        SPARE_FIRST = "spare_first", "Take the shortfall from the spare team first"
        PROPORTIONAL = "proportional", "Scale every team's guaranteed quota in proportion"

    name = models.CharField(max_length=63, unique=True, validators=[dns_label])
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children")
    fair_weight = models.DecimalField(max_digits=8, decimal_places=3, default=1)
    usage_half_life = models.DurationField(
        null=True,
        blank=True,
        verbose_name="usage half-life",
        help_text="Fairness that remembers: the teams of this cohort borrow (and are reclaimed from) in the order of "
        "their recent usage, which counts less the older it is — half as much after this long (e.g. 3 days). "
        "Empty: off (Kueue's order by current share only).",
    )
    usage_window = models.DurationField(
        default=timedelta(days=7),
        verbose_name="usage window",
        help_text="How far back recent usage is read (with the half-life above), e.g. 7 days.",
    )
    shortfall_policy = models.CharField(
        max_length=12,
        choices=ShortfallPolicy.choices,
        default=ShortfallPolicy.WARN,
        help_text="When GPUs in repair leave fewer healthy devices than the teams' guaranteed quotas add up to "
        "(root cohorts only: a nested cohort follows its root).",
    )
    spare_team = models.ForeignKey(
        "Team",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="spare_for",
        help_text="With 'spare team first': the team whose guaranteed quota gives up units first.",
    )
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
        verbose_name_plural = "policy pushes"
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
    apply_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the proposed change takes effect in the replay (empty: the window's start); the recorded "
        "policy changes of the window are replayed at their times either way.",
    )
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


class QuotaShortfall(models.Model):
    """A stretch of time in which a group's guaranteed quotas on one (flavor, resource) of a cluster were not all
    backed by healthy devices (queues.guarantees): opened when it starts, updated while its numbers change, closed
    when the devices are back. ``cohort`` is the group's root cohort (None: a queue outside any cohort,
    ``team_quota``)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="quota_shortfalls")
    cohort = models.ForeignKey(Cohort, null=True, blank=True, on_delete=models.CASCADE, related_name="shortfalls")
    team_quota = models.ForeignKey(
        TeamQuota, null=True, blank=True, on_delete=models.CASCADE, related_name="shortfalls"
    )
    flavor = models.ForeignKey(ResourceFlavor, on_delete=models.CASCADE, related_name="+")
    resource_name = models.CharField(max_length=253)
    policy = models.CharField(max_length=12, choices=Cohort.ShortfallPolicy.choices)
    guaranteed = models.PositiveIntegerField(help_text="The group's guaranteed quota on it (the nominal quotas' sum).")
    backed = models.PositiveIntegerField(help_text="How much of it healthy devices back now.")
    healthy = models.PositiveIntegerField(help_text="Healthy devices of the flavor in the cluster.")
    reductions = models.JSONField(
        default=list, blank=True, help_text='[{"team": slug or null, "line": id, "units": n}]: each quota reduced.'
    )
    started_at = models.DateTimeField()
    changed_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [models.Index(fields=["cluster", "ended_at"], name="shortfall_cluster_open")]

    def __str__(self) -> str:
        group = self.cohort.name if self.cohort_id else str(self.team_quota)
        return f"{group}: {self.backed}/{self.guaranteed} {self.resource_name} on {self.flavor}"

    @property
    def shortfall(self) -> int:
        """Guaranteed units not backed."""
        return self.guaranteed - self.backed
