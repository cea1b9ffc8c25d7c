"""What a researcher submits (``JobSpec``) and the one check of it (``job_spec_errors``), for page, API and CLI.

Every problem is keyed by the field it concerns and names the limit it breaks; a submission with none can be
recorded (``queues.services.job_submit``) and can run on the class's hardware.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pools.models import Cluster, ResourceClass
from pools.workload_kinds import KINDS, WorkloadKind, kind_spec
from queues import selectors
from queues.models import PriorityClass, Team
from queues.pod_sets import companions_resolve
from queues.protection import protection_spec_errors
from queues.spec_limits import MAX_IMAGE, spec_limit_errors

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# An OCI image reference: [registry[:port]/]path[:tag][@sha256:digest], lower-case path components.
IMAGE_REF = re.compile(
    r"^(?:(?P<registry>[a-zA-Z0-9.-]+(?::\d+)?)/)?"
    r"(?P<path>[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>sha256:[a-f0-9]{64}))?$"
)
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
MAX_NAME = 50  # leaves room for the "-<id>" suffix inside Kubernetes' 63-character names


@dataclass
class JobSpec:
    """What a researcher submits."""

    name: str
    image: str
    resource_class: ResourceClass
    devices_per_pod: int = 1
    pod_count: int = 1
    #: a WorkloadKind; its primary pod set is ``pod_count`` x ``devices_per_pod``
    kind: str = WorkloadKind.BATCH
    #: overrides of the kind's companion pod sets, by name: {"head": {"cpu": "8", "memory": "32Gi"}}
    companions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    command: Sequence[str] = ()
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    topology_mode: str = ""
    topology_level: str = ""
    priority_class: PriorityClass | None = None
    max_runtime_seconds: int | None = None
    checkpoint_path: str = ""
    checkpoint_signal: str = ""
    checkpoint_command: Sequence[str] = ()
    checkpoint_interval_seconds: int | None = None
    #: protected work within what the class allows (queues.protection); None: the class's default
    protect_min_runtime_seconds: int | None = None
    protect_finishing_seconds: int | None = None
    preempt_after_checkpoint: bool | None = None
    sim_runtime_seconds: int | None = None
    sim_fails: bool = False


def spec_image(spec: JobSpec) -> str:
    """The image a submission runs: the one given, else its kind's default (a session's notebook image)."""
    if spec.image or spec.kind not in KINDS:
        return spec.image
    return kind_spec(spec.kind).default_image


def job_spec_errors(spec: JobSpec, *, team: Team, cluster: Cluster | None = None) -> dict[str, list[str]]:
    """Every problem with a submission, keyed by field, each naming the limit it breaks.

    "Can never run" is judged on the hardware of ``cluster`` (default: the cluster the team's jobs go to).
    """
    errors: dict[str, list[str]] = {}

    def err(field_name: str, message: str) -> None:
        errors.setdefault(field_name, []).append(message)

    companions = _kind_errors(spec, err)

    # fullmatch: "$" alone would accept a trailing newline ("train\n")
    if not DNS_LABEL.fullmatch(spec.name or "") or len(spec.name) > MAX_NAME:
        err(
            "name",
            f"{spec.name!r} is not a valid name: use lower-case letters, digits and '-', start and end with a "
            f"letter or digit, at most {MAX_NAME} characters (a DNS-1123 label)",
        )
    image = spec_image(spec)
    if not IMAGE_REF.fullmatch(image or "") or len(image) > MAX_IMAGE:
        err("image", f"{image!r} is not an image reference such as registry.example.com/team/train:1.4")
    rc = spec.resource_class
    if not rc.active:
        err("resource_class", f"class {rc.name} is not offered any more")
    allowed = rc.allowed_counts or []
    if spec.devices_per_pod not in allowed:
        err(
            "devices_per_pod",
            f"{rc.name} allows {', '.join(map(str, allowed))} devices per pod, not {spec.devices_per_pod}",
        )
    spec_limit_errors(spec, err)
    if spec.topology_mode not in ("", "required", "preferred"):
        err("topology_mode", "must be empty, required or preferred")
    if bool(spec.topology_mode) != bool(spec.topology_level):
        err("topology_level", "give both a topology mode and a level, or neither")
    for key in spec.env:
        if not isinstance(key, str) or not ENV_NAME.fullmatch(key):
            err("env", f"{key!r} is not a valid environment variable name")
    if (spec.checkpoint_signal or spec.checkpoint_command) and not spec.checkpoint_path:
        err("checkpoint_path", "say where checkpoints are written when a checkpoint signal or command is set")
    if spec.checkpoint_signal and not re.fullmatch(r"SIG[A-Z0-9]+", spec.checkpoint_signal):
        err("checkpoint_signal", f"{spec.checkpoint_signal!r} is not a signal name such as SIGUSR1")
    protection_spec_errors(spec, err)
    priority = spec.priority_class or PriorityClass.objects.filter(is_default=True).first()
    allowed_priorities = selectors.priority_classes_for(team)
    if priority is not None and not allowed_priorities.filter(pk=priority.pk).exists():
        names = ", ".join(allowed_priorities.values_list("name", flat=True))
        what = "priority" if spec.priority_class else "the default priority"
        err("priority_class", f"team {team.slug} may not use {what} {priority.name} (allowed: {names})")
    # What the hardware behind the class can ever give (any health: a repair is temporary, a node size is not).
    hw = selectors.class_hardware(rc, cluster=cluster or selectors.team_cluster(team))
    levels = selectors.allowed_topology_levels(rc, hw)
    if spec.topology_level and spec.topology_level not in levels:
        names = ", ".join(selectors.level_label(lv) for lv in levels) or "none"
        err("topology_level", f"{spec.topology_level} is not a topology level {rc.name} offers (levels: {names})")
    elif rc.topology_mode == "required" and rc.topology_level and spec.topology_mode != "required":
        err("topology_mode", f"{rc.name} requires its pods within one {selectors.level_label(rc.topology_level)}")
    if hw.total_units and not {"devices_per_pod", "pod_count", "pod_sets"} & errors.keys():
        per_pod = max([spec.devices_per_pod, *(c["devices_per_pod"] for c in companions)])
        total = spec.devices_per_pod * spec.pod_count + sum(c["count"] * c["devices_per_pod"] for c in companions)
        unit = rc.resource_name
        if per_pod > hw.largest_node:
            err(
                "devices_per_pod",
                f"can never run: asks {selectors.unit_noun(unit, per_pod)} per pod, "
                f"the largest node has {hw.largest_node}",
            )
        elif total > hw.total_units:
            err(
                "pod_count",
                f"can never run: asks {selectors.unit_noun(unit, total)} in all, {rc.name} has {hw.total_units}",
            )
        elif spec.topology_mode == "required" and spec.topology_level in hw.largest_domain:
            largest = hw.largest_domain[spec.topology_level]
            where = selectors.level_label(spec.topology_level)
            if total > largest:
                err(
                    "topology_level",
                    f"can never run: asks {selectors.unit_noun(unit, total)} in one {where}, "
                    f"the largest {where} has {largest}",
                )
    return errors


def _kind_errors(spec: JobSpec, err: Callable[[str, str], None]) -> list[dict[str, Any]]:
    """Check the kind against the class and the kind's rules; the resolved companion pod sets (empty for an
    unknown kind)."""
    rc = spec.resource_class
    allowed = list(rc.allowed_kinds or [])
    if spec.kind not in KINDS:
        err("kind", f"{spec.kind!r} is not a workload kind (kinds: {', '.join(KINDS)})")
        return []
    label = kind_spec(spec.kind).label
    if spec.kind not in allowed:
        names = ", ".join(allowed) or "none"
        err("kind", f"{rc.name} does not allow the kind {spec.kind} ({label}); allowed kinds: {names}")
    if kind_spec(spec.kind).runs_until_stopped and spec.max_runtime_seconds is not None:
        err(
            "max_runtime_seconds",
            f"a {label.lower()} runs until it is stopped: leave the maximum runtime empty",
        )
    return companions_resolve(
        kind=spec.kind, rc=rc, devices_per_pod=spec.devices_per_pod, overrides=spec.companions or {}, err=err
    )
