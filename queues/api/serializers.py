"""Serializers of the REST API: shapes only; validation beyond types is the services' (ValidationFailed → 400)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from pools.models import ResourceClass
from pools.workload_kinds import WorkloadKind
from queues import selectors as sel
from queues.job_spec import MAX_NAME, JobSpec
from queues.models import ApiToken, Job, PriorityClass
from queues.pod_sets import job_pod_set_rows


class PodSetInSerializer(serializers.Serializer):
    """Overrides of one companion pod set of the kind (a launcher, a Ray head…); what is left out keeps the kind's
    default. The primary pod set is set with ``pod_count`` and ``devices_per_pod``."""

    name = serializers.CharField(max_length=63, help_text="The pod set, e.g. head, launcher, master, leader.")
    count = serializers.IntegerField(required=False, help_text="Pods of this pod set (most kinds allow one).")
    devices_per_pod = serializers.IntegerField(required=False, help_text="0, or a count the class allows.")
    cpu = serializers.CharField(required=False, max_length=20, help_text="CPU per pod, e.g. 8 or 500m.")
    memory = serializers.CharField(required=False, max_length=20, help_text="Memory per pod, e.g. 64Gi.")


class PodSetSerializer(serializers.Serializer):
    """One pod set of a job, in Kueue's order (companions, then the primary), with where it was admitted."""

    name = serializers.CharField()
    primary = serializers.BooleanField(help_text="Whether it is the pod set of pod_count x devices_per_pod.")
    count = serializers.IntegerField()
    devices_per_pod = serializers.IntegerField()
    cpu = serializers.CharField(help_text="CPU per pod (Kubernetes quantity).")
    memory = serializers.CharField(help_text="Memory per pod (Kubernetes quantity).")
    flavors = serializers.ListField(child=serializers.CharField(), help_text="Flavors it was admitted on.")
    nodes = serializers.ListField(child=serializers.CharField(), help_text="Node of each pod, once admitted.")


class JobSubmitSerializer(serializers.Serializer):
    """A submission, as the submit form takes it (seconds for durations, lists for command lines)."""

    team = serializers.SlugField(required=False, help_text="Team slug; defaults to the token's team.")
    name = serializers.CharField(max_length=MAX_NAME)
    image = serializers.CharField(
        max_length=500, required=False, allow_blank=True, default="", help_text="Empty: the kind's default, if any."
    )
    kind = serializers.ChoiceField(
        choices=WorkloadKind.choices, default=WorkloadKind.BATCH.value, help_text="One the class allows."
    )
    pod_sets = PodSetInSerializer(
        many=True, required=False, default=list, help_text="Overrides of the kind's companion pod sets."
    )
    command = serializers.ListField(child=serializers.CharField(allow_blank=True), required=False, default=list)
    args = serializers.ListField(child=serializers.CharField(allow_blank=True), required=False, default=list)
    env = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False, default=dict)
    resource_class = serializers.SlugRelatedField(slug_field="slug", queryset=ResourceClass.objects.all())
    devices_per_pod = serializers.IntegerField(min_value=1, default=1)
    pod_count = serializers.IntegerField(min_value=1, default=1)
    topology_mode = serializers.ChoiceField(choices=["", "required", "preferred"], required=False, default="")
    topology_level = serializers.CharField(required=False, allow_blank=True, default="")
    priority_class = serializers.SlugRelatedField(
        slug_field="name", queryset=PriorityClass.objects.all(), required=False, allow_null=True, default=None
    )
    max_runtime_seconds = serializers.IntegerField(required=False, allow_null=True, default=None)
    checkpoint_path = serializers.CharField(required=False, allow_blank=True, default="")
    checkpoint_signal = serializers.CharField(required=False, allow_blank=True, default="")
    checkpoint_command = serializers.ListField(child=serializers.CharField(), required=False, default=list)
    checkpoint_interval_seconds = serializers.IntegerField(required=False, allow_null=True, default=None)
    protect_min_runtime_seconds = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Not preempted before it has run this long, within the class's limit (null: the class's default).",
    )
    protect_finishing_seconds = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Not preempted in the last this-many seconds of its maximum runtime (null: the class's default).",
    )
    preempt_after_checkpoint = serializers.BooleanField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Preempted only just after one of its periodic checkpoints (null: the class's default).",
    )
    sim_runtime_seconds = serializers.IntegerField(
        required=False, allow_null=True, default=None, help_text="Simulated clusters only: how long the job runs."
    )

    def validate_pod_sets(self, value: list[dict]) -> list[dict]:
        """Each pod set once."""
        names = [ps["name"] for ps in value]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise serializers.ValidationError(f"pod set(s) {', '.join(twice)} listed twice")
        return value

    def spec(self) -> JobSpec:
        """The validated data as a JobSpec."""
        d = dict(self.validated_data)
        d.pop("team", None)
        pod_sets = d.pop("pod_sets", [])
        companions = {ps["name"]: {k: v for k, v in ps.items() if k != "name"} for ps in pod_sets}
        return JobSpec(**d, companions=companions)


