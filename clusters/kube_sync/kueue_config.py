"""Whether Kueue's own configuration agrees with a cluster: its fair-sharing switch, the integrations the
workload kinds of the classes offered there need, and the DeviceClass mappings of the classes whose devices the
portal claims through DRA. Read it, compare, record.

Kueue shares fairly when its manager ``Configuration`` says so: the ConfigMap named by ``KUEUE_CONFIG_MAP``
(``kueue-system/kueue-manager-config``, key ``controller_manager_config.yaml``). The cluster row's switch
(``fair_sharing``, ``fair_sharing_strategies``) tells the portal's engine — wait reasons, ETAs, what-if previews —
what Kueue does. Each class's allowed workload kinds (``ResourceClass.allowed_kinds``) need Kueue's integration for
that kind (``KindSpec.kueue_framework``) in the Configuration's ``integrations.frameworks``: a JobSet nobody admits
stays suspended for ever. The portal does not own Kueue's configuration: it reads it at each configuration push
and at the admin's "check now", and records on the cluster row whether the two agree. Only with
``KUEUE_CONFIG_WRITE`` on does the push first add the missing integrations and DeviceClass mappings
(:mod:`clusters.kube_sync.kueue_config_write`); the fair-sharing switch is never written.

An unreachable cluster keeps the last outcome (:class:`~clusters.kube_sync.api.KubeUnavailable` propagates and
nothing is written): the push and the sync already report reachability.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from clusters.kube_sync.api import CONFIG_MAPS, KubeApi, KubeError, KubeNotFound, KubeUnavailable
from clusters.kube_sync.conf import kube_setting
from clusters.kube_sync.dra_claims import class_dra_request
from pools.models import Cluster, ResourceClass
from pools.workload_kinds import kind_spec
from queues.engine.kueue_config import (
    CONFIG_MAP_KEY,
    config_map_configuration,
    configuration_from_config_map,
    device_class_mappings,
    integration_frameworks,
)
from queues.engine.model import FairSharing
from queues.engine_input import cluster_fair_sharing
from queues.models import Cohort, QuotaLine, TeamQuota

State = Cluster.KueueConfig

#: Kueue integrations that work only with another enabled: Deployments and LeaderWorkerSets are admitted through
#: Kueue's pod integration (their pods are gated and grouped by it), so they need ``pod`` too.
FRAMEWORK_NEEDS = {"deployment": ("pod",), "leaderworkerset.x-k8s.io/leaderworkerset": ("pod",)}

#: How to fix a mismatch, on either side (the portal offers no button: Kueue's configuration is not its own).
FIX_HINT = (
    "Fix either side: edit this cluster's fair-sharing switch and strategies (Pools › Clusters) to match Kueue "
    "and the classes' allowed kinds to what Kueue integrates, "
    "or edit Kueue's ConfigMap {config_map} (key controller_manager_config.yaml) and restart Kueue "
    "(kubectl -n {namespace} rollout restart deployment kueue-controller-manager). The next configuration push, "
    'or "Push and check for drift now", checks again.'
)
#: Added to :data:`FIX_HINT` while ``KUEUE_CONFIG_WRITE`` is off.
WRITE_HINT = (
    " Or set KUEUE_CONFIG_WRITE=true (and grant the portal's Role the write access deploy/base/kueue-config-write "
    "describes): each push then adds the missing integrations and DeviceClass mappings to that ConfigMap and "
    "restarts Kueue."
)


class _Unreadable(Exception):
    """The ConfigMap's content is not a Configuration the parser accepts."""


def kueue_config_map() -> tuple[str, str]:
    """(namespace, name) of Kueue's manager ConfigMap, from ``KUEUE_CONFIG_MAP``."""
    value = str(kube_setting("KUEUE_CONFIG_MAP"))
    namespace, _, name = value.partition("/")
    if not namespace or not name or "/" in name:
        raise ImproperlyConfigured(f"KUEUE_CONFIG_MAP must be namespace/name, got {value!r}")
    return namespace, name


def fix_hint() -> str:
    """How to fix a mismatch, naming the configured ConfigMap."""
    namespace, name = kueue_config_map()
    hint = FIX_HINT.format(config_map=f"{namespace}/{name}", namespace=namespace)
    return hint if kube_setting("KUEUE_CONFIG_WRITE") else hint + WRITE_HINT


def _describe(setting: FairSharing | None) -> str:
    if setting is None:
        return "off"
    return f"on ({', '.join(setting.preemption_strategies)})"


