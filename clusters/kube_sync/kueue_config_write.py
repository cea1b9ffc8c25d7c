"""Adding to Kueue's manager Configuration what the classes offered on a cluster need, when ``KUEUE_CONFIG_WRITE``
is on: the integrations their workload kinds need (:func:`~clusters.kube_sync.kueue_config.frameworks_needed`) and
the DeviceClass mappings of the classes the portal claims through DRA
(:func:`~clusters.kube_sync.kueue_config.lacking_device_class_mappings`).

Only what is missing is added: the Configuration is parsed, those two lists extended, and dumped back; every other
key of it and of the ConfigMap is kept. The write is a merge patch carrying the resourceVersion that was read (a
concurrent change answers 409: read again and recompute). Kueue reads its configuration at start, so a write is
followed by what ``kubectl rollout restart`` does: the ``kubectl.kubernetes.io/restartedAt`` annotation on the pod
template of its controller's Deployment (``KUEUE_CONTROLLER_DEPLOYMENT``, in the ConfigMap's namespace). Nothing is
written when nothing is missing, so a second push changes nothing. What cannot be read is left to the check, which
reads again after this and reports it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import yaml

from clusters.kube_sync.api import CONFIG_MAPS, DEPLOYMENTS, KubeApi, KubeConflict, KubeError, KubeUnavailable
from clusters.kube_sync.conf import kube_setting
from clusters.kube_sync.kueue_config import (
    KueueConfigCheck,
    State,
    frameworks_needed,
    kueue_config_check,
    kueue_config_map,
    lacking_device_class_mappings,
)
from pools.models import Cluster
from queues.engine.kueue_config import (
    CONFIG_MAP_KEY,
    config_map_configuration,
    device_class_mappings,
    integration_frameworks,
)

log = logging.getLogger(__name__)

#: Reads and writes tried before a run of 409s is reported (each 409 means someone else changed it meanwhile).
ATTEMPTS = 3
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"


class _Unreadable(Exception):
    """The ConfigMap holds no Configuration the parser accepts (the check reports it)."""


def _fail(path: str, problem: str) -> Exception:
    return _Unreadable(f"{path}: {problem}")


@dataclass(frozen=True)
class KueueConfigWrite:
    """What one push added to Kueue's Configuration ("" when nothing) and what went wrong ("" when nothing)."""

    added: str = ""
    problem: str = ""


def _completed(cluster: Cluster, config: dict[str, Any]) -> list[str]:
    """Extend ``config`` (in place) with what the cluster's classes need; what was added, in words."""
    added = []
    enabled = integration_frameworks(config, _fail)
    missing = sorted(f for f in frameworks_needed(cluster) if f not in enabled)
    if missing:
        integrations = config.get("integrations") or {}
        integrations["frameworks"] = [*enabled, *missing]
        config["integrations"] = integrations
        added.append(f"integrations.frameworks {', '.join(missing)}")
    mappings = device_class_mappings(config, _fail)
    mapped = {device_class for names in mappings.values() for device_class in names}
    for name, device_class, _slug in lacking_device_class_mappings(cluster, mappings):
        if device_class in mapped:  # Kueue counts a DeviceClass under one resource name: the check reports it
            continue
        resources = config.get("resources") or {}
        entries = resources.get("deviceClassMappings") or []
        entry = next((e for e in entries if e.get("name") == name), None)
        if entry is None:
            entries.append({"name": name, "deviceClassNames": [device_class]})
        else:
            entry["deviceClassNames"] = [*(entry.get("deviceClassNames") or []), device_class]
        resources["deviceClassMappings"] = entries
        config["resources"] = resources
        mapped.add(device_class)
        added.append(f"resources.deviceClassMappings {{name: {name}, deviceClassNames: [{device_class}]}}")
    return added


def _restart(api: KubeApi, namespace: str, now: datetime) -> str:
    """Restart Kueue's controller as ``kubectl rollout restart`` does; what went wrong ("" when nothing)."""
    name = str(kube_setting("KUEUE_CONTROLLER_DEPLOYMENT"))
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: stamp}}}}}
    try:
        api.patch(DEPLOYMENTS, name=name, namespace=namespace, body=body)
    except KubeUnavailable:
        raise
    except KubeError as exc:
        return (
            f"Kueue's configuration was completed but restarting Deployment {namespace}/{name} failed "
            f"({exc.message}): Kueue reads its configuration at start, so restart it "
            f"(kubectl -n {namespace} rollout restart deployment {name}; KUEUE_CONTROLLER_DEPLOYMENT names it)."
        )
    return ""


def kueue_config_complete(*, cluster: Cluster, api: KubeApi, now: datetime) -> KueueConfigWrite:
    """Add the integrations and DeviceClass mappings the cluster's classes need to Kueue's ConfigMap and restart
    Kueue's controller when something was added. Raises KubeUnavailable when the cluster cannot be reached."""
    namespace, name = kueue_config_map()
    where = f"ConfigMap {namespace}/{name}"
    for _attempt in range(ATTEMPTS):
        try:
            raw = api.get(CONFIG_MAPS, name=name, namespace=namespace)
        except KubeUnavailable:
            raise
        except KubeError:  # absent or not readable: the check reads it again and says so
            return KueueConfigWrite()
        try:
            config = dict(config_map_configuration(raw, _fail))
            added = _completed(cluster, config)
        except _Unreadable:
            return KueueConfigWrite()
        if not added:
            return KueueConfigWrite()
        text = yaml.safe_dump(config, sort_keys=False, default_flow_style=False, allow_unicode=True)
        version = str((raw.get("metadata") or {}).get("resourceVersion") or "")
        body = {"metadata": {"resourceVersion": version}, "data": {CONFIG_MAP_KEY: text}}
        try:
            api.patch(CONFIG_MAPS, name=name, namespace=namespace, body=body)
        except KubeConflict:
            continue  # changed since it was read: read it again
        except KubeUnavailable:
            raise
        except KubeError as exc:
            return KueueConfigWrite(
                problem=f"Adding to {where} failed ({exc.message}): is the Role gpu-portal-kueue-config-write of "
                "deploy/kueue-config-write applied?"
            )
        log.info("cluster %s: added to Kueue's %s: %s", cluster.name, where, "; ".join(added))
        return KueueConfigWrite(added="; ".join(added), problem=_restart(api, namespace, now))
    return KueueConfigWrite(problem=f"{where} changed under every one of {ATTEMPTS} writes: the next push tries again.")


def kueue_config_push(*, cluster: Cluster, api: KubeApi, now: datetime) -> KueueConfigCheck:
    """The push's part of Kueue's configuration: complete it when ``KUEUE_CONFIG_WRITE`` is on, then check it and
    record the outcome on the cluster row. Raises KubeUnavailable (recording nothing) when unreachable."""
    if not kube_setting("KUEUE_CONFIG_WRITE"):
        return kueue_config_check(cluster=cluster, api=api, now=now)
    written = kueue_config_complete(cluster=cluster, api=api, now=now)
    outcome = kueue_config_check(cluster=cluster, api=api, now=now)
    if not written.problem:
        return KueueConfigCheck(outcome.state, outcome.problem, added=written.added)
    state = State.MISMATCH if outcome.state == State.MATCHES else outcome.state
    problem = " ".join(p for p in (outcome.problem, written.problem) if p)
    cluster.kueue_config_state, cluster.kueue_config_problem = state, problem
    cluster.save(update_fields=["kueue_config_state", "kueue_config_problem"])
    return KueueConfigCheck(state, problem, added=written.added)
