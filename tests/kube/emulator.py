"""A Kubernetes API emulator over real HTTP, for the kubernetes backend's tests and benchmark.

It serves what the portal uses, the way the API server does:

* discovery (``/version``, ``/api``, ``/apis``, ``/apis/<group>[/<version>]``) for the registered resources;
* list with ``limit`` / ``continue`` (continue tokens expire with the history: 410 ``Expired``), label selectors
  (``k``, ``!k``, ``k=v``, ``k!=v``, ``k in (a,b)``) and field selectors (``metadata.name``,
  ``metadata.namespace``, ``spec.nodeName``, ``involvedObject.kind``/``name``);
* watch as a chunked stream of JSON lines after a resourceVersion, with BOOKMARK events (``allowWatchBookmarks``)
  when the API server's watch cache sends them — 2 s before the watch's ``timeoutSeconds`` or after a minute,
  whichever is first, on its 1-second timer, then every minute — or every ``bookmark_interval`` seconds when a test
  asks for them sooner, and an ``ERROR`` event with a 410 Status when the version is older than the retained
  history (:meth:`Emulator.compact` forgets history, as etcd compaction does);
* create (409 ``AlreadyExists``), get, JSON merge patch, server-side apply (``application/apply-patch+yaml``)
  with field managers, ownership, conflicts (409 with ``FieldManagerConflict`` causes), ``force``, and removal of
  fields a manager stops applying; ``metadata.managedFields`` is rendered;
* delete with ``propagationPolicy`` and ``preconditions.uid``; Background and Foreground delete the object's
  dependents (by owner reference, any kind, transitively: a Job's Pods, a JobSet's Jobs and theirs, a Workload);
  ``Orphan`` leaves them (finalizers turn a delete into a ``deletionTimestamp``).
* the workload kinds' custom resources (JobSet, PyTorchJob, RayJob, LeaderWorkerSet) and Deployments, served
  like any other resource and validated against their CRDs (tests/fixtures/workload_crds).
* a pod's log (``GET .../pods/<name>/log`` with ``container``, ``tailLines`` and ``timestamps``): the lines a test
  gave with :meth:`Emulator.set_pod_log`; 400 for a container that is not the pod's or has not started, 404 for no
  pod, as the API server answers.

Plain HTTP by default; with an ``ssl_context`` it serves HTTPS (the in-cluster connection's test). Each recorded
request keeps its ``Authorization`` header.

Every object a client sends is validated (Kueue CRDs, kubernetes-validate for core kinds) and rejected with 422
when invalid; ``emulator.rejected`` keeps the reasons so a test can assert that nothing was rejected.

Faults: :meth:`Emulator.fail` answers matching requests with an error status (500, 429, 403 Forbidden …, with the
API server's reason and an optional message) or after a delay (client timeouts), or drops a watch after N events;
a fault applies ``times`` times.

The cluster side (Kueue's controllers, the kubelet) is played by the tests through :meth:`Emulator.put`,
:meth:`Emulator.edit`, :meth:`Emulator.remove` — writes that bump resourceVersions and feed watches like any
other. A small control API (``/_emu/...``) lets another process (the benchmark) do the same over HTTP.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import copy
import json
import re
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from clusters.kube_sync.api import ALL_RESOURCES, Resource

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def now_iso() -> str:
    """RFC 3339 time, as the API server writes it."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status(code: int, reason: str, message: str, *, details: Obj | None = None) -> Obj:
    """A metav1.Status."""
    out = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        out["details"] = details
    return out


#: The Status reason the API server gives with each status an injected fault may answer (others: InternalError).
FAULT_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class HTTPStatusError(Exception):
    """Answer the request with this Status."""

    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None) -> None:
        super().__init__(message)
        self.body = status(code, reason, message, details=details)
        self.code = code


# --- field paths for server-side apply -------------------------------------------------------------------------

IDENTITY = {("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace")}


def leaves(obj: Any, prefix: tuple = ()) -> dict[tuple, Any]:
    """Leaf field paths of an object (lists are atomic values)."""
    out: dict[tuple, Any] = {}
    if isinstance(obj, dict) and obj:
        for key, value in obj.items():
            out.update(leaves(value, (*prefix, key)))
    else:
        out[prefix] = obj
    return out


def get_path(obj: Any, path: tuple) -> Any:
    """The value at a path, or a sentinel when absent."""
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return _MISSING
        obj = obj[key]
    return obj


def set_path(obj: Obj, path: tuple, value: Any) -> None:
    """Set a value, creating dicts on the way."""
    for key in path[:-1]:
        obj = obj.setdefault(key, {})
    obj[path[-1]] = copy.deepcopy(value)


def del_path(obj: Obj, path: tuple) -> None:
    """Remove a field and the dicts it leaves empty."""
    stack = []
    for key in path[:-1]:
        if not isinstance(obj, dict) or key not in obj:
            return
        stack.append((obj, key))
        obj = obj[key]
    if isinstance(obj, dict):
        obj.pop(path[-1], None)
    for parent, key in reversed(stack):
        if parent[key] == {}:
            del parent[key]
        else:
            break


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()