class WaitReasonFieldSerializer(serializers.Serializer):
    """The stored wait reason of a job."""

    code = serializers.CharField()
    label = serializers.CharField()
    message = serializers.CharField()
    kueue_message = serializers.CharField()
    since = serializers.DateTimeField(allow_null=True)


class JobListSerializer(serializers.ModelSerializer):
    """A job in a list."""

    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    owner = serializers.SlugRelatedField(slug_field="username", read_only=True)
    resource_class = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    wait_reason = serializers.SerializerMethodField()
    wait_label = serializers.SerializerMethodField()
    state_label = serializers.CharField(read_only=True, help_text='The state in words ("Stopped" for a session).')
    total_devices = serializers.IntegerField(read_only=True, help_text="Devices of every pod set together.")
    pod_set_count = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id",
            "name",
            "team",
            "owner",
            "state",
            "resource_class",
            "kind",
            "devices_per_pod",
            "pod_count",
            "priority",
            "submitted_at",
            "started_at",
            "finished_at",
            "wait_reason",
            "wait_label",
            "state_label",
            "total_devices",
            "pod_set_count",
        ]

    def get_pod_set_count(self, job: Job) -> int:
        """Pod sets of the job: its kind's companions (a master, a head, a leader) and the primary one."""
        return 1 + len(job.companion_pod_sets or ())

    def get_wait_reason(self, job: Job) -> str:
        """The current wait-reason code ("" unless pending)."""
        return job.wait_reason

    def get_wait_label(self, job: Job) -> str:
        """The current wait reason in words, e.g. "Team quota lent to other teams" ("" unless pending)."""
        return job.get_wait_reason_display() if job.wait_reason else ""


class JobSerializer(JobListSerializer):
    """A job with everything it was submitted with and what happened to it."""

    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    priority_class = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    assigned_flavor = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    wait = serializers.SerializerMethodField()
    pod_sets = serializers.SerializerMethodField()

    class Meta(JobListSerializer.Meta):
        fields = [
            *JobListSerializer.Meta.fields,
            "cluster",
            "image",
            "command",
            "args",
            "env",
            "topology_mode",
            "topology_level",
            "priority_class",
            "max_runtime_seconds",
            "checkpoint_path",
            "checkpoint_signal",
            "checkpoint_command",
            "checkpoint_interval_seconds",
            "protect_min_runtime_seconds",
            "protect_finishing_seconds",
            "preempt_after_checkpoint",
            "sim_runtime_seconds",
            "queued_at",
            "admitted_at",
            "assigned_flavor",
            "borrowing",
            "preemption_count",
            "k8s_namespace",
            "k8s_name",
            "wait",
            "pod_sets",
        ]

    @extend_schema_field(PodSetSerializer(many=True))
    def get_pod_sets(self, job: Job) -> list[dict]:
        """Every pod set (companions, then the primary) and the flavors and nodes it was admitted on."""
        return [
            {
                "name": row.shape.name,
                "primary": row.shape.primary,
                "count": row.shape.count,
                "devices_per_pod": row.shape.devices_per_pod,
                "cpu": row.shape.cpu,
                "memory": row.shape.memory,
                "flavors": list(row.flavors),
                "nodes": list(row.nodes),
            }
            for row in job_pod_set_rows(job)
        ]

    def get_wait(self, job: Job) -> dict | None:
        """The stored wait reason (see ``/wait-reason/`` for position, ETA and suggestions)."""
        if not job.wait_reason:
            return None
        redactor = self.context.get("redactor")  # queues.privacy: other teams' jobs named by their team only
        text = redactor.text if redactor is not None else str
        return {
            "code": job.wait_reason,
            "label": job.get_wait_reason_display(),
            "message": text(job.wait_message),
            "kueue_message": text(job.kueue_message),
            "since": job.wait_since,
        }


