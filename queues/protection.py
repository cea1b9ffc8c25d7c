"""Protected work: what shields a running job from preemption, from its class's settings and its own.

A class declares each protection's default and how far a job may ask beyond it (``ResourceClass.protect_*``); a job
may ask within that (``Job.protect_min_runtime_seconds``, ``protect_finishing_seconds``, ``preempt_after_checkpoint``;
empty: the class's default). The resolved protection goes to the engine (``engine_protection``), which honours it in
its victim selection and explains it (``queues.engine.protection``); the job page says what protects a job and until
when (``job_protection_status``); in Kubernetes mode the portal raises a protected job's Workload priority
(``clusters.kube_sync.protection``). docs/admin.md, *Protected work*, documents the rules and their limits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from kernel.labels import duration_words
from pools.models import ResourceClass
from queues.engine import model as m
from queues.engine.protection import CHECKPOINT, FINISHING, MIN_RUNTIME, RULE_TEXT, protected_until, remaining_text
from queues.models import Job

Err = Callable[[str, str], None]


@dataclass(frozen=True)
class JobProtection:
    """A job's resolved protection: seconds of minimum runtime and of finishing window (0: none), and the
    checkpoint grace when it is preempted only just after a checkpoint (None: it is not)."""

    min_runtime: int = 0
    finishing: int = 0
    checkpoint_grace: int | None = None

    @property
    def any(self) -> bool:
        """Whether anything protects the job."""
        return bool(self.min_runtime or self.finishing or self.checkpoint_grace is not None)


@dataclass(frozen=True)
class ClassProtection:
    """What a class gives its jobs by default: minimum runtime and finishing window (seconds, 0: none), the
    checkpoint grace (None: the class does not offer checkpoint alignment) and whether it is on by default."""

    min_runtime: int = 0
    finishing: int = 0
    checkpoint_grace: int | None = None
    checkpoint_default: bool = False


def class_protection(rc: ResourceClass) -> ClassProtection:
    """A class's protection defaults."""
    return ClassProtection(
        min_runtime=rc.protect_min_runtime_seconds or 0,
        finishing=rc.protect_finishing_seconds or 0,
        checkpoint_grace=rc.protect_checkpoint_grace_seconds,
        checkpoint_default=rc.protect_checkpoint_default,
    )


def job_protection(job: Job, defaults: ClassProtection | None = None) -> JobProtection:
    """The protection the job runs under: its own settings, else its class's defaults (``defaults``: the class's,
    when the caller has them). A finishing window needs a maximum runtime, checkpoint alignment an interval."""
    defaults = defaults or class_protection(job.resource_class)
    min_runtime = job.protect_min_runtime_seconds
    if min_runtime is None:
        min_runtime = defaults.min_runtime
    finishing = job.protect_finishing_seconds
    if finishing is None:
        finishing = defaults.finishing
    if not job.max_runtime_seconds:
        finishing = 0
    aligned = job.preempt_after_checkpoint
    if aligned is None:
        aligned = defaults.checkpoint_default
    grace = defaults.checkpoint_grace if aligned and job.checkpoint_interval_seconds else None
    return JobProtection(min_runtime=min_runtime, finishing=finishing, checkpoint_grace=grace)


def engine_protection(
    job: Job, defaults: ClassProtection | None = None, *, by_priority: bool = False
) -> m.Protection | None:
    """The job's protection as the engine takes it (None: none), counted from its current admission: the finishing
    window ends at what is left of its maximum runtime (less what checkpoints banked). ``by_priority``: in a
    Kubernetes cluster, where the protection is Kueue's raised priority (``m.Protection.by_priority``)."""
    p = job_protection(job, defaults)
    if not p.any:
        return None
    left = None
    if job.max_runtime_seconds:
        left = float(max(job.max_runtime_seconds - (job.run_seconds_banked or 0), 0))
    return m.Protection(
        min_runtime=float(p.min_runtime),
        max_runtime=left,
        finishing_window=float(p.finishing),
        checkpoint_interval=float(job.checkpoint_interval_seconds) if p.checkpoint_grace is not None else None,
        checkpoint_grace=float(p.checkpoint_grace or 0),
        by_priority=by_priority,
    )


