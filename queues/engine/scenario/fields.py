"""Parsers of the fields scenario kinds share: taints, tolerations, selectors, affinity, quotas, pod requests."""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any, Literal, cast

from queues.engine.model import (
    DEGRADED_DEVICES_LABEL,
    FlavorQuotas,
    LabelSelector,
    LabelSelectorRequirement,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    ResourceGroup,
    ResourceQuota,
    Taint,
    TaintEffect,
    Toleration,
)

from .manifest import Manifest


def degraded_devices(obj: Manifest) -> int:
    """The node's degraded-device count from the portal's label (absent: none)."""
    raw = obj.labels().get(DEGRADED_DEVICES_LABEL)
    if raw is None:
        return 0
    if not raw.isdigit():
        raise obj.fail(f"metadata.labels.{DEGRADED_DEVICES_LABEL}", f"must be a count of devices, got {raw!r}")
    return int(raw)


def parse_taints(obj: Manifest, path: str, value: Any) -> tuple[Taint, ...]:
    """A list of taints (key required, a valid effect)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise obj.fail(path, "must be a list")
    out = []
    for i, t in enumerate(value):
        if not isinstance(t, Mapping) or not t.get("key"):
            raise obj.fail(f"{path}[{i}].key", "required field is missing")
        effect = t.get("effect") or ""
        if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise obj.fail(f"{path}[{i}].effect", f"invalid taint effect {effect!r}")
        out.append(Taint(key=str(t["key"]), value=str(t.get("value") or ""), effect=cast(TaintEffect, effect)))
    return tuple(out)


def parse_tolerations(obj: Manifest, path: str, value: Any) -> tuple[Toleration, ...]:
    """A list of tolerations (operator Equal or Exists)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise obj.fail(path, "must be a list")
    out = []
    for i, t in enumerate(value):
        if not isinstance(t, Mapping):
            raise obj.fail(f"{path}[{i}]", "expected an object")
        op = t.get("operator") or "Equal"
        if op not in ("Equal", "Exists"):
            raise obj.fail(f"{path}[{i}].operator", f"invalid operator {op!r}")
        out.append(
            Toleration(
                key=str(t.get("key") or ""),
                operator=cast(Literal["Equal", "Exists"], op),
                value=str(t.get("value") or ""),
                effect=str(t.get("effect") or ""),
            )
        )
    return tuple(out)


def parse_label_selector(obj: Manifest, path: str, value: Any) -> LabelSelector | None:
    """A Kubernetes label selector (None when absent)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise obj.fail(path, "must be a label selector")
    labels = value.get("matchLabels") or {}
    exprs = []
    for i, e in enumerate(value.get("matchExpressions") or []):
        op = e.get("operator") if isinstance(e, Mapping) else None
        if op not in ("In", "NotIn", "Exists", "DoesNotExist") or not e.get("key"):
            raise obj.fail(
                f"{path}.matchExpressions[{i}]", "needs a key and operator In, NotIn, Exists or DoesNotExist"
            )
        exprs.append(LabelSelectorRequirement(str(e["key"]), op, tuple(str(v) for v in e.get("values") or ())))
    return LabelSelector({str(k): str(v) for k, v in labels.items()}, tuple(exprs))


def parse_resource_groups(obj: Manifest, path: str, value: Any, flavors: Container[str]) -> tuple[ResourceGroup, ...]:
    """``spec.resourceGroups`` of a ClusterQueue or Cohort; every flavor must exist (in the scenario, at some time)
    and appear only once."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise obj.fail(path, "must be a list")
    groups = []
    seen_flavors: set[str] = set()
    for gi, g in enumerate(value):
        gpath = f"{path}[{gi}]"
        if not isinstance(g, Mapping):
            raise obj.fail(gpath, "expected an object")
        covered = g.get("coveredResources")
        if not isinstance(covered, list) or not covered:
            raise obj.fail(f"{gpath}.coveredResources", "required field is missing")
        covered_t = tuple(str(r) for r in covered)
        flist = g.get("flavors")
        if not isinstance(flist, list) or not flist:
            raise obj.fail(f"{gpath}.flavors", "required field is missing")
        fqs = []
        for fi, f in enumerate(flist):
            fpath = f"{gpath}.flavors[{fi}]"
            if not isinstance(f, Mapping) or not f.get("name"):
                raise obj.fail(f"{fpath}.name", "required field is missing")
            fname = str(f["name"])
            if fname not in flavors:
                raise obj.fail(f"{fpath}.name", f"ResourceFlavor {fname!r} not found")
            if fname in seen_flavors:
                raise obj.fail(f"{fpath}.name", f"flavor {fname!r} appears in more than one place")
            seen_flavors.add(fname)
            fqs.append(FlavorQuotas(fname, _flavor_quotas(obj, fpath, f, covered_t)))
        groups.append(ResourceGroup(covered_t, tuple(fqs)))
    return tuple(groups)