def kueue_config_mismatch(*, cluster: Cluster, kueue: FairSharing | None) -> str:
    """What differs between Kueue's fair-sharing setting and the cluster's switch; "" when they agree."""
    switch = cluster_fair_sharing(cluster)
    if switch == kueue:
        return ""
    return (
        f"Kueue's configuration has fair sharing {_describe(kueue)} but this cluster's switch is "
        f"{_describe(switch)}: previews and explanations assume the wrong behaviour (the portal's engine follows "
        "the switch, Kueue follows its configuration)."
    )


@dataclass(frozen=True)
class KueueConfigCheck:
    """The outcome of one check: the state and what is wrong ("" when it matches)."""

    state: str
    problem: str
    added: str = ""  # what the push added to Kueue's Configuration (KUEUE_CONFIG_WRITE), in words

    @property
    def needs_attention(self) -> bool:
        """Whether an admin must look at it."""
        return self.state != State.MATCHES


def _outcome(cluster: Cluster, api: KubeApi) -> KueueConfigCheck:
    namespace, name = kueue_config_map()
    where = f"ConfigMap {namespace}/{name}"
    try:
        raw = api.get(CONFIG_MAPS, name=name, namespace=namespace)
    except KubeUnavailable:
        raise
    except KubeNotFound:
        return KueueConfigCheck(
            State.MISSING,
            f"{where} not found: is Kueue installed in {namespace}? If its configuration lives elsewhere, set "
            "KUEUE_CONFIG_MAP (and the Role that lets the portal read it).",
        )
    except KubeError as exc:
        if exc.status == 403:
            return KueueConfigCheck(
                State.FORBIDDEN,
                f"not allowed to read {where} (HTTP 403): apply the Role and RoleBinding gpu-portal-kueue-config "
                f"of deploy/base/rbac.yaml (get on that one ConfigMap in {namespace}). {exc.message}",
            )
        return KueueConfigCheck(State.ERROR, f"reading {where} failed: {exc.message}")

    def fail(path: str, problem: str) -> Exception:
        return _Unreadable(f"{where}: {path}: {problem}")

    try:
        kueue = configuration_from_config_map(raw, fail)
        config = config_map_configuration(raw, fail)

        def inner(sub: str, problem: str) -> Exception:
            return fail(f"{CONFIG_MAP_KEY}.{sub}", problem)

        enabled = integration_frameworks(config, inner)
        mappings = device_class_mappings(config, inner)
    except _Unreadable as exc:
        return KueueConfigCheck(State.INVALID, str(exc))
    checks = (
        kueue_config_mismatch(cluster=cluster, kueue=kueue),
        missing_integrations(cluster, enabled),
        missing_device_class_mappings(cluster, mappings),
        admission_fair_sharing_mismatch(cluster, config),
    )
    problems = [p for p in checks if p]
    return KueueConfigCheck(State.MISMATCH if problems else State.MATCHES, " ".join(problems))


_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|m|s|ms|us|µs|ns)")
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def go_duration_seconds(text: object) -> float | None:
    """A Go duration ("168h", "1h30m", "5m") in seconds; None when it is not one."""
    if not isinstance(text, str) or not text or _GO_DURATION.sub("", text) != "":
        return None
    return sum(float(n) * _GO_UNITS[unit] for n, unit in _GO_DURATION.findall(text))


def _go_duration(seconds: float) -> str:
    return f"{seconds / 3600:g}h" if seconds % 3600 == 0 else f"{seconds:g}s"


def admission_fair_sharing_mismatch(cluster: Cluster, config: Mapping[str, Any]) -> str:
    """Whether Kueue's ``admissionFairSharing`` suits the cohorts with fairness that remembers whose teams have
    quota on this cluster ("" when it does, or when none has the policy).

    The push gives those teams' ClusterQueues ``admissionScope: UsageBasedAdmissionFairSharing``; Kueue acts on it
    only when its Configuration has ``admissionFairSharing``, and decays usage with its own ``usageHalfLifeTime``.
    """
    half_lives = sorted(
        {
            c.usage_half_life.total_seconds()
            for c in Cohort.objects.filter(usage_half_life__isnull=False)
            if c.usage_half_life and _has_teams_on(c, cluster)
        }
    )
    if not half_lives:
        return ""
    wanted = " or ".join(_go_duration(h) for h in half_lives)
    afs = config.get("admissionFairSharing")
    if not isinstance(afs, Mapping):
        return (
            "Kueue's configuration has no admissionFairSharing: the admissionScope pushed on the ClusterQueues of "
            "cohorts with fairness that remembers does nothing there; add admissionFairSharing: {usageHalfLifeTime: "
            f"{wanted}, usageSamplingInterval: 5m}} (Kueue still orders teams of a cohort by their current share "
            "only; the portal applies their recent usage in simulation, ETAs and previews)."
        )
    configured = go_duration_seconds(afs.get("usageHalfLifeTime"))
    if configured is None or configured not in half_lives:
        return (
            f"Kueue's admissionFairSharing.usageHalfLifeTime is {afs.get('usageHalfLifeTime')!r}, the cohorts' "
            f"usage half-life {wanted}: Kueue's LocalQueue usage decays at another rate than the portal's."
        )
    return ""