def fields_v1(paths: Iterable[tuple]) -> Obj:
    """managedFields ``fieldsV1`` of a set of paths."""
    root: Obj = {}
    for path in sorted(paths):
        node = root
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return root


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


# --- selectors ------------------------------------------------------------------------------------------------

_SET_RE = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_selector(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return parts


def label_matcher(selector: str) -> Callable[[Obj], bool]:
    """A predicate for a label selector string."""
    tests: list[Callable[[dict], bool]] = []
    for raw in _split_selector(selector or ""):
        term = raw.strip()
        if not term:
            continue
        m = _SET_RE.match(term)
        if m:
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            if op == "in":
                tests.append(lambda lab, k=key, vs=values: lab.get(k) in vs)
            else:
                tests.append(lambda lab, k=key, vs=values: lab.get(k) not in vs)
        elif "!=" in term:
            key, value = (part.strip() for part in term.split("!=", 1))
            tests.append(lambda lab, k=key, v=value: lab.get(k) != v)
        elif "=" in term:
            key, value = (part.strip("= ") for part in term.split("=", 1))
            tests.append(lambda lab, k=key, v=value: lab.get(k) == v)
        elif term.startswith("!"):
            absent = term[1:].strip()
            tests.append(lambda lab, k=absent: k not in lab)
        else:
            tests.append(lambda lab, k=term: k in lab)
    return lambda obj: all(t((obj.get("metadata") or {}).get("labels") or {}) for t in tests)


def field_matcher(selector: str) -> Callable[[Obj], bool]:
    """A predicate for a field selector (``a.b=v``, ``a.b!=v``, comma-joined)."""
    tests = []
    for term in (selector or "").split(","):
        term = term.strip()
        if not term:
            continue
        negate = "!=" in term
        path, value = term.split("!=" if negate else "=", 1)
        path = tuple(path.rstrip("=").strip().split("."))
        value = value.lstrip("=").strip()

        def test(obj: Obj, p=path, v=value, n=negate) -> bool:
            actual = get_path(obj, p)
            actual = "" if actual is _MISSING or actual is None else str(actual)
            return (actual != v) if n else (actual == v)

        tests.append(test)
    return lambda obj: all(t(obj) for t in tests)


# --- the store ------------------------------------------------------------------------------------------------


@dataclass
class Fault:
    """Answer matching requests with ``status`` (or after ``delay`` seconds, or drop watches after N events)."""

    method: str
    path: re.Pattern
    status: int = 0
    delay: float = 0.0
    drop_after: int | None = None
    times: int = 1
    retry_after: str | None = None
    message: str = "injected"
    hits: int = 0
    before: Callable[[], Any] | None = None  # run before the request is answered (another client's write)

    def matches(self, method: str, path: str, query: str) -> bool:
        """Whether this fault applies to a request."""
        return self.times > 0 and self.method in ("*", method) and bool(self.path.search(f"{path}?{query}"))


@dataclass
class Stored:
    """An object in the store, with its field managers."""

    obj: Obj
    managers: dict[str, set[tuple]] = field(default_factory=dict)
    operations: dict[str, str] = field(default_factory=dict)


class Emulator:
    """The in-memory API server (see the module docstring). Thread-safe; the HTTP side runs in its own thread."""

    def __init__(
        self,
        *,
        resources: Iterable[Resource] = ALL_RESOURCES,
        validator: Callable[[Obj], list[str]] | None = None,
        history_limit: int = 100_000,
        bookmark_interval: float | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.ssl_context = ssl_context
        self.resources: dict[tuple[str, str, str], Resource] = {}
        for r in resources:
            self.register(r)
        self.validator = validator
        self.history_limit = history_limit
        self.bookmark_interval = bookmark_interval
        self.lock = threading.RLock()
        self.rv = 1000
        self.objects: dict[str, dict[Key, Stored]] = {}
        self._sorted: dict[str, list[Key]] = {}
        self.history: dict[str, list[tuple[int, str, str]]] = {}  # key → [(rv, type, json)]
        self.floor: dict[str, int] = {}
        self.faults: list[Fault] = []
        self.requests: list[dict] = []
        self.rejected: list[str] = []
        self.deletes: list[dict] = []
        self.extra_group_versions: set[str] = set()
        self.pod_logs: dict[Key, list[tuple[str, str]]] = {}
        self.record_requests = True
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self._stopping = False

    # --- registry ----------------------------------------------------------------------------------------------

    def register(self, resource: Resource) -> None:
        """Serve a resource type."""
        self.resources[(resource.group, resource.version, resource.plural)] = resource

    def _res(self, key: str) -> Resource:
        for r in self.resources.values():
            if r.key == key or r.kind == key:
                return r
        raise KeyError(key)

    # --- state changes (cluster side and HTTP side) ------------------------------------------------------------

    def _bump(self) -> int:
        self.rv += 1
        return self.rv

    def _record(self, resource: Resource, kind: str, obj: Obj) -> None:
        history = self.history.setdefault(resource.key, [])
        history.append((int(obj["metadata"]["resourceVersion"]), kind, json.dumps({"type": kind, "object": obj})))
        if len(history) > self.history_limit:
            drop = len(history) - self.history_limit
            self.floor[resource.key] = history[drop - 1][0]
            del history[:drop]

    def _key_of(self, resource: Resource, obj: Obj) -> Key:
        meta = obj.get("metadata") or {}
        return (meta.get("namespace", "") if resource.namespaced else "", meta.get("name", ""))

    def _store(self, resource: Resource) -> dict[Key, Stored]:
        return self.objects.setdefault(resource.key, {})

    def _write(self, resource: Resource, stored: Stored, *, created: bool) -> Obj:
        obj = stored.obj
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self._bump())
        if stored.managers:
            meta["managedFields"] = [
                {
                    "manager": manager,
                    "operation": stored.operations.get(manager, "Update"),
                    "apiVersion": resource.api_version,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": fields_v1(paths),
                    "time": now_iso(),
                }
                for manager, paths in sorted(stored.managers.items())
                if paths
            ]
        key = self._key_of(resource, obj)
        store = self._store(resource)
        if created:
            store[key] = stored
            self._sorted.pop(resource.key, None)
        self._record(resource, "ADDED" if created else "MODIFIED", obj)
        return obj

    def _new(self, resource: Resource, obj: Obj) -> Stored:
        obj = copy.deepcopy(obj)
        obj["apiVersion"], obj["kind"] = resource.api_version, resource.kind
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now_iso())
        meta["generation"] = 1
        if not resource.namespaced:
            meta.pop("namespace", None)
        return Stored(obj)

    def put(self, obj: Obj, *, manager: str = "") -> Obj:
        """Create or replace an object as the cluster's own controllers would (no validation of ownership)."""
        resource = self._res(obj["kind"])
        with self.lock:
            key = self._key_of(resource, obj)
            stored = self._store(resource).get(key)
            if stored is None:
                stored = self._new(resource, obj)
                if manager:
                    stored.managers[manager] = set(leaves(stored.obj)) - IDENTITY
                return copy.deepcopy(self._write(resource, stored, created=True))
            old_meta = stored.obj["metadata"]
            new = copy.deepcopy(obj)
            new["apiVersion"], new["kind"] = resource.api_version, resource.kind
            meta = new.setdefault("metadata", {})
            for k in ("uid", "creationTimestamp", "generation"):
                meta.setdefault(k, old_meta.get(k))
            if new.get("spec") != stored.obj.get("spec"):
                meta["generation"] = int(old_meta.get("generation") or 1) + 1
            meta.pop("resourceVersion", None)
            meta.pop("managedFields", None)
            if self._same(stored.obj, new):
                return copy.deepcopy(stored.obj)
            stored.obj = new
            return copy.deepcopy(self._write(resource, stored, created=False))

    @staticmethod
    def _same(old: Obj, new: Obj) -> bool:
        a, b = copy.deepcopy(old), copy.deepcopy(new)
        for o in (a, b):
            o.get("metadata", {}).pop("resourceVersion", None)
            o.get("metadata", {}).pop("managedFields", None)
        return a == b

    def edit(self, kind: str, name: str, namespace: str = "", *, manager: str = "kubectl-edit", **changes: Any) -> Obj:
        """Change fields of a stored object as another client would (``edit(..., spec={"x": 1})`` merges)."""
        resource = self._res(kind)
        with self.lock:
            stored = self._store(resource)[(namespace if resource.namespaced else "", name)]
            before = leaves(stored.obj)
            obj = merge_patch(stored.obj, changes)
            changed = {p for p, v in leaves(obj).items() if before.get(p, _MISSING) != v} - IDENTITY
            for other in stored.managers.values():
                other -= changed
            stored.managers.setdefault(manager, set()).update(changed)
            stored.operations.setdefault(manager, "Update")
            if obj.get("spec") != stored.obj.get("spec"):
                obj["metadata"]["generation"] = int(obj["metadata"].get("generation") or 1) + 1
            if self._same(stored.obj, obj):
                return copy.deepcopy(stored.obj)
            stored.obj = obj
            return copy.deepcopy(self._write(resource, stored, created=False))

    def remove(self, kind: str, name: str, namespace: str = "") -> bool:
        """Delete an object at once (finalizers ignored); False when absent."""
        resource = self._res(kind)
        with self.lock:
            return self._remove(resource, (namespace if resource.namespaced else "", name))

    def _remove(self, resource: Resource, key: Key) -> bool:
        stored = self._store(resource).pop(key, None)
        if stored is None:
            return False
        self._sorted.pop(resource.key, None)
        stored.obj["metadata"]["resourceVersion"] = str(self._bump())
        self._record(resource, "DELETED", stored.obj)
        return True

    def get_obj(self, kind: str, name: str, namespace: str = "") -> Obj | None:
        """A copy of a stored object, or None."""
        resource = self._res(kind)
        with self.lock:
            stored = self._store(resource).get((namespace if resource.namespaced else "", name))
            return copy.deepcopy(stored.obj) if stored else None

    def all(self, kind: str) -> list[Obj]:
        """Copies of every stored object of a kind."""
        resource = self._res(kind)
        with self.lock:
            return [copy.deepcopy(s.obj) for s in self._store(resource).values()]

    def set_pod_log(self, namespace: str, name: str, lines: Iterable[tuple[str, str]]) -> None:
        """What the pod's container wrote: ``(RFC 3339 time, text)`` lines, oldest first (the kubelet's part)."""
        with self.lock:
            self.pod_logs[(namespace, name)] = list(lines)

    def pod_log(self, namespace: str, name: str, query: dict[str, str]) -> str:
        """The ``/log`` subresource of a pod, as the API server answers it."""
        with self.lock:
            stored = self._store(self._res("Pod")).get((namespace, name))
            if stored is None:
                raise HTTPStatusError(404, "NotFound", f'pods "{name}" not found')
            pod = stored.obj
            lines = list(self.pod_logs.get((namespace, name), []))
        containers = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
        container = query.get("container") or (containers[0] if len(containers) == 1 else "")
        if not container:
            raise HTTPStatusError(
                400, "BadRequest", f"a container name must be specified for pod {name}, choose one of: {containers}"
            )
        if container not in containers:
            raise HTTPStatusError(400, "BadRequest", f"container {container} is not valid for pod {name}")
        statuses = {c.get("name"): c for c in (pod.get("status") or {}).get("containerStatuses") or []}
        state = (statuses.get(container) or {}).get("state") or {}
        if "running" not in state and "terminated" not in state:
            waiting = (state.get("waiting") or {}).get("reason") or "ContainerCreating"
            raise HTTPStatusError(
                400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to start: {waiting}'
            )
        if "tailLines" in query:
            tail = int(query["tailLines"])
            lines = lines[-tail:] if tail > 0 else []
        stamped = query.get("timestamps", "").lower() in ("true", "1")  # Go's ParseBool: the client sends "True"
        return "".join(f"{t} {text}\n" if stamped else f"{text}\n" for t, text in lines)

    def compact(self) -> None:
        """Forget the event history (etcd compaction): older resourceVersions now answer 410 Gone."""
        with self.lock:
            self._bump()  # everything up to now is compacted away
            for key in list(self.history):
                self.history[key] = []
            for r in self.resources.values():
                self.floor[r.key] = self.rv

    def fail(
        self,
        method: str = "*",
        path: str = ".*",
        *,
        status: int = 0,
        delay: float = 0.0,
        drop_after: int | None = None,
        times: int = 1,
        retry_after: str | None = None,
        message: str = "injected",
        before: Callable[[], Any] | None = None,
    ) -> Fault:
        """Inject a fault for the next ``times`` matching requests (``message`` is the Status's, e.g. a 403's;
        ``before`` runs first, e.g. another client's write between a read and this request)."""
        fault = Fault(
            method.upper(), re.compile(path), status, delay, drop_after, times, retry_after, message, before=before
        )
        with self.lock:
            self.faults.append(fault)
        return fault

    def _fault(self, method: str, path: str, query: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.matches(method, path, query):
                    fault.times -= 1
                    fault.hits += 1
                    return fault
        return None

    # --- HTTP verbs --------------------------------------------------------------------------------------------

    def _validate(self, obj: Obj, what: str) -> None:
        name = (obj.get("metadata") or {}).get("name") or ""
        label = obj.get("kind") == "Namespace"
        if not (_DNS_LABEL if label else _DNS_SUBDOMAIN).match(name) or len(name) > (63 if label else 253):
            message = f'{obj.get("kind")} "{name}" is invalid: metadata.name: must be a lowercase RFC 1123 ' + (
                "label" if label else "subdomain"
            )
            self.rejected.append(f"{what}: {message}")
            raise HTTPStatusError(422, "Invalid", message)
        if self.validator is None:
            return
        errors = self.validator(obj)
        if errors:
            self.rejected.extend(f"{what}: {e}" for e in errors)
            raise HTTPStatusError(422, "Invalid", f"{what} is invalid: {'; '.join(errors)}")

    def _check_transition(self, resource: Resource, new: Obj, old: Obj) -> None:
        from tests.kube.schemas import TRANSITION_RULES

        for path, ok in TRANSITION_RULES.get(resource.kind, {}).items():
            a, b = get_path(new, path), get_path(old, path)
            if not ok(None if a is _MISSING else a, None if b is _MISSING else b):
                message = f"{'.'.join(path)}: field is immutable"
                self.rejected.append(f"{resource.kind} {old['metadata']['name']}: {message}")
                raise HTTPStatusError(422, "Invalid", message)

    def do_create(self, resource: Resource, namespace: str, body: Obj, manager: str) -> Obj:
        """POST."""
        body = copy.deepcopy(body)
        if resource.namespaced:
            body.setdefault("metadata", {}).setdefault("namespace", namespace)
        self._validate(body, f"create {resource.kind}")
        with self.lock:
            key = self._key_of(resource, body)
            if key in self._store(resource):
                raise HTTPStatusError(
                    409,
                    "AlreadyExists",
                    f'{resource.plural}.{resource.group or "core"} "{key[1]}" already exists',
                    {"name": key[1], "group": resource.group, "kind": resource.plural},
                )
            if resource.namespaced and namespace and not self._namespace_exists(namespace):
                raise HTTPStatusError(404, "NotFound", f'namespaces "{namespace}" not found')
            stored = self._new(resource, body)
            stored.managers[manager] = set(leaves(body)) - IDENTITY
            return copy.deepcopy(self._write(resource, stored, created=True))

    def _namespace_exists(self, namespace: str) -> bool:
        ns = self._res("Namespace")
        return ("", namespace) in self._store(ns) or not self._store(ns)

    def do_apply(self, resource: Resource, namespace: str, name: str, body: Obj, manager: str, force: bool) -> Obj:
        """Server-side apply."""
        body = copy.deepcopy(body)
        meta = body.setdefault("metadata", {})
        if meta.get("name") not in (None, name):
            raise HTTPStatusError(400, "BadRequest", "the name of the object does not match the name in the URL")
        meta["name"] = name
        if resource.namespaced:
            meta["namespace"] = namespace
        self._validate(body, f"apply {resource.kind}")
        applied = set(leaves(body)) - IDENTITY
        with self.lock:
            key = (namespace if resource.namespaced else "", name)
            stored = self._store(resource).get(key)
            if stored is None:
                if resource.namespaced and not self._namespace_exists(namespace):
                    raise HTTPStatusError(404, "NotFound", f'namespaces "{namespace}" not found')
                stored = self._new(resource, body)
                stored.managers[manager] = applied
                stored.operations[manager] = "Apply"
                return copy.deepcopy(self._write(resource, stored, created=True))
            current = stored.obj
            conflicts = []
            for path in sorted(applied):
                live = get_path(current, path)
                if live is _MISSING or live == get_path(body, path):
                    continue
                for other, paths in stored.managers.items():
                    if other != manager and path in paths:
                        conflicts.append((path, other))
            if conflicts and not force:
                causes = [
                    {
                        "reason": "FieldManagerConflict",
                        "message": f'conflict with "{other}" using {resource.api_version}',
                        "field": "." + ".".join(path),
                    }
                    for path, other in conflicts
                ]
                raise HTTPStatusError(
                    409,
                    "Conflict",
                    f"Apply failed with {len(conflicts)} conflict(s): "
                    + "; ".join(f"{c['message']}: {c['field']}" for c in causes),
                    {"causes": causes, "name": name, "kind": resource.plural},
                )
            new = copy.deepcopy(current)
            for path, other in conflicts:
                stored.managers[other].discard(path)
            previously = stored.managers.get(manager, set())
            for path in previously - applied:
                if not any(path in paths for m, paths in stored.managers.items() if m != manager):
                    del_path(new, path)
            for path in applied:
                set_path(new, path, get_path(body, path))
            # a field applied now that another manager owns with the same value becomes shared
            stored.managers[manager] = applied
            stored.operations[manager] = "Apply"
            self._check_transition(resource, new, current)
            if new.get("spec") != current.get("spec"):
                new["metadata"]["generation"] = int(current["metadata"].get("generation") or 1) + 1
            if self._same(current, new):
                return copy.deepcopy(current)
            stored.obj = new
            return copy.deepcopy(self._write(resource, stored, created=False))

    def do_patch(self, resource: Resource, namespace: str, name: str, body: Obj, manager: str) -> Obj:
        """JSON merge patch (strategic merge patches are treated the same)."""
        with self.lock:
            key = (namespace if resource.namespaced else "", name)
            stored = self._store(resource).get(key)
            if stored is None:
                raise HTTPStatusError(404, "NotFound", f'{resource.plural} "{name}" not found')
            expected = (body.get("metadata") or {}).get("resourceVersion")
            if expected and expected != stored.obj["metadata"]["resourceVersion"]:  # optimistic concurrency
                raise HTTPStatusError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {resource.plural} "{name}": the object has been modified; '
                    "please apply your changes to the latest version and try again",
                )
            new = merge_patch(stored.obj, body)
            self._validate(new, f"patch {resource.kind}")
            self._check_transition(resource, new, stored.obj)
            before = leaves(stored.obj)
            changed = {p for p, v in leaves(new).items() if before.get(p, _MISSING) != v} - IDENTITY
            for other in stored.managers.values():
                other -= changed
            stored.managers.setdefault(manager, set()).update(changed)
            if new.get("spec") != stored.obj.get("spec"):
                new["metadata"]["generation"] = int(stored.obj["metadata"].get("generation") or 1) + 1
            if self._same(stored.obj, new):
                return copy.deepcopy(stored.obj)
            stored.obj = new
            return copy.deepcopy(self._write(resource, stored, created=False))

    def do_delete(self, resource: Resource, namespace: str, name: str, options: Obj) -> Obj:
        """DELETE with propagation (a Job's Pods go with it) and a uid precondition."""
        with self.lock:
            key = (namespace if resource.namespaced else "", name)
            stored = self._store(resource).get(key)
            if stored is None:
                raise HTTPStatusError(404, "NotFound", f'{resource.plural} "{name}" not found')
            want_uid = (options.get("preconditions") or {}).get("uid")
            if want_uid and want_uid != stored.obj["metadata"].get("uid"):
                raise HTTPStatusError(
                    409,
                    "Conflict",
                    f"Precondition failed: UID in precondition: {want_uid}, UID in object meta: "
                    f"{stored.obj['metadata'].get('uid')}",
                )
            policy = options.get("propagationPolicy") or "Background"
            self.deletes.append({"kind": resource.kind, "namespace": namespace, "name": name, "policy": policy})
            if policy in ("Background", "Foreground"):
                self._delete_dependents(stored.obj["metadata"].get("uid"))
            last = copy.deepcopy(stored.obj)
            self._delete_one(resource, key)
            return last

    def _delete_dependents(self, uid: str) -> None:
        """The garbage collector's part: every object owned by ``uid`` goes, and what those own, of any kind."""
        for resource in list(self.resources.values()):
            for key, dependent in list(self._store(resource).items()):
                owners = dependent.obj["metadata"].get("ownerReferences") or []
                if any(o.get("uid") == uid for o in owners):
                    self._delete_dependents(dependent.obj["metadata"].get("uid"))
                    self._delete_one(resource, key)

    def _delete_one(self, resource: Resource, key: Key) -> None:
        stored = self._store(resource)[key]
        meta = stored.obj["metadata"]
        if meta.get("finalizers"):
            if not meta.get("deletionTimestamp"):
                meta["deletionTimestamp"] = now_iso()
                meta["deletionGracePeriodSeconds"] = 30
                self._write(resource, stored, created=False)
            return
        self._remove(resource, key)

    def do_list(self, resource: Resource, namespace: str, query: dict[str, str]) -> str:
        """A page of a list, serialised."""
        limit = int(query.get("limit") or 0)
        labels = label_matcher(query.get("labelSelector", ""))
        fields = field_matcher(query.get("fieldSelector", ""))
        token = query.get("continue", "")
        with self.lock:
            list_rv = self.rv
            after: list | None = None
            if token:
                try:
                    decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
                    list_rv, after = int(decoded["rv"]), decoded["after"]
                except (ValueError, KeyError, TypeError):
                    raise HTTPStatusError(400, "BadRequest", "invalid continue token") from None
                if list_rv < self.floor.get(resource.key, 0):
                    raise HTTPStatusError(
                        410,
                        "Expired",
                        "The provided continue parameter is too old to display a consistent list result. You can "
                        "start a new list without the continue parameter.",
                    )
            store = self._store(resource)
            keys = self._sorted.get(resource.key)
            if keys is None:
                keys = self._sorted[resource.key] = sorted(store)
            start = bisect.bisect_right(keys, tuple(after)) if after else 0
            items: list[Obj] = []
            last_key = None
            i = start
            while i < len(keys):
                key = keys[i]
                i += 1
                if resource.namespaced and namespace and key[0] != namespace:
                    continue
                obj = store[key].obj
                if not labels(obj) or not fields(obj):
                    continue
                items.append(obj)
                last_key = key
                if limit and len(items) >= limit:
                    break
            more = limit and len(items) >= limit and i < len(keys)
            meta: Obj = {"resourceVersion": str(list_rv)}
            if more:
                meta["continue"] = base64.urlsafe_b64encode(
                    json.dumps({"rv": list_rv, "after": list(last_key)}).encode()
                ).decode()
                meta["remainingItemCount"] = len(keys) - i
            return json.dumps(
                {"kind": f"{resource.kind}List", "apiVersion": resource.api_version, "metadata": meta, "items": items}
            )

    # --- HTTP server -------------------------------------------------------------------------------------------

    def start(self) -> str:
        """Serve on 127.0.0.1 in a background thread; returns the base URL."""
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            app = web.Application(client_max_size=64 * 1024**2)
            app.router.add_route("*", "/{tail:.*}", self._handle)
            self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
            loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", self.port or 0, ssl_context=self.ssl_context)
            loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="kube-emulator", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self.url

    @property
    def url(self) -> str:
        """Base URL of the server (https with an ``ssl_context``)."""
        return f"{'https' if self.ssl_context else 'http'}://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Stop serving (open watches end)."""
        self._stopping = True
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def kubeconfig(self, path: str, *, token: str = "emulator-token") -> str:
        """Write a kubeconfig pointing at this server (context ``emulator``); returns the path."""
        import yaml

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulator", "cluster": {"server": self.url}}],
            "users": [{"name": "portal", "user": {"token": token}}],
            "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "portal"}}],
            "current-context": "emulator",
        }
        with open(path, "w") as fh:
            yaml.safe_dump(config, fh)
        return path

    def _route(self, path: str) -> tuple[Resource | None, str, str, str]:
        """(resource, namespace, name, subresource) of a resource path; resource None for other paths."""
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None, "", "", ""
        namespace = ""
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        elif len(rest) == 2 and rest[0] == "namespaces" and group == "":
            return self.resources.get(("", "v1", "namespaces")), "", rest[1], ""
        if not rest:
            return None, "", "", ""
        resource = self.resources.get((group, version, rest[0]))
        if resource is None:
            raise HTTPStatusError(404, "NotFound", f"the server could not find the requested resource ({path})")
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        return resource, namespace, name, sub

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path, query = request.path, dict(request.query)
        fault = self._fault(request.method, path, request.query_string)
        if self.record_requests:
            self.requests.append(
                {
                    "method": request.method,
                    "path": path,
                    "query": query,
                    "authorization": request.headers.get("Authorization", ""),
                    "content_type": request.headers.get("Content-Type", ""),
                }
            )
        try:
            if fault is not None and fault.delay:
                await asyncio.sleep(fault.delay)
            if fault is not None and fault.before is not None:
                fault.before()
            if fault is not None and fault.status:
                headers = {"Retry-After": fault.retry_after} if fault.retry_after else None
                return web.json_response(
                    status(fault.status, FAULT_REASONS.get(fault.status, "InternalError"), fault.message),
                    status=fault.status,
                    headers=headers,
                )
            if path.startswith("/_emu/"):
                return await self._control(request)
            if request.method == "GET" and (path in ("/version", "/api", "/apis") or self._is_discovery(path)):
                return web.json_response(self._discovery(path))
            resource, namespace, name, sub = self._route(path)
            if resource is None:
                raise HTTPStatusError(404, "NotFound", f"the server could not find the requested resource ({path})")
            if sub == "log" and resource.plural == "pods" and request.method == "GET":
                return web.Response(text=self.pod_log(namespace, name, query), content_type="text/plain")
            body_bytes = await request.read() if request.can_read_body else b""
            body = json.loads(body_bytes) if body_bytes else {}
            manager = query.get("fieldManager", "unknown")
            if request.method == "GET" and not name:
                if query.get("watch") in ("true", "1"):
                    return await self._watch(request, resource, namespace, query, fault)
                return web.Response(text=self.do_list(resource, namespace, query), content_type="application/json")
            if request.method == "GET":
                with self.lock:
                    stored = self._store(resource).get((namespace if resource.namespaced else "", name))
                    if stored is None:
                        raise HTTPStatusError(404, "NotFound", f'{resource.plural} "{name}" not found')
                    return web.json_response(stored.obj)
            if request.method == "POST":
                return web.json_response(self.do_create(resource, namespace, body, manager), status=201)
            if request.method == "PATCH":
                content_type = request.headers.get("Content-Type", "")
                if content_type.startswith("application/apply-patch"):
                    if "fieldManager" not in query:
                        raise HTTPStatusError(400, "BadRequest", "fieldManager is required for apply requests")
                    force = query.get("force") in ("true", "1")
                    return web.json_response(self.do_apply(resource, namespace, name, body, manager, force))
                if content_type.startswith("application/json-patch"):
                    raise HTTPStatusError(415, "UnsupportedMediaType", "JSON patch is not emulated")
                return web.json_response(self.do_patch(resource, namespace, name, body, manager))
            if request.method == "DELETE":
                return web.json_response(self.do_delete(resource, namespace, name, body))
            raise HTTPStatusError(405, "MethodNotAllowed", f"{request.method} is not supported")
        except HTTPStatusError as exc:
            return web.json_response(exc.body, status=exc.code)

    def _is_discovery(self, path: str) -> bool:
        parts = [p for p in path.split("/") if p]
        return (parts[:1] == ["apis"] and len(parts) in (2, 3)) or parts == ["api", "v1"]

    def _discovery(self, path: str) -> Obj:
        parts = [p for p in path.split("/") if p]
        if path == "/version":
            return {"major": "1", "minor": "34", "gitVersion": "v1.34.0-emulator"}
        if path == "/api":
            return {"kind": "APIVersions", "versions": ["v1"]}
        groups: dict[str, set[str]] = {}
        for r in self.resources.values():
            if r.group:
                groups.setdefault(r.group, set()).add(r.version)
        for gv in self.extra_group_versions:
            g, v = gv.split("/")
            groups.setdefault(g, set()).add(v)
        if path == "/apis":
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [
                    {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in sorted(vs)]}
                    for g, vs in sorted(groups.items())
                ],
            }
        if parts == ["api", "v1"]:
            group, version = "", "v1"
        else:
            group = parts[1]
            version = parts[2] if len(parts) > 2 else ""
            if group not in groups or (version and version not in groups[group]):
                raise HTTPStatusError(404, "NotFound", "the server could not find the requested resource")
            if not version:
                return {"kind": "APIGroup", "name": group, "versions": sorted(groups[group])}
        return {
            "kind": "APIResourceList",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": [
                {"name": r.plural, "kind": r.kind, "namespaced": r.namespaced}
                for r in self.resources.values()
                if r.group == group and r.version == version
            ],
        }

    async def _watch(
        self, request: web.Request, resource: Resource, namespace: str, query: dict[str, str], fault: Fault | None
    ) -> web.StreamResponse:
        labels = label_matcher(query.get("labelSelector", ""))
        fields = field_matcher(query.get("fieldSelector", ""))
        timeout = float(query.get("timeoutSeconds") or 1800)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        since_raw = query.get("resourceVersion", "")
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        sent = 0

        def wanted(obj: Obj) -> bool:
            if resource.namespaced and namespace and obj["metadata"].get("namespace") != namespace:
                return False
            return labels(obj) and fields(obj)

        async def send(line: str) -> bool:
            nonlocal sent
            if fault is not None and fault.drop_after is not None and sent >= fault.drop_after:
                if request.transport is not None:
                    request.transport.abort()
                return False
            await response.write(line.encode() + b"\n")
            sent += 1
            return True

        with self.lock:
            if since_raw in ("", "0"):
                since = self.rv
                initial = [
                    json.dumps({"type": "ADDED", "object": s.obj})
                    for s in self._store(resource).values()
                    if wanted(s.obj)
                ]
            else:
                since = int(since_raw)
                initial = []
                if since < self.floor.get(resource.key, 0):
                    gone = status(410, "Expired", f"too old resource version: {since} ({self.floor[resource.key]})")
                    initial = [json.dumps({"type": "ERROR", "object": gone})]
        for line in initial:
            if not await send(line):
                return response
        if initial and '"ERROR"' in initial[0][:20]:
            await response.write_eof()
            return response
        deadline = time.monotonic() + timeout
        if self.bookmark_interval is None:  # the cacher's schedule (k8s.io/apiserver cacheWatcher.nextBookmarkTime)
            next_bookmark = time.monotonic() + max(1.0, min(60.0, timeout - 2.0))
            every = 60.0
        else:
            next_bookmark = time.monotonic() + self.bookmark_interval
            every = self.bookmark_interval
        try:
            while not self._stopping and time.monotonic() < deadline:
                lines: list[str] = []
                ended = False
                with self.lock:
                    if since < self.floor.get(resource.key, 0):
                        gone = status(410, "Expired", f"too old resource version: {since}")
                        lines, ended = [json.dumps({"type": "ERROR", "object": gone})], True
                    else:
                        history = self.history.get(resource.key, [])
                        start = bisect.bisect_right(history, (since, "\uffff", ""))
                        for rv, _type, line in history[start:]:
                            if wanted(json.loads(line)["object"]):
                                lines.append(line)
                            since = rv
                        if bookmarks and time.monotonic() >= next_bookmark:
                            # every event of this resource up to the newest version has been sent
                            since = max(since, self.rv)
                            mark = {
                                "kind": resource.kind,
                                "apiVersion": resource.api_version,
                                "metadata": {"resourceVersion": str(since)},
                            }
                            lines.append(json.dumps({"type": "BOOKMARK", "object": mark}))
                            next_bookmark = time.monotonic() + every
                for line in lines:
                    if not await send(line):
                        return response
                if ended:
                    break
                await asyncio.sleep(0.01)
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return response

    async def _control(self, request: web.Request) -> web.StreamResponse:
        """``POST /_emu/put`` (object), ``/_emu/edit`` ({kind,name,namespace,changes}), ``/_emu/remove``."""
        body = await request.json() if request.can_read_body else {}
        action = request.path.removeprefix("/_emu/")
        if action == "put":
            return web.json_response(self.put(body))
        if action == "put_many":
            for obj in body:
                self.put(obj)
            return web.json_response({"count": len(body)})
        if action == "edit":
            return web.json_response(
                self.edit(body["kind"], body["name"], body.get("namespace", ""), **body.get("changes", {}))
            )
        if action == "remove":
            return web.json_response({"removed": self.remove(body["kind"], body["name"], body.get("namespace", ""))})
        if action == "compact":
            self.compact()
            return web.json_response({"ok": True})
        raise HTTPStatusError(404, "NotFound", f"no control action {action}")