class JobPageSerializer(serializers.Serializer):
    """One page of jobs; follow ``next`` / ``previous`` (cursors, no total count)."""

    results = JobListSerializer(many=True)
    next = serializers.CharField(allow_null=True)
    previous = serializers.CharField(allow_null=True)


class PodLogSerializer(serializers.Serializer):
    """The last lines one pod of a job wrote."""

    pod = serializers.CharField()
    node = serializers.CharField()
    lines = serializers.ListField(child=serializers.CharField())
    note = serializers.CharField(help_text="Why there are no lines, e.g. a container that never started.")


class JobLogsSerializer(serializers.Serializer):
    """A job's log tail per pod, read from its cluster when asked."""

    job = serializers.IntegerField()
    state = serializers.CharField()
    tail_lines = serializers.IntegerField()
    pods = PodLogSerializer(many=True)


class EtaSerializer(serializers.Serializer):
    """Expected admission time."""

    starts_now = serializers.BooleanField()
    p50 = serializers.DateTimeField(allow_null=True)
    p90 = serializers.DateTimeField(allow_null=True)
    method = serializers.CharField()


class SuggestionSerializer(serializers.Serializer):
    """A verified change that would start the job now."""

    kind = serializers.CharField()
    title = serializers.CharField()
    message = serializers.CharField()
    changes = serializers.DictField()


class DiagnosisSerializer(serializers.Serializer):
    """Why a job waits, since when, its place in the queue, its ETA and suggestions."""

    job = serializers.IntegerField(source="job.pk")
    state = serializers.CharField(source="job.state")
    waiting = serializers.BooleanField()
    code = serializers.CharField()
    label = serializers.CharField()
    message = serializers.CharField()
    kueue_message = serializers.CharField()
    details = serializers.DictField()
    since = serializers.DateTimeField(allow_null=True)
    source = serializers.CharField()
    stale = serializers.CharField(help_text='Kubernetes: set when the portal has lost sight of the cluster ("as of").')
    position = serializers.SerializerMethodField()
    queue_length = serializers.SerializerMethodField()
    eta = EtaSerializer(allow_null=True)
    eta_change = serializers.DictField(
        allow_null=True,
        help_text="When the estimate moved much: the earlier one (at, starts_now, p50) and what changed (causes).",
    )
    suggestions = SuggestionSerializer(many=True)

    def get_position(self, d) -> int | None:
        """1 = next in its queue."""
        return d.position[0] if d.position else None

    def get_queue_length(self, d) -> int | None:
        """Pending jobs in its queue."""
        return d.position[1] if d.position else None


class FeasibilitySerializer(serializers.Serializer):
    """Would the submission start now; if not, why, when, and what would help."""

    admissible = serializers.BooleanField(source="verdict.admissible")
    code = serializers.CharField(source="verdict.code")
    label = serializers.CharField(source="verdict.label")
    message = serializers.CharField(source="verdict.message")
    kueue_message = serializers.CharField(source="verdict.kueue_message")
    details = serializers.DictField(source="verdict.details")
    flavors = serializers.ListField(child=serializers.CharField(), source="verdict.flavors")
    nodes = serializers.ListField(child=serializers.CharField(), source="verdict.nodes")
    borrowing = serializers.BooleanField(source="verdict.borrowing")
    eta = EtaSerializer()
    suggestions = SuggestionSerializer(many=True)


