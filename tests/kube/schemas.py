"""Validation of objects against the real schemas: Kueue's CRDs (openAPIV3Schema) and kubernetes-validate.

CRD schemas are used as Kubernetes uses them, translated where JSON Schema and Python differ:

* Go regular expressions: a ``(?i)`` flag in the middle of a pattern (``^(?i)[a-z]…``) is a global flag for Go's
  RE2 but an error for Python's ``re`` (flags must lead the pattern), so it is moved to the front.
* ``x-kubernetes-int-or-string`` without an explicit ``anyOf`` becomes ``anyOf: [integer, string]``.
* Unknown fields are rejected (``additionalProperties: false`` where a schema lists ``properties`` and says
  nothing else): the API server's strict field validation, which catches ``cohort`` sent for ``cohortName``.
* ``x-kubernetes-list-type: map`` (unique map keys) and ``set`` (unique items) are honoured.
* ``x-kubernetes-validations`` (CEL) are honoured for the rules in :data:`CEL_RULES` (translated to Python
  by hand); other rules are skipped. Transition rules (``oldSelf``) are checked by the emulator on updates.
* ``format`` (int32, date-time) is not asserted.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from functools import cache
from typing import Any

import jsonschema
import yaml
from referencing import Registry, Resource

from tests.fixtures import REFERENCE, WORKLOAD_CRDS

#: Kueue's CRDs, copied from the reference material (tests/fixtures/reference/SOURCE.md).
CRD_DIR = REFERENCE / "kueue" / "crds"
K8S_VERSION = "1.34.0"
#: Where kubernetes-validate's definitions live: an abridged CRD's ``x-portal-abridged`` markers point into it.
K8S_DEFINITIONS = "https://kubernetes.io/api/_definitions.json"


def _has(obj: Any, key: str) -> bool:
    return isinstance(obj, dict) and key in obj and obj[key] is not None


#: CEL rules of the v1beta2 CRDs, as Python predicates over ``self``.
CEL_RULES: dict[str, Callable[[Any], bool]] = {
    # ClusterQueue spec: no borrowingLimit without a cohort
    "!has(self.cohortName) && has(self.resourceGroups) ? self.resourceGroups.all(rg, rg.flavors.all(f, "
    "f.resources.all(r, !has(r.borrowingLimit)))) : true": lambda s: (
        _has(s, "cohortName")
        or not _has(s, "resourceGroups")
        or all(
            not _has(r, "borrowingLimit") for rg in s["resourceGroups"] for f in rg["flavors"] for r in f["resources"]
        )
    ),
    "!has(self.preference) || (self.whenCanBorrow == 'TryNextFlavor' && self.whenCanPreempt == 'TryNextFlavor')": (
        lambda s: (
            not _has(s, "preference")
            or (s.get("whenCanBorrow") == "TryNextFlavor" and s.get("whenCanPreempt") == "TryNextFlavor")
        )
    ),
    "!(self.reclaimWithinCohort == 'Never' && has(self.borrowWithinCohort) &&  "
    "self.borrowWithinCohort.policy != 'Never')": lambda s: (
        not (
            s.get("reclaimWithinCohort", "Never") == "Never"
            and _has(s, "borrowWithinCohort")
            and s["borrowWithinCohort"].get("policy", "Never") != "Never"
        )
    ),
    "self.flavors.all(x, size(x.resources) == size(self.coveredResources))": lambda s: all(
        len(f["resources"]) == len(s["coveredResources"]) for f in s["flavors"]
    ),
    "!has(self.topologyName) || self.nodeLabels.size() >= 1": lambda s: (
        not _has(s, "topologyName") or len(s.get("nodeLabels") or {}) >= 1
    ),
    "self.all(x, x.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])": lambda s: all(
        x.get("effect") in ("NoSchedule", "PreferNoSchedule", "NoExecute") for x in s
    ),
    "self.all(x, !has(x.key) ? x.operator == 'Exists' : true)": lambda s: all(
        _has(x, "key") or x.get("operator") == "Exists" for x in s
    ),
    "self.all(x, has(x.tolerationSeconds) ? x.effect == 'NoExecute' : true)": lambda s: all(
        not _has(x, "tolerationSeconds") or x.get("effect") == "NoExecute" for x in s
    ),
    "self.all(x, !has(x.operator) || x.operator in ['Equal', 'Exists'])": lambda s: all(
        not _has(x, "operator") or x["operator"] in ("Equal", "Exists") for x in s
    ),
    "self.all(x, has(x.operator) && x.operator == 'Exists' ? !has(x.value) : true)": lambda s: all(
        not (x.get("operator") == "Exists" and _has(x, "value")) for x in s
    ),
    "self.all(x, !has(x.effect) || x.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])": lambda s: all(
        not _has(x, "effect") or x["effect"] in ("NoSchedule", "PreferNoSchedule", "NoExecute") for x in s
    ),
    "size(self.filter(i, size(self.filter(j, j == i)) > 1)) == 0": lambda s: all(
        sum(1 for j in s if j == i) == 1 for i in s
    ),
    "size(self.filter(i, i.nodeLabel == 'kubernetes.io/hostname')) == 0 || self[size(self) - 1].nodeLabel == "
    "'kubernetes.io/hostname'": lambda s: (
        not any(i.get("nodeLabel") == "kubernetes.io/hostname" for i in s)
        or s[-1].get("nodeLabel") == "kubernetes.io/hostname"
    ),
    # JobSet spec
    "!(has(self.startupPolicy) && self.startupPolicy.startupPolicyOrder == 'InOrder' && "
    "self.replicatedJobs.exists(x, has(x.dependsOn)))": lambda s: (
        not (
            _has(s, "startupPolicy")
            and s["startupPolicy"].get("startupPolicyOrder") == "InOrder"
            and any(_has(x, "dependsOn") for x in s.get("replicatedJobs") or [])
        )
    ),
}

#: Transition rules (need the stored object): path of the field → predicate(new, old).
TRANSITION_RULES: dict[str, dict[tuple[str, ...], Callable[[Any, Any], bool]]] = {
    "LocalQueue": {("spec", "clusterQueue"): lambda new, old: new == old},
    "ResourceFlavor": {("spec", "topologyName"): lambda new, old: old is None or new == old},
}


def _go_pattern(pattern: str) -> str:
    """A Go (RE2) pattern as a Python one."""
    if "(?i)" in pattern and not pattern.startswith("(?i)"):
        pattern = "(?i)" + pattern.replace("(?i)", "")
    return pattern


def _translate(schema: Any) -> Any:
    """A CRD schema node as JSON Schema (see the module docstring); CEL rules kept under ``x-cel``."""
    if isinstance(schema, list):
        return [_translate(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key in ("properties", "patternProperties"):
            out[key] = {k: _translate(v) for k, v in value.items()}
        elif key == "pattern":
            out[key] = _go_pattern(value)
        elif key == "x-kubernetes-validations":
            out["x-cel"] = [rule["rule"] for rule in value]
        elif key.startswith("x-kubernetes-") or key == "description":
            if key in ("x-kubernetes-list-type", "x-kubernetes-list-map-keys"):
                out[key] = value
        else:
            out[key] = _translate(value)
    if schema.get("x-kubernetes-int-or-string") and "anyOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@cache
def crd_schemas() -> dict[str, dict]:
    """Kind → translated v1beta2 schema, for every CRD in the reference."""
    out = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1beta2")
        out[crd["spec"]["names"]["kind"]] = _translate(version["schema"]["openAPIV3Schema"])
    assert out, f"no CRD in {CRD_DIR}"
    return out


@cache
def _crd_validator(kind: str) -> jsonschema.Draft7Validator:
    schema = copy.deepcopy(crd_schemas()[kind])
    schema["properties"]["metadata"] = {"type": "object"}
    return jsonschema.Draft7Validator(schema)


def _walk(schema: dict, value: Any, path: str, errors: list[str]) -> None:
    """The checks JSON Schema cannot express: list types and CEL rules."""
    if value is None:
        return
    for rule in schema.get("x-cel", []):
        check = CEL_RULES.get(rule)
        if check is not None:
            try:
                ok = check(value)
            except (KeyError, TypeError, IndexError, AttributeError):
                ok = False
            if not ok:
                errors.append(f"{path or '<root>'}: CEL rule failed: {rule}")
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key in value:
                _walk(sub, value[key], f"{path}.{key}", errors)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key, sub_value in value.items():
                _walk(extra, sub_value, f"{path}.{key}", errors)
    elif isinstance(value, list):
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "map":
            keys = schema.get("x-kubernetes-list-map-keys") or []
            seen = [tuple(item.get(k) for k in keys) for item in value if isinstance(item, dict)]
            if len(seen) != len(set(seen)):
                errors.append(f"{path}: duplicate entries for list-map keys {keys}")
        elif list_type == "set":
            dumped = [json.dumps(v, sort_keys=True) for v in value]
            if len(dumped) != len(set(dumped)):
                errors.append(f"{path}: duplicate entries in a set")
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                _walk(items, item, f"{path}[{i}]", errors)


NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def validate_kueue(obj: dict) -> list[str]:
    """Problems of a kueue.x-k8s.io/v1beta2 object against its CRD (empty when valid)."""
    kind = obj.get("kind", "")
    if obj.get("apiVersion") != "kueue.x-k8s.io/v1beta2":
        return [f"{kind}: apiVersion must be kueue.x-k8s.io/v1beta2, got {obj.get('apiVersion')!r}"]
    if kind not in crd_schemas():
        return [f"unknown Kueue kind {kind!r}"]
    errors = [
        f"{kind} {(obj.get('metadata') or {}).get('name')}: {'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in _crd_validator(kind).iter_errors(obj)
    ]
    name = (obj.get("metadata") or {}).get("name", "")
    if not NAME.match(name or "") or len(name) > 253:
        errors.append(f"{kind}: metadata.name {name!r} is not a DNS subdomain")
    _walk(crd_schemas()[kind], obj, "", errors)
    return errors


@cache
def _core_validator(kind: str, api_version: str) -> jsonschema.protocols.Validator:
    """kubernetes-validate's strict schema for a core kind, loaded once."""
    import kubernetes_validate.utils as kv

    version = [v for v in kv.all_versions() if kv.major_minor(v) <= kv.major_minor(K8S_VERSION)][-1]
    schema_dir = f"v{version}-local-strict"
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = kv.schema_contents(f"kubernetes-json-schema/{schema_dir}/{kind.lower()}-{api}.json", K8S_VERSION)
    defs = kv.schema_contents(f"kubernetes-json-schema/{schema_dir}/_definitions.json", K8S_VERSION)
    registry = Resource.from_contents(defs) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def validate_core(obj: dict) -> list[str]:
    """Problems of a core object (Namespace, batch/v1 Job, …) against kubernetes-validate's strict schema."""
    validator = _core_validator(obj["kind"], obj["apiVersion"])
    name = (obj.get("metadata") or {}).get("name")
    return [
        f"{obj['kind']} {name}: {'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)
    ]