def _has_teams_on(cohort: Cohort, cluster: Cluster) -> bool:
    """Whether a team with quota on ``cluster`` is in ``cohort``'s tree (the cohort or one below it)."""
    below = {cohort.pk}
    frontier = [cohort.pk]
    while frontier:
        frontier = list(Cohort.objects.filter(parent_id__in=frontier).values_list("pk", flat=True))
        below.update(frontier)
    return TeamQuota.objects.filter(cluster=cluster, cohort_id__in=below).exists()


def _offered_classes(cluster: Cluster) -> list[ResourceClass]:
    """The active classes offered on the cluster: a team has quota there for one of their flavors."""
    flavors = QuotaLine.objects.filter(team_quota__cluster=cluster).values("flavor_id")
    return list(
        ResourceClass.objects.filter(active=True, flavor_links__flavor_id__in=flavors).distinct().order_by("slug")
    )


def lacking_device_class_mappings(cluster: Cluster, mappings: dict[str, tuple[str, ...]]) -> list[tuple[str, str, str]]:
    """(resource name, DeviceClass, class slug) of each class offered on the cluster whose devices the portal claims
    through DRA but whose DeviceClass Kueue does not map to the class's resource name."""
    lacking = []
    for rc in _offered_classes(cluster):
        request = class_dra_request(rc, cluster_id=cluster.pk)
        if request is not None and request.device_class not in mappings.get(rc.resource_name, ()):
            lacking.append((rc.resource_name, request.device_class, rc.slug))
    return lacking


def missing_device_class_mappings(cluster: Cluster, mappings: dict[str, tuple[str, ...]]) -> str:
    """The classes whose devices the cluster publishes only as ResourceSlices but whose DeviceClass Kueue does not
    map to the class's resource name (its quota would not count their claims) ("" when none)."""
    lacking = [
        f"{{name: {name}, deviceClassNames: [{device_class}]}} (class {slug})"
        for name, device_class, slug in lacking_device_class_mappings(cluster, mappings)
    ]
    if not lacking:
        return ""
    return (
        "Kueue's configuration does not count the DRA devices the portal claims: add "
        f"{'; '.join(lacking)} to resources.deviceClassMappings (feature gate DynamicResourceAllocation)."
    )


def frameworks_needed(cluster: Cluster) -> dict[str, list[str]]:
    """Kueue framework → the classes offered on the cluster (a team has quota for one of their flavors there)
    whose allowed workload kinds need it, with what each framework itself needs (``deployment`` and
    LeaderWorkerSets are admitted through the ``pod`` integration)."""
    needed: dict[str, list[str]] = {}
    for rc in _offered_classes(cluster):
        for kind in rc.allowed_kinds or []:
            framework = kind_spec(kind).kueue_framework
            for name in (framework, *FRAMEWORK_NEEDS.get(framework, ())):
                users = needed.setdefault(name, [])
                if rc.slug not in users:
                    users.append(rc.slug)
    return needed


def missing_integrations(cluster: Cluster, enabled: tuple[str, ...]) -> str:
    """What the classes offered on the cluster need of Kueue's integrations and it lacks ("" when nothing)."""
    missing = {f: users for f, users in frameworks_needed(cluster).items() if f not in enabled}
    if not missing:
        return ""
    parts = [f"{f} (classes {', '.join(users)})" for f, users in sorted(missing.items())]
    return (
        f"Kueue's configuration does not enable the integrations {'; '.join(parts)}: jobs of those kinds would "
        f"never be admitted. Add {', '.join(sorted(missing))} to integrations.frameworks."
    )


def kueue_config_check(*, cluster: Cluster, api: KubeApi, now: datetime | None = None) -> KueueConfigCheck:
    """Read Kueue's manager ConfigMap, compare it with the cluster's switch, record the outcome on the row.

    Raises KubeUnavailable (and records nothing) when the cluster cannot be reached.
    """
    outcome = _outcome(cluster, api)
    cluster.kueue_config_state = outcome.state
    cluster.kueue_config_problem = outcome.problem
    cluster.kueue_config_checked_at = now or timezone.now()
    cluster.save(update_fields=["kueue_config_state", "kueue_config_problem", "kueue_config_checked_at"])
    return outcome