class TimelineEntrySerializer(serializers.Serializer):
    """One event of a job's timeline."""

    at = serializers.DateTimeField(source="event.at")
    kind = serializers.CharField(source="event.kind")
    label = serializers.CharField()
    message = serializers.CharField()
    first_message = serializers.CharField(
        help_text="The ongoing wait reason's sentence when it began, when its figures moved since ('' otherwise)."
    )
    code = serializers.CharField()
    details = serializers.DictField()
    duration_seconds = serializers.SerializerMethodField()
    ongoing = serializers.BooleanField()

    def get_duration_seconds(self, entry) -> float | None:
        """How long what this event started lasted (so far, when ongoing)."""
        return round(entry.duration.total_seconds(), 3) if entry.duration is not None else None


class CapacitySerializer(serializers.Serializer):
    """Units of a class: exists / in use / available / unhealthy / cordoned."""

    exists = serializers.IntegerField()
    in_use = serializers.IntegerField()
    available = serializers.IntegerField()
    unhealthy = serializers.IntegerField()
    cordoned = serializers.IntegerField()


class ProductSerializer(serializers.Serializer):
    """Hardware behind a class."""

    product = serializers.CharField()
    memory_bytes = serializers.IntegerField(allow_null=True)
    count = serializers.IntegerField()


class QuotaSerializer(serializers.Serializer):
    """The team's quota over a class's flavors and what it holds now."""

    nominal = serializers.IntegerField()
    borrowing_limit = serializers.IntegerField(allow_null=True)
    used = serializers.IntegerField()


class ClassSerializer(serializers.Serializer):
    """A resource class with live availability, the team's quota and the expected wait of a typical job."""

    slug = serializers.CharField(source="resource_class.slug")
    name = serializers.CharField(source="resource_class.name")
    description = serializers.CharField(source="resource_class.description")
    resource_name = serializers.CharField(source="resource_class.resource_name")
    sharing = serializers.CharField(source="resource_class.sharing")
    allowed_counts = serializers.ListField(child=serializers.IntegerField(), source="resource_class.allowed_counts")
    topology_mode = serializers.CharField(source="resource_class.topology_mode")
    topology_level = serializers.CharField(source="resource_class.topology_level")
    topology_levels = serializers.ListField(child=serializers.CharField(), source="hardware.topology_levels")
    flavors = serializers.SerializerMethodField()
    hardware = ProductSerializer(many=True, source="hardware.products")
    largest_node = serializers.IntegerField(source="hardware.largest_node")
    availability = CapacitySerializer(source="capacity")
    quota = serializers.SerializerMethodField()
    expected_wait = EtaSerializer(source="eta", allow_null=True)

    def get_flavors(self, card: sel.ClassCard) -> list[str]:
        """Flavors in preference order."""
        return [link.flavor.name for link in card.resource_class.flavor_links.all()]

    def get_quota(self, card: sel.ClassCard) -> dict | None:
        """The team's quota (None without one)."""
        if not card.quota:
            return None
        return {"nominal": card.nominal, "borrowing_limit": card.borrowing_limit, "used": card.used}


class TeamSerializer(serializers.Serializer):
    """A team the caller belongs to."""

    slug = serializers.CharField()
    name = serializers.CharField()
    namespace = serializers.CharField()
    priorities = serializers.SerializerMethodField()

    def get_priorities(self, team) -> list[str]:
        """Names of the priority classes the team may submit with, highest first."""
        return list(sel.priority_classes_for(team).values_list("name", flat=True))


class ApiTokenSerializer(serializers.ModelSerializer):
    """A token (never its key)."""

    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = ApiToken
        fields = ["id", "name", "team", "prefix", "created_at", "last_used_at", "expires_at", "revoked"]


class ApiTokenCreateSerializer(serializers.Serializer):
    """Ask for a token."""

    team = serializers.SlugField()
    name = serializers.CharField(max_length=100)
    expires_at = serializers.DateTimeField(required=False, allow_null=True, default=None)


class ApiTokenIssuedSerializer(ApiTokenSerializer):
    """A new token with its key, shown this once."""

    key = serializers.CharField(read_only=True)

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "key"]