def _flavor_quotas(
    obj: Manifest, fpath: str, flavor: Mapping[str, Any], covered: tuple[str, ...]
) -> tuple[ResourceQuota, ...]:
    """One flavor's quotas in a resource group: one per covered resource, no other."""
    quotas = []
    names = []
    for ri, r in enumerate(flavor.get("resources") or []):
        rpath = f"{fpath}.resources[{ri}]"
        if not isinstance(r, Mapping) or not r.get("name"):
            raise obj.fail(f"{rpath}.name", "required field is missing")
        rname = str(r["name"])
        if rname not in covered:
            raise obj.fail(f"{rpath}.name", f"resource {rname!r} is not in coveredResources")
        if "nominalQuota" not in r:
            raise obj.fail(f"{rpath}.nominalQuota", "required field is missing")
        nominal = obj.quantity(f"{rpath}.nominalQuota", r["nominalQuota"], rname)
        bl = r.get("borrowingLimit")
        ll = r.get("lendingLimit")
        quotas.append(
            ResourceQuota(
                name=rname,
                nominal=nominal,
                borrowing_limit=None if bl is None else obj.quantity(f"{rpath}.borrowingLimit", bl, rname),
                lending_limit=None if ll is None else obj.quantity(f"{rpath}.lendingLimit", ll, rname),
            )
        )
        names.append(rname)
    missing = [r for r in covered if r not in names]
    if missing:
        raise obj.fail(f"{fpath}.resources", f"missing quota for covered resource(s) {', '.join(missing)}")
    return tuple(quotas)


def parse_node_affinity(obj: Manifest, path: str, spec: Mapping[str, Any]) -> tuple[NodeSelectorTerm, ...]:
    """The pod spec's required node affinity terms."""
    affinity = spec.get("affinity") or {}
    required = ((affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")) or {}
    terms = []
    for ti, term in enumerate(required.get("nodeSelectorTerms") or []):
        exprs = []
        for ei, e in enumerate((term or {}).get("matchExpressions") or []):
            op = e.get("operator")
            if op not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt") or not e.get("key"):
                raise obj.fail(
                    f"{path}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
                    f"nodeSelectorTerms[{ti}].matchExpressions[{ei}]",
                    "needs a key and a valid operator",
                )
            exprs.append(NodeSelectorRequirement(str(e["key"]), op, tuple(str(v) for v in e.get("values") or ())))
        terms.append(NodeSelectorTerm(tuple(exprs)))
    return tuple(terms)


def pod_requests(obj: Manifest, path: str, spec: Mapping[str, Any]) -> dict[str, int]:
    """A pod's requests: containers summed, init containers as a floor (limits stand in for missing requests)."""

    def container_requests(cpath: str, containers: Any) -> list[dict[str, int]]:
        out: list[dict[str, int]] = []
        if containers is None:
            return out
        if not isinstance(containers, list):
            raise obj.fail(cpath, "must be a list")
        for ci, c in enumerate(containers):
            resources = (c or {}).get("resources") or {}
            requests = dict(resources.get("requests") or {})
            for rname, val in (resources.get("limits") or {}).items():
                requests.setdefault(rname, val)
            parsed = {}
            for rname, val in requests.items():
                section = "requests" if rname in (resources.get("requests") or {}) else "limits"
                parsed[str(rname)] = obj.quantity(f"{cpath}[{ci}].resources.{section}.{rname}", val, str(rname))
            out.append(parsed)
        return out

    main = container_requests(f"{path}.containers", spec.get("containers"))
    if not main:
        raise obj.fail(f"{path}.containers", "required field is missing")
    total: dict[str, int] = {}
    for req in main:
        for r, v in req.items():
            total[r] = total.get(r, 0) + v
    for req in container_requests(f"{path}.initContainers", spec.get("initContainers")):
        for r, v in req.items():
            total[r] = max(total.get(r, 0), v)
    return total