@dataclass(frozen=True)
class ProtectionStatus:
    """What the job page says of a job's protection: the rules it runs under and, while it runs, whether one
    holds now, until when, and for how long still (as of when it was read)."""

    rules: list[str]
    protected_until: datetime | None = None
    rule: str = ""
    remaining: str = ""

    @property
    def rule_text(self) -> str:
        """The rule that protects it now, in words."""
        return RULE_TEXT.get(self.rule, "")


def job_protection_status(job: Job, *, now: datetime) -> ProtectionStatus:
    """The rules protecting the job and, while it holds quota, whether one holds at ``now`` and until when."""
    p = job_protection(job)
    rules = []
    if p.min_runtime:
        rules.append(f"not preempted before it has run {duration_words(p.min_runtime)}")
    if p.finishing:
        rules.append(f"not preempted in the last {duration_words(p.finishing)} of its maximum runtime")
    if p.checkpoint_grace is not None:
        rules.append(
            f"preempted only within {duration_words(p.checkpoint_grace)} after one of its checkpoints "
            f"(every {duration_words(job.checkpoint_interval_seconds or 0)})"
        )
    protection = engine_protection(job)
    if protection is None or job.admitted_at is None or job.state not in (Job.State.ADMITTED, Job.State.RUNNING):
        return ProtectionStatus(rules=rules)
    held = protected_until(protection, job.admitted_at.timestamp(), now.timestamp())
    if held is None:
        return ProtectionStatus(rules=rules)
    until = datetime.fromtimestamp(held[0], tz=now.tzinfo)
    left = remaining_text(held[0] - now.timestamp())
    return ProtectionStatus(rules=rules, protected_until=until, rule=held[1], remaining=left)


def protection_spec_errors(spec, err: Err) -> None:
    """What a submission (``JobSpec``) asks of protection, against what its class allows; each message names the
    field and the limit."""
    rc: ResourceClass = spec.resource_class
    for field_name, default, maximum, what in (
        ("protect_min_runtime_seconds", rc.protect_min_runtime_seconds, rc.protect_min_runtime_max_seconds, "minimum"),
        ("protect_finishing_seconds", rc.protect_finishing_seconds, rc.protect_finishing_max_seconds, "finishing"),
    ):
        what = "minimum runtime" if what == "minimum" else "finishing-soon window"
        value = getattr(spec, field_name, None)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            err(field_name, f"the {what} must be a whole number of seconds, got {value!r}")
            continue
        limit = maximum if maximum is not None else (default or 0)
        if value > limit:
            if not limit:
                err(field_name, f"{rc.name} allows no {what} protection")
            else:
                err(
                    field_name,
                    f"{rc.name} allows a {what} of at most {duration_words(limit)}, got {duration_words(value)}",
                )
    if getattr(spec, "protect_finishing_seconds", None) and not spec.max_runtime_seconds:
        err("protect_finishing_seconds", "a finishing-soon window needs a maximum runtime to count back from")
    if getattr(spec, "preempt_after_checkpoint", None):
        if rc.protect_checkpoint_grace_seconds is None:
            err("preempt_after_checkpoint", f"{rc.name} does not offer preemption only after a checkpoint")
        elif not spec.checkpoint_interval_seconds or not spec.checkpoint_path:
            err(
                "preempt_after_checkpoint",
                "give a checkpoint interval and path: the job is preempted only just after one of its checkpoints",
            )


__all__ = [
    "CHECKPOINT",
    "FINISHING",
    "MIN_RUNTIME",
    "ClassProtection",
    "JobProtection",
    "ProtectionStatus",
    "class_protection",
    "engine_protection",
    "job_protection",
    "job_protection_status",
    "protection_spec_errors",
]
