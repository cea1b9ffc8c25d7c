"""Forms of the researcher pages (and the API's list filters): parse input into a JobSpec or JobFilters.

Domain validation is not repeated here: ``job_spec_errors`` / ``job_submit`` decide, and their field
errors are put back on the form fields (``add_service_errors``).
"""

from __future__ import annotations

import re
import shlex

from django import forms
from django.contrib.auth import get_user_model
from django.utils import timezone

from kernel.dates import date_range_problem
from kernel.errors import ValidationFailed
from pools.models import ResourceClass
from pools.workload_kinds import KINDS, WorkloadKind, kind_spec
from queues import selectors as sel
from queues.job_spec import MAX_NAME, JobSpec, job_spec_errors
from queues.models import Job, PriorityClass, Team
from queues.spec_limits import MAX_CHECKPOINT_PATH, MAX_CHECKPOINT_SIGNAL, MAX_IMAGE

_DURATION = re.compile(r"^(?:(?P<d>\d+)\s*d)?\s*(?:(?P<h>\d+)\s*h)?\s*(?:(?P<m>\d+)\s*m)?\s*(?:(?P<s>\d+)\s*s)?$")


def parse_duration(text: str) -> int | None:
    """``90m``, ``2h``, ``1h30m``, ``1d``, ``45s`` → seconds; a bare number is minutes; empty → None."""
    text = (text or "").strip().lower().replace(" ", "")
    if not text:
        return None
    if text.isdigit():
        return int(text) * 60
    match = _DURATION.match(text)
    if not match or not any(match.groupdict().values()):
        raise forms.ValidationError(f"{text!r} is not a duration such as 90m, 2h, 1h30m or 1d", code="duration")
    parts = {k: int(v or 0) for k, v in match.groupdict().items()}
    return parts["d"] * 86400 + parts["h"] * 3600 + parts["m"] * 60 + parts["s"]


def format_duration(seconds: int | None) -> str:
    """Seconds as the form writes them back: 5400 → ``1h30m``, 45 → ``45s``."""
    if not seconds:
        return ""
    out = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            out.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(out)


class DurationField(forms.CharField):
    """A duration typed as text (``2h30m``), cleaned to seconds."""

    def to_python(self, value):
        return parse_duration(super().to_python(value))

    def prepare_value(self, value):
        return format_duration(value) if isinstance(value, int) else value


class ShellWordsField(forms.CharField):
    """A command line typed as one string, cleaned to a list of words (shell quoting rules)."""

    def to_python(self, value):
        text = super().to_python(value)
        if not text:
            return []
        try:
            return shlex.split(text)
        except ValueError as exc:
            raise forms.ValidationError(f"cannot split into words: {exc}", code="shell") from exc

    def prepare_value(self, value):
        return shlex.join(value) if isinstance(value, list | tuple) else value


class EnvField(forms.CharField):
    """``KEY=VALUE`` lines, cleaned to a dict."""

    widget = forms.Textarea(attrs={"rows": 3, "spellcheck": "false"})

    def to_python(self, value):
        text = super().to_python(value) or ""
        env: dict[str, str] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if "=" not in line:
                raise forms.ValidationError(f"line {number} ({line!r}) is not KEY=VALUE", code="env")
            key, _, val = line.partition("=")
            env[key.strip()] = val
        return env

    def prepare_value(self, value):
        if isinstance(value, dict):
            return "\n".join(f"{k}={v}" for k, v in value.items())
        return value


#: Service field names → form field names, where they differ.
SERVICE_FIELDS = {
    "max_runtime_seconds": "max_runtime",
    "checkpoint_interval_seconds": "checkpoint_interval",
    "sim_runtime_seconds": "sim_runtime",
    "protect_min_runtime_seconds": "protect_min_runtime",
    "protect_finishing_seconds": "protect_finishing",
}

#: Form field of one request of a companion pod set: ``pod_set_<name>_<devices|cpu|memory>``.
POD_SET_FIELD = "pod_set_{name}_{what}"
POD_SET_PARTS = {"devices": "devices_per_pod", "cpu": "cpu", "memory": "memory"}