def _rejoin(schema: Any) -> Any:
    """A translated CRD schema with each ``x-portal-abridged`` marker replaced by a ``$ref`` to that core definition
    (tests/fixtures/workload_crds/SOURCE.md)."""
    if isinstance(schema, list):
        return [_rejoin(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if "x-portal-abridged" in schema:
        return {"$ref": f"{K8S_DEFINITIONS}#/$defs/{schema['x-portal-abridged']}"}
    return {k: _rejoin(v) for k, v in schema.items()}


@cache
def workload_crd_schemas() -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) → the served version's schema, abridged parts re-joined, for every workload CRD."""
    out = {}
    for path in sorted(WORKLOAD_CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = _rejoin(_translate(version["schema"]["openAPIV3Schema"]))
            schema["properties"]["metadata"] = {
                "$ref": f"{K8S_DEFINITIONS}#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
            }
            out[(f"{group}/{version['name']}", kind)] = schema
    assert out, f"no CRD in {WORKLOAD_CRDS}"
    return out


@cache
def _k8s_registry() -> Registry:
    """kubernetes-validate's definitions (strict, Kubernetes 1.34) as a referencing registry."""
    import kubernetes_validate.utils as kv

    version = [v for v in kv.all_versions() if kv.major_minor(v) <= kv.major_minor(K8S_VERSION)][-1]
    defs = kv.schema_contents(f"kubernetes-json-schema/v{version}-local-strict/_definitions.json", K8S_VERSION)
    return Resource.from_contents(defs) @ Registry()


@cache
def _workload_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    return jsonschema.validators.Draft202012Validator(
        workload_crd_schemas()[(api_version, kind)], registry=_k8s_registry()
    )


def validate_workload_crd(obj: dict) -> list[str]:
    """Problems of a JobSet / PyTorchJob / RayJob / LeaderWorkerSet against its (abridged, re-joined) CRD."""
    key = (obj.get("apiVersion", ""), obj.get("kind", ""))
    if key not in workload_crd_schemas():
        return [f"no CRD serves {key[1]} {key[0]}"]
    name = (obj.get("metadata") or {}).get("name")
    errors = [
        f"{key[1]} {name}: {'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in _workload_validator(*key).iter_errors(obj)
    ]
    if not NAME.match(name or "") or len(name or "") > 253:
        errors.append(f"{key[1]}: metadata.name {name!r} is not a DNS subdomain")
    _walk(workload_crd_schemas()[key], obj, "", errors)
    return errors


def validate(obj: dict) -> list[str]:
    """Problems of any object the portal sends."""
    if str(obj.get("apiVersion", "")).startswith("kueue.x-k8s.io/"):
        return validate_kueue(obj)
    if (obj.get("apiVersion", ""), obj.get("kind", "")) in workload_crd_schemas():
        return validate_workload_crd(obj)
    return validate_core(obj)


def crd_json_schema(crd: dict, version: str) -> dict:
    """One version's openAPIV3Schema of any CRD as a strict JSON Schema (translated as for Kueue's, above)."""
    served = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    schema = _translate(served["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"type": "object"}
    return schema