class JobSubmitForm(forms.Form):
    """A submission; ``spec()`` turns it into the JobSpec ``job_submit`` takes."""

    name = forms.CharField(
        max_length=MAX_NAME, help_text=f"Lower-case letters, digits and '-', at most {MAX_NAME} characters."
    )
    image = forms.CharField(max_length=MAX_IMAGE, required=False, help_text="e.g. registry.example.org/team/train:1.4")
    command = ShellWordsField(required=False, help_text="The container's command, e.g. python train.py")
    args = ShellWordsField(required=False, help_text="Arguments, e.g. --epochs 10 --lr 3e-4")
    env = EnvField(required=False, label="Environment", help_text="One KEY=VALUE per line.")
    resource_class = forms.ModelChoiceField(
        queryset=ResourceClass.objects.none(), to_field_name="slug", label="Class", empty_label=None
    )
    kind = forms.ChoiceField(choices=WorkloadKind.choices, required=False, label="Kind")
    devices_per_pod = forms.IntegerField(min_value=1, initial=1, label="Devices per pod", widget=forms.Select)
    pod_count = forms.IntegerField(
        min_value=1, initial=1, label="Pods", help_text="A gang: all pods start together or none does."
    )
    topology_mode = forms.ChoiceField(
        choices=[("", "Any placement"), ("required", "Required"), ("preferred", "Preferred")],
        required=False,
        label="Topology",
    )
    topology_level = forms.CharField(required=False, label="Keep pods within one", widget=forms.Select)
    priority_class = forms.ModelChoiceField(
        queryset=PriorityClass.objects.none(), to_field_name="name", required=False, label="Priority"
    )
    max_runtime = DurationField(
        required=False, label="Maximum runtime", help_text="e.g. 8h or 2d; a number is minutes."
    )
    checkpoint_path = forms.CharField(
        max_length=MAX_CHECKPOINT_PATH, required=False, help_text="Where checkpoints are written."
    )
    checkpoint_signal = forms.CharField(max_length=MAX_CHECKPOINT_SIGNAL, required=False, help_text="e.g. SIGUSR1")
    checkpoint_command = ShellWordsField(required=False, help_text="Or a command that writes a checkpoint.")
    checkpoint_interval = DurationField(required=False, help_text="e.g. 30m")
    protect_min_runtime = DurationField(
        required=False,
        label="Minimum runtime before preemption",
        help_text="Not preempted before it has run this long, within what the class allows (empty: the class's).",
    )
    protect_finishing = DurationField(
        required=False,
        label="Finishing-soon protection",
        help_text="Not preempted in the last minutes of its maximum runtime, e.g. 15m (empty: the class's).",
    )
    preempt_after_checkpoint = forms.NullBooleanField(
        required=False,
        label="Preempt only after a checkpoint",
        widget=forms.Select(choices=[("", "Class default"), ("true", "Yes"), ("false", "No")]),
        help_text="Preempted only just after one of its periodic checkpoints (needs an interval and a path).",
    )
    sim_runtime = DurationField(
        required=False, label="Simulated runtime", help_text="Simulated cluster only: how long the job runs, e.g. 5m."
    )

    #: Fields whose values come from the class: a new class resets them to its own (typed fields are kept).
    CLASS_FIELDS = ("devices_per_pod", "topology_mode", "topology_level")

    def __init__(self, *args, team: Team | None, simulated: bool = True, class_changed: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if class_changed and not self.is_bound:
            self.initial = {k: v for k, v in self.initial.items() if k not in self.CLASS_FIELDS}
        self.team = team
        self.fields["resource_class"].queryset = sel.classes_for_team(team)
        self.fields["resource_class"].error_messages["invalid_choice"] = sel.class_choice_error(team)
        if team is not None:
            self.fields["priority_class"].queryset = sel.priority_classes_for(team)
        default = PriorityClass.objects.filter(is_default=True).first()
        self.fields["priority_class"].empty_label = f"Default ({default.name})" if default else "Default"
        if team is not None and default is not None and default not in self.fields["priority_class"].queryset:
            # The team may not use the default priority: it must pick one of its own.
            self.fields["priority_class"].required = True
            self.fields["priority_class"].empty_label = None
        if not simulated:
            del self.fields["sim_runtime"]
        self.selected_class = self._selected_class()
        self._set_class_choices()
        self.selected_kind = self._selected_kind()
        self._set_kind_fields(simulated=simulated)

    def _selected_class(self) -> ResourceClass | None:
        """The class the form shows counts and levels for: the submitted one, else the initial, else the first."""
        queryset = self.fields["resource_class"].queryset
        raw = self.data.get("resource_class") if self.is_bound else None
        raw = raw or self.initial.get("resource_class")
        if isinstance(raw, ResourceClass):
            return raw
        choice = queryset.filter(slug=raw).first() if raw else None
        return choice or queryset.first()

    def _set_class_choices(self) -> None:
        """Devices-per-pod and topology-level options of the selected class."""
        rc = self.selected_class
        counts = sorted(rc.allowed_counts or [1]) if rc else [1]
        self.fields["devices_per_pod"].widget.choices = [(c, str(c)) for c in counts]
        self.fields["devices_per_pod"].initial = counts[0]
        levels = sel.allowed_topology_levels(rc) if rc else []
        self.topology_levels = levels
        self.fields["topology_level"].widget.choices = [("", "—")] + [(lv, sel.level_label(lv)) for lv in levels]
        if not self.is_bound and (self.initial.get("topology_level") or "") not in ("", *levels):
            # A level this class does not have (carried from another class): the class's own rule instead.
            self.initial.pop("topology_level", None)
            self.initial.pop("topology_mode", None)
        if rc and rc.topology_mode and rc.topology_level:
            self.fields["topology_mode"].initial = rc.topology_mode
            self.fields["topology_level"].initial = rc.topology_level
        if rc and rc.topology_mode == ResourceClass.TopologyMode.REQUIRED:
            # The class keeps its pods together; the service refuses anything else, so offer nothing else.
            self.fields["topology_mode"].choices = [("required", "Required")]
        self._set_protection_fields(rc)

    def _set_protection_fields(self, rc: ResourceClass | None) -> None:
        """Protected work: only what the class offers, each field saying the class's default and limit."""
        self.protection_fields = []
        for name, default, maximum in (
            ("protect_min_runtime", rc and rc.protect_min_runtime_seconds, rc and rc.protect_min_runtime_max_seconds),
            ("protect_finishing", rc and rc.protect_finishing_seconds, rc and rc.protect_finishing_max_seconds),
        ):
            limit = maximum if maximum is not None else default
            if not limit:
                self.fields.pop(name)
                continue
            own = f"the class's own: {format_duration(default)}" if default else "the class gives none"
            self.fields[name].help_text = f"At most {format_duration(limit)}; empty: {own}."
            self.protection_fields.append(name)
        if rc is None or rc.protect_checkpoint_grace_seconds is None:
            self.fields.pop("preempt_after_checkpoint")
        else:
            default = "yes" if rc.protect_checkpoint_default else "no"
            self.fields["preempt_after_checkpoint"].help_text = (
                f"Preempted only within {format_duration(rc.protect_checkpoint_grace_seconds)} after one of its "
                f"periodic checkpoints (needs an interval and a path); class default: {default}."
            )
            self.protection_fields.append("preempt_after_checkpoint")

    def _selected_kind(self) -> str:
        """The kind the form shows fields for: the submitted or initial one if the class allows it, else the
        class's first allowed kind (batch where allowed)."""
        allowed = [k for k in KINDS if k in ((self.selected_class.allowed_kinds or []) if self.selected_class else [])]
        raw = self.data.get("kind") if self.is_bound else None
        raw = raw or self.initial.get("kind")
        if raw in allowed or (self.is_bound and raw):
            return raw  # a bound kind the class does not allow stays, so that the service's error names it
        return allowed[0] if allowed else WorkloadKind.BATCH.value

    def _set_kind_fields(self, *, simulated: bool) -> None:
        """The kind's choices (the class's allowed kinds), its defaults, and a field per companion request."""
        rc = self.selected_class
        allowed = [k for k in KINDS if rc is not None and k in (rc.allowed_kinds or [])]
        self.fields["kind"].choices = [(k, kind_spec(k).label) for k in allowed] or [
            (WorkloadKind.BATCH.value, WorkloadKind.BATCH.label)
        ]
        self.fields["kind"].initial = self.selected_kind
        if self.selected_kind not in KINDS:
            self.companion_fields = []
            return
        spec = kind_spec(self.selected_kind)
        if spec.kind != WorkloadKind.BATCH:
            self.fields["pod_count"].label = f"Pods ({spec.primary_pod_set})"
            self.fields["devices_per_pod"].label = f"Devices per pod ({spec.primary_pod_set})"
        if spec.default_image:
            self.fields["image"].help_text = f"Empty: {spec.default_image}"
        if spec.runs_until_stopped:
            # a session or a service runs until it is stopped: no maximum runtime, no simulated end
            for name in ("max_runtime", "sim_runtime"):
                self.fields.pop(name, None)
        self.companion_fields = []
        counts = sorted(rc.allowed_counts or []) if rc else []
        for companion in spec.companions:
            names = []
            for what, label, field in (
                (
                    "devices",
                    "devices per pod",
                    forms.TypedChoiceField(
                        coerce=int,
                        empty_value=None,
                        required=False,
                        choices=[("", "like the workers" if companion.devices_like_primary else "none")]
                        + [(c, str(c)) for c in [0, *counts]],
                    ),
                ),
                ("cpu", "CPU per pod", forms.CharField(required=False, max_length=20)),
                ("memory", "memory per pod", forms.CharField(required=False, max_length=20)),
            ):
                name = POD_SET_FIELD.format(name=companion.name, what=what)
                field.label = f"{companion.name.capitalize()}: {label}"
                if what != "devices":
                    default = getattr(companion, what)
                    field.help_text = (
                        "Empty: the class's per-device request"
                        if companion.devices_like_primary
                        else f"Empty: {default}, e.g. 500m or 64Gi"
                    )
                self.fields[name] = field
                names.append(name)
            self.companion_fields.append(names)

    def _value(self, name: str) -> object:
        """What the field shows now: posted, else initial, else the field's own initial."""
        if self.is_bound:
            return self.data.get(name)
        field = self.fields.get(name)
        return self.initial.get(name, field.initial if field is not None else None)

    def total_plan(self) -> dict:
        """The pod sets the form adds up to, for the running total under the fields (the script recomputes it as
        the fields change): each companion's pods and where its devices come from, then the primary pod set."""
        kind = self.selected_kind
        spec = kind_spec(kind) if kind in KINDS else None
        companions = [
            {
                "name": c.name,
                "count": c.count,
                "field": POD_SET_FIELD.format(name=c.name, what="devices"),
                "like_primary": c.devices_like_primary,
                "devices": c.devices_per_pod,
            }
            for c in (spec.companions if spec else ())
        ]
        resource = self.selected_class.resource_name if self.selected_class else ""
        return {
            "primary": spec.primary_pod_set if spec else "main",
            "companions": companions,
            "resource": resource,
            "unit": [sel.unit_noun(resource, n).split(" ", 1)[1] for n in (1, 2)],
        }

    def total_text(self) -> str:
        """The running total as the form stands: "24 GPUs in all: master 1 pod × 8 + worker 2 pods × 8"."""
        plan = self.total_plan()

        def number(name: str, default: int) -> int:
            raw = self._value(name)
            return int(raw) if str(raw or "").isdigit() else default

        per_pod, pods = number("devices_per_pod", 1), number("pod_count", 1)
        parts, total = [], 0
        for c in plan["companions"]:
            devices = number(c["field"], per_pod if c["like_primary"] else c["devices"])
            total += c["count"] * devices
            parts.append(f"{c['name']} {c['count']} pod{'s' if c['count'] != 1 else ''} × {devices}")
        total += pods * per_pod
        parts.append(f"{plan['primary']} {pods} pod{'s' if pods != 1 else ''} × {per_pod}")
        return f"{sel.unit_noun(plan['resource'], total)} in all: {' + '.join(parts)}"

    def clean(self):
        """An image is needed unless the kind has a default one (a session's notebook image)."""
        d = super().clean()
        kind = d.get("kind") or self.selected_kind
        if not d.get("image") and "image" not in self.errors and not (kind in KINDS and kind_spec(kind).default_image):
            self.add_error("image", "This field is required.")
        return d

    def companions(self) -> dict[str, dict[str, object]]:
        """The companion pod sets' overrides the form was given (empty values keep the kind's defaults)."""
        d = self.cleaned_data
        out: dict[str, dict[str, object]] = {}
        kind = self.selected_kind
        for companion in kind_spec(kind).companions if kind in KINDS else ():
            given = {}
            for what, key in POD_SET_PARTS.items():
                value = d.get(POD_SET_FIELD.format(name=companion.name, what=what))
                if value not in (None, ""):
                    given[key] = value.strip() if isinstance(value, str) else value
            if given:
                out[companion.name] = given
        return out

    def spec(self) -> JobSpec:
        """The cleaned form as a JobSpec (call after ``is_valid()``)."""
        d = self.cleaned_data
        return JobSpec(
            name=d["name"],
            image=d["image"],
            kind=d.get("kind") or self.selected_kind,
            companions=self.companions(),
            resource_class=d["resource_class"],
            devices_per_pod=d["devices_per_pod"],
            pod_count=d["pod_count"],
            command=d["command"],
            args=d["args"],
            env=d["env"],
            topology_mode=d["topology_mode"],
            topology_level=d["topology_level"],
            priority_class=d["priority_class"],
            max_runtime_seconds=d.get("max_runtime"),
            checkpoint_path=d["checkpoint_path"],
            checkpoint_signal=d["checkpoint_signal"],
            checkpoint_command=d["checkpoint_command"],
            checkpoint_interval_seconds=d["checkpoint_interval"],
            protect_min_runtime_seconds=d.get("protect_min_runtime"),
            protect_finishing_seconds=d.get("protect_finishing"),
            preempt_after_checkpoint=d.get("preempt_after_checkpoint"),
            sim_runtime_seconds=d.get("sim_runtime"),
        )

    def add_remaining_errors(self) -> None:
        """On a form with field errors: the service's problems with the fields that did parse, so that every
        problem shows at once (not the field errors first and, once fixed, the service's). A field already in
        error keeps only its own message; nothing is checked without a class to check against."""
        if self.team is None or not self.errors:
            return
        d = getattr(self, "cleaned_data", {})
        rc = d.get("resource_class")
        if rc is None:
            return
        bad = set(self.errors)
        spec = JobSpec(
            name=d.get("name") or str(self.data.get("name", "")),
            image=d.get("image") or str(self.data.get("image", "")),
            kind=d.get("kind") or self.selected_kind,
            companions=self.companions(),
            resource_class=rc,
            devices_per_pod=d.get("devices_per_pod") or min(rc.allowed_counts or [1]),
            pod_count=d.get("pod_count") or 1,
            command=d.get("command") or (),
            args=d.get("args") or (),
            env=d.get("env") or {},
            topology_mode=d.get("topology_mode") or "",
            topology_level=d.get("topology_level") or "",
            priority_class=d.get("priority_class"),
            max_runtime_seconds=d.get("max_runtime"),
            checkpoint_path=d.get("checkpoint_path") or "",
            checkpoint_signal=d.get("checkpoint_signal") or "",
            checkpoint_command=d.get("checkpoint_command") or (),
            checkpoint_interval_seconds=d.get("checkpoint_interval"),
            protect_min_runtime_seconds=d.get("protect_min_runtime"),
            protect_finishing_seconds=d.get("protect_finishing"),
            preempt_after_checkpoint=d.get("preempt_after_checkpoint"),
            sim_runtime_seconds=d.get("sim_runtime"),
        )
        errors = job_spec_errors(spec, team=self.team)
        self.add_service_errors(
            {k: v for k, v in errors.items() if SERVICE_FIELDS.get(k, k) not in bad and k not in bad}
        )

    def add_service_errors(self, error: ValidationFailed | dict[str, list[str]]) -> None:
        """Put a service's field errors on the matching fields (unknown fields become form errors)."""
        errors = error.errors if isinstance(error, ValidationFailed) else error
        for service_field, messages in errors.items():
            name = SERVICE_FIELDS.get(service_field, service_field)
            for message in messages:
                self.add_error(name if name in self.fields else None, message)


def job_initial(job: Job) -> dict:
    """Form values that resubmit ``job`` as it was."""
    return {
        "name": job.name,
        "image": job.image,
        "command": list(job.command or []),
        "args": list(job.args or []),
        "env": dict(job.env or {}),
        "resource_class": job.resource_class.slug,
        "kind": job.kind,
        **{
            POD_SET_FIELD.format(name=c["name"], what=what): c[key]
            for c in job.companion_pod_sets or ()
            for what, key in POD_SET_PARTS.items()
        },
        "devices_per_pod": job.devices_per_pod,
        "pod_count": job.pod_count,
        "topology_mode": job.topology_mode,
        "topology_level": job.topology_level,
        "priority_class": job.priority_class.name if job.priority_class_id else "",
        "max_runtime": job.max_runtime_seconds,
        "checkpoint_path": job.checkpoint_path,
        "checkpoint_signal": job.checkpoint_signal,
        "checkpoint_command": list(job.checkpoint_command or []),
        "checkpoint_interval": job.checkpoint_interval_seconds,
        "protect_min_runtime": job.protect_min_runtime_seconds,
        "protect_finishing": job.protect_finishing_seconds,
        "preempt_after_checkpoint": job.preempt_after_checkpoint,
        "sim_runtime": job.sim_runtime_seconds,
    }


class JobFilterForm(forms.Form):
    """Filters of the job list, shared by the page and the API (unknown values are reported and ignored)."""

    team = forms.ModelChoiceField(
        queryset=Team.objects.order_by("name"), to_field_name="slug", required=False, empty_label="Every team"
    )
    scope = forms.ChoiceField(choices=[("team", "Team's jobs"), ("mine", "My jobs")], required=False, label="Show")
    state = forms.ChoiceField(choices=[("", "Any state"), *Job.State.choices], required=False)
    resource_class = forms.ModelChoiceField(
        queryset=ResourceClass.objects.all(),
        to_field_name="slug",
        required=False,
        label="Class",
        empty_label="Any class",
    )
    owner = forms.ModelChoiceField(
        queryset=get_user_model().objects.none(),
        to_field_name="username",
        required=False,
        label="User",
        empty_label="Anyone",
    )
    submitted_from = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}))
    submitted_to = forms.DateField(required=False, label="To", widget=forms.DateInput(attrs={"type": "date"}))

    def __init__(self, *args, team: Team | None, user=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        #: Platform admins and operators pick any team (or every team); the others see their team's jobs.
        self.every_team = user is not None and sel.sees_every_team(user)
        if self.every_team:
            team = self.chosen_team()
        else:
            del self.fields["team"]
        users = get_user_model().objects.order_by("username")
        if team is not None:
            users = users.filter(memberships__team=team)
        elif self.every_team:
            users = users.filter(memberships__isnull=False).distinct()
        elif user is not None:
            users = users.filter(memberships__team__in=sel.teams_of(user)).distinct()
        else:
            users = users.none()
        self.fields["owner"].queryset = users
        if user is not None:
            self.fields["resource_class"].queryset = sel.filter_classes(user, team)

    def clean_submitted_from(self):
        """A date within the range filters accept (a day added to 9999-12-31 would overflow)."""
        return self._bounded_date("submitted_from")

    def clean_submitted_to(self):
        """A date within the range filters accept."""
        return self._bounded_date("submitted_to")

    def _bounded_date(self, name: str):
        day = self.cleaned_data.get(name)
        if day is not None and (problem := date_range_problem(day, today=timezone.localdate())):
            raise forms.ValidationError(problem, code="date_range")
        return day

    def chosen_team(self) -> Team | None:
        """The team picked in the team filter (admins and operators only); ``None`` for every team or a bad slug."""
        if "team" not in self.fields:
            return None
        slug = str(self.data.get("team", "") or "")
        return Team.objects.filter(slug=slug).first() if slug else None

    def filters(self) -> sel.JobFilters:
        """The valid filters; invalid ones are dropped (the template says so next to the field)."""
        self.is_valid()
        d = {k: v for k, v in getattr(self, "cleaned_data", {}).items() if k not in self.errors}
        return sel.JobFilters(
            mine=d.get("scope") == "mine",
            state=d.get("state") or "",
            resource_class=d.get("resource_class"),
            owner=d.get("owner"),
            submitted_from=d.get("submitted_from"),
            submitted_to=d.get("submitted_to"),
        )

    #: What a model choice shows: the field of the row used as its label.
    CHOICE_LABELS = {"team": "name", "resource_class": "name", "owner": "username"}

    def light_fields(self) -> list[dict]:
        """The filters for a plain template loop (name, label, kind, options or value, error).

        Django's widget templates render each <option> through the template engine; on the job list, a page
        that must stay fast at a million jobs, the filters are written out directly instead.
        """
        self.is_valid()
        out = []
        for name, field in self.fields.items():
            raw = str(self.data.get(name, "") or "")
            entry = {"name": name, "label": self[name].label, "error": name in self.errors, "value": raw}
            if isinstance(field, forms.ModelChoiceField):
                rows = field.queryset.values_list(field.to_field_name, self.CHOICE_LABELS[name])
                choices = [("", field.empty_label or "---------"), *((str(k), str(v)) for k, v in rows)]
            elif isinstance(field, forms.ChoiceField):
                choices = [(str(k), str(v)) for k, v in field.choices]
            else:
                out.append({**entry, "kind": "date"})
                continue
            options = [(k, v, k == raw) for k, v in choices]
            out.append({**entry, "kind": "select", "options": options})
        return out

    def page_cursor(self) -> sel.Cursor | None:
        """The page position asked for."""
        return sel.Cursor.decode(self.data.get("cursor"))

    @property
    def filtered(self) -> bool:
        """Whether any filter other than the scope is set."""
        f = self.filters()
        return bool(f.state or f.resource_class or f.owner or f.submitted_from or f.submitted_to or self.chosen_team())
