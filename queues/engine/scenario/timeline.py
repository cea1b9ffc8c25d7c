"""A scenario's timeline: changes at given times, written as the Kubernetes changes they stand for.

One or more documents ``apiVersion: sim.portal/v1, kind: Timeline`` hold ``events``; each has ``at`` (an offset
from the scenario's start — ``90s``, ``10m``, ``1h30m`` — or an RFC 3339 time), an optional ``name``, and one verb:

* ``create: <object>`` — ``kubectl create -f``: any scenario kind (a Workload is created at ``at``, pending);
* ``patch: Kind/name`` (``Kind/namespace/name`` for LocalQueues and Workloads, ``Configuration`` for Kueue's
  manager Configuration) with ``with: <merge patch>`` — ``kubectl patch --type merge``; ``subresource: status``
  patches the status (a Workload's ``reclaimablePods``, its ``PodsReady`` condition);
* ``delete: Kind/name`` — ``kubectl delete``;
* ``finish: Workload/namespace/name`` — the job ends (Kueue's ``Finished=True``);
* ``stop: ClusterQueue/name`` or ``LocalQueue/ns/name`` (``keepAlreadyRunning: true`` for ``Hold``, else
  ``HoldAndDrain``) and ``resume: ...`` — ``kueuectl stop`` / ``kueuectl resume``.

``compile_timeline`` checks every event against the objects as they are at its time (the same parsers as the
manifests: an error names the Timeline, the event and the object's field) and turns it into a change the replay
applies (``apply_event``): a policy change rebuilds the engine on the new objects (``Engine.reconfigure``), a
Workload change goes through the engine's workload lifecycle. Events at the same time apply in the order written.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from queues.engine.model import ClusterState, Workload
from queues.engine.records import ADMITTED, DELETED, EVICTING, FINISHED, PENDING, RESERVED
from queues.engine.simulation import Replay

from .kinds import KueueConfig, kueue_settings
from .manifest import (
    ANN_GATED,
    ANN_PODS_READY,
    ANN_RUNTIME,
    ANN_SUBMIT,
    CORE_KINDS,
    KUEUE_KINDS,
    Manifest,
    ScenarioError,
    check_object,
    parse_duration,
    parse_timestamp,
)
from .workloads import parse_workload

VERBS = ("create", "patch", "delete", "finish", "stop", "resume")
EVENT_FIELDS = frozenset({"at", "name", "with", "subresource", "keepAlreadyRunning", *VERBS})
CONFIGURATION = "Configuration"
NAMESPACED = frozenset({"LocalQueue", "Workload"})
KINDS = frozenset(CORE_KINDS | KUEUE_KINDS)
#: kubectl spellings of each kind (``clusterqueue``, ``clusterqueues``, ``cq``...) to its name.
_ALIASES = {
    **{k.lower(): k for k in KINDS},
    **{k.lower() + "s": k for k in KINDS},
    "cq": "ClusterQueue",
    "lq": "LocalQueue",
    "rf": "ResourceFlavor",
    "wl": "Workload",
    "wpc": "WorkloadPriorityClass",
    "configuration": CONFIGURATION,
}
#: Workload fields a patch may change, by the engine field they set.
_WORKLOAD_FIELDS = (
    "priority",
    "priority_class",
    "active",
    "queue_name",
    "runtime",
    "pods_ready_after",
    "admission_gated_by",
    "reclaimable_pods",
)

#: Where a patch writes each of those fields.
_FIELD_PATHS = {
    "priority": (("spec", "priority"), ("spec", "priorityClassRef"), ("spec", "priorityClassName")),
    "priority_class": (("spec", "priorityClassRef"), ("spec", "priorityClassName")),
    "active": (("spec", "active"),),
    "queue_name": (("spec", "queueName"),),
    "runtime": (("metadata", "annotations", ANN_RUNTIME),),
    "pods_ready_after": (("metadata", "annotations", ANN_PODS_READY),),
    "admission_gated_by": (("metadata", "annotations", ANN_GATED),),
    "reclaimable_pods": (("status", "reclaimablePods"),),
}

Ident = tuple[str, str, str]
PolicyBuilder = Callable[..., tuple[ClusterState, dict[str, float]]]


@dataclass(frozen=True)
class Known:
    """Names of ResourceFlavors and Topologies that exist at some time of the scenario (now, or created later)."""

    flavors: frozenset[str] = frozenset()
    topologies: frozenset[str] = frozenset()

    @classmethod
    def of(cls, by_kind: Mapping[str, list[Manifest]], timelines: Iterable[Manifest]) -> Known:
        """The names of the scenario's objects and of those its timelines create."""
        names: dict[str, set[str]] = {"ResourceFlavor": set(), "Topology": set()}
        for kind, found in names.items():
            found.update(obj.name for obj in by_kind.get(kind, []))
        for tl in timelines:
            events = tl.raw.get("events")
            for event in events if isinstance(events, list) else ():
                made = event.get("create") if isinstance(event, Mapping) else None
                if isinstance(made, Mapping) and made.get("kind") in names:
                    meta = made.get("metadata")
                    if isinstance(meta, Mapping) and meta.get("name"):
                        names[str(made["kind"])].add(str(meta["name"]))
        return cls(frozenset(names["ResourceFlavor"]), frozenset(names["Topology"]))


# ------------------------------------------------------------------------------------------------ changes


@dataclass(frozen=True)
class PolicyChange:
    """Kueue's objects other than Workloads changed: the engine is rebuilt on ``policy`` (no workloads)."""

    policy: ClusterState
    node_left: str | None = None
    #: A WorkloadPriorityClass's new value: every workload of that class takes it (Kueue's workload controller).
    priority_class: tuple[str, int] | None = None
    #: A ClusterQueue deleted: it stays, terminating, until the workloads it admitted have finished.
    deleted_queue: str | None = None
    #: A Namespace deleted: its workloads go with it.
    deleted_namespace: str | None = None


@dataclass(frozen=True)
class WorkloadCreate:
    """A Workload is created (pending)."""

    workload: Workload
    checks_delay: float | None = None


@dataclass(frozen=True)
class WorkloadChange:
    """A Workload's spec, annotations or status changed: ``fields`` are the engine fields it sets."""

    key: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    pods_ready: bool = False


@dataclass(frozen=True)
class WorkloadEnd:
    """A Workload is deleted (``deleted``) or its job finished."""

    key: str
    deleted: bool


Change = PolicyChange | WorkloadCreate | WorkloadChange | WorkloadEnd


@dataclass(frozen=True)
class TimelineEvent:
    """One event of a timeline, checked and ready to apply."""

    index: int
    name: str
    at: float
    offset: float
    verb: str
    target: str
    change: Change

    def describe(self) -> dict[str, Any]:
        """The event in the ``simulate --json`` document."""
        return {"name": self.name, "at": round(self.offset, 3), "verb": self.verb, "object": self.target}


# ------------------------------------------------------------------------------------------------ the objects


class World:
    """The scenario's objects as raw manifests at one time of the timeline (changed event by event)."""

    def __init__(self, by_kind: Mapping[str, list[Manifest]], config: KueueConfig | None) -> None:
        self.objects: dict[Ident, dict[str, Any]] = {}
        for kind, objs in by_kind.items():
            for obj in objs:
                self.objects[(kind, obj.namespace, obj.name)] = copy.deepcopy(dict(obj.raw))
        self.config = config
        self.workloads: dict[str, Workload] = {}

    def manifests(self) -> dict[str, list[Manifest]]:
        """The objects by kind (as the loader reads them)."""
        out: dict[str, list[Manifest]] = {}
        for i, ((kind, _, _), raw) in enumerate(self.objects.items()):
            out.setdefault(kind, []).append(Manifest(raw, i))
        return out


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge recursively, ``null`` removes a key, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


# ------------------------------------------------------------------------------------------------ compiling


class _Event:
    """One raw event while it is compiled: its place (for errors) and fields."""

    def __init__(self, timeline: Manifest, position: int, raw: Any) -> None:
        self.timeline = timeline
        self.position = position
        self.context = ""
        if not isinstance(raw, Mapping):
            raise self.fail("", "expected an object with 'at' and one of " + ", ".join(VERBS))
        self.raw = raw
        unknown = sorted(set(raw) - EVENT_FIELDS)
        if unknown:
            raise self.fail(unknown[0], f"unknown field (an event has at, name, one of {', '.join(VERBS)}, with)")
        verbs = [v for v in VERBS if v in raw]
        if len(verbs) != 1:
            raise self.fail("", f"needs exactly one of {', '.join(VERBS)}, got {', '.join(verbs) or 'none'}")
        self.verb = verbs[0]
        name = raw.get("name")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise self.fail("name", "must be a non-empty string")
        self.name = str(name) if name else f"{timeline.name or 'timeline'}.events[{position}]"

    def fail(self, path: str, problem: str) -> ScenarioError:
        """A ScenarioError naming the Timeline, the event (and its change once known) and the field."""
        where = f"events[{self.position}]" + (f".{path}" if path else "")
        return ScenarioError("Timeline", self.timeline.name, where, f"{self.context}{problem}")

    def wrap(self, exc: ScenarioError) -> ScenarioError:
        """An object's error (kind/name: path: problem) as this event's."""
        return self.fail("", str(exc))


def _time(event: _Event, start: float) -> tuple[float, float]:
    """(absolute time, offset from the start) of the event's ``at``."""
    if "at" not in event.raw:
        raise event.fail("at", "required field is missing")
    raw = event.raw["at"]
    text = str(raw)
    if isinstance(raw, str) and "T" in text and ":" in text:
        try:
            when = parse_timestamp(text)
        except ValueError as exc:
            raise event.fail("at", str(exc)) from None
    else:
        try:
            when = start + parse_duration(raw)
        except ValueError as exc:
            raise event.fail("at", str(exc)) from None
    if when < start:
        raise event.fail("at", f"{text} is before the scenario's start (the latest creationTimestamp)")
    return when, when - start


def _target(event: _Event, value: Any) -> Ident:
    """``Kind/name`` or ``Kind/namespace/name`` (kubectl's kind names and plurals accepted) as an identity."""
    if not isinstance(value, str) or not value:
        raise event.fail(event.verb, "expected Kind/name (Kind/namespace/name for LocalQueues and Workloads)")
    parts = value.split("/")
    kind = _ALIASES.get(parts[0].lower())
    if kind is None:
        raise event.fail(event.verb, f"unknown kind {parts[0]!r} (kinds: {', '.join(sorted(KINDS))}, Configuration)")
    if kind == CONFIGURATION:
        return kind, "", ""
    if kind in NAMESPACED:
        if len(parts) != 3 or not parts[1] or not parts[2]:
            raise event.fail(event.verb, f"{kind} is namespaced: write {kind}/namespace/name, got {value!r}")
        return kind, parts[1], parts[2]
    if len(parts) != 2 or not parts[1]:
        raise event.fail(event.verb, f"write {kind}/name, got {value!r}")
    return kind, "", parts[1]


def _sets(patch: Mapping[str, Any], paths: tuple[tuple[str, ...], ...]) -> bool:
    """Whether a merge patch writes (or removes) any of ``paths``."""
    for path in paths:
        cur: Any = patch
        for part in path:
            if not isinstance(cur, Mapping) or part not in cur:
                break
            cur = cur[part]
        else:
            return True
    return False


def _show(ident: Ident) -> str:
    kind, namespace, name = ident
    if kind == CONFIGURATION:
        return kind
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


class _Compiler:
    """Compiles the events in time order against the objects as they are at each event's time."""

    def __init__(
        self,
        world: World,
        *,
        start: float,
        known: Any,
        build: PolicyBuilder,
    ) -> None:
        self.world = world
        self.start = start
        self.known = known
        self.build = build
        self.policy, self.check_delay = build(world.manifests(), world.config, known)

    def rebuild(self, event: _Event) -> ClusterState:
        """The policy after the event's change (its errors are the event's)."""
        try:
            self.policy, self.check_delay = self.build(self.world.manifests(), self.world.config, self.known)
        except ScenarioError as exc:
            raise event.wrap(exc) from None
        return self.policy

    def priorities(self) -> dict[str, int]:
        return {p.name: p.value for p in self.policy.priority_classes}

    # ---------------------------------------------------------------- verbs

    def compile(self, event: _Event, when: float) -> tuple[str, Change]:
        verb = event.verb
        if verb == "create":
            return self.create(event, when)
        ident = _target(event, event.raw[verb])
        event.context = f"{verb} {_show(ident)}: "
        if verb == "patch":
            return _show(ident), self.patch(event, ident)
        if ident[0] == CONFIGURATION:
            raise event.fail(verb, "Kueue's Configuration can only be patched")
        if ident not in self.world.objects:
            raise event.fail(verb, f"no {_show(ident)} at this time")
        if verb == "delete":
            return _show(ident), self.delete(event, ident)
        if verb == "finish":
            if ident[0] != "Workload":
                raise event.fail(verb, f"only a Workload finishes, not a {ident[0]}")
            return _show(ident), WorkloadEnd(f"{ident[1]}/{ident[2]}", deleted=False)
        # stop / resume: kueuectl's, a stopPolicy change
        if ident[0] not in ("ClusterQueue", "LocalQueue"):
            raise event.fail(verb, f"only a ClusterQueue or LocalQueue can be stopped, not a {ident[0]}")
        keep = event.raw.get("keepAlreadyRunning", False)
        if not isinstance(keep, bool):
            raise event.fail("keepAlreadyRunning", f"expected true or false, got {keep!r}")
        if verb == "resume" and "keepAlreadyRunning" in event.raw:
            raise event.fail("keepAlreadyRunning", "only a stop keeps running workloads")
        policy = None if verb == "resume" else ("Hold" if keep else "HoldAndDrain")
        self.world.objects[ident] = _merge(self.world.objects[ident], {"spec": {"stopPolicy": policy}})
        return _show(ident), PolicyChange(self.rebuild(event))

    def create(self, event: _Event, when: float) -> tuple[str, Change]:
        raw = event.raw["create"]
        if not isinstance(raw, Mapping):
            raise event.fail("create", "expected the object to create (a manifest)")
        obj = Manifest(raw, 0)
        if obj.kind in (CONFIGURATION, "ConfigMap"):
            raise event.fail("create", "Kueue's Configuration can only be patched (patch: Configuration)")
        try:
            check_object(obj, 0)
        except ScenarioError as exc:
            raise event.fail("create", str(exc)) from None
        if obj.kind in NAMESPACED and not obj.namespace:
            raise event.fail("create.metadata.namespace", "required field is missing")
        ident = (obj.kind, obj.namespace if obj.kind in NAMESPACED else "", obj.name)
        event.context = f"create {_show(ident)}: "
        if ident in self.world.objects:
            raise event.fail("create", f"{_show(ident)} already exists at this time (patch it instead)")
        self.world.objects[ident] = copy.deepcopy(dict(raw))
        if obj.kind == "Workload":
            return _show(ident), self.create_workload(event, obj, when)
        return _show(ident), PolicyChange(self.rebuild(event))

    def create_workload(self, event: _Event, obj: Manifest, when: float) -> WorkloadCreate:
        if obj.get("status.admission") is not None:
            raise event.fail("create.status.admission", "a workload the timeline creates is pending (no admission)")
        if ANN_SUBMIT in obj.annotations():
            raise event.fail(f'create.metadata.annotations["{ANN_SUBMIT}"]', "the event's at is its creation time")
        try:
            wl, facts = parse_workload(obj, self.priorities())
        except ScenarioError as exc:
            raise event.wrap(exc) from None
        wl = replace(wl, created_at=when, submit_at=when - self.start)
        self.world.workloads[wl.key] = wl
        delay = facts.get("checks")
        if delay is None:
            lq = next(
                (q for q in self.policy.local_queues if (q.namespace, q.name) == (wl.namespace, wl.queue_name)), None
            )
            cq = next((c for c in self.policy.cluster_queues if lq is not None and c.name == lq.cluster_queue), None)
            rules = cq.admission_checks if cq is not None else ()
            delays = [self.check_delay[r.name] for r in rules if r.name in self.check_delay]
            delay = max(delays) if delays else None
        return WorkloadCreate(wl, delay)

    def patch(self, event: _Event, ident: Ident) -> Change:
        patch = event.raw.get("with")
        if not isinstance(patch, Mapping) or not patch:
            raise event.fail("with", "required: the merge patch (an object)")
        sub = event.raw.get("subresource")
        if sub not in (None, "status"):
            raise event.fail("subresource", f"only status is a subresource, got {sub!r}")
        if sub == "status":
            other = sorted(set(patch) - {"status"})
            if other:
                raise event.fail(f"with.{other[0]}", "with subresource: status only status may be patched")
        elif "status" in patch and ident[0] not in (CONFIGURATION,):
            raise event.fail("with.status", "status is a subresource: patch it with subresource: status")
        if ident[0] == CONFIGURATION:
            return self.patch_config(event, patch)
        if ident not in self.world.objects:
            raise event.fail("patch", f"no {_show(ident)} at this time")
        meta = patch.get("metadata") or {}
        for key in ("name", "namespace"):
            if isinstance(meta, Mapping) and key in meta:
                raise event.fail(f"with.metadata.{key}", "is immutable")
        before = self.world.objects[ident]
        after = _merge(before, patch)
        self.world.objects[ident] = after
        if ident[0] == "Workload":
            return self.patch_workload(event, ident, before, after)
        policy = self.rebuild(event)
        if ident[0] == "WorkloadPriorityClass":
            value = after.get("value")
            if value != before.get("value") and isinstance(value, int):
                return PolicyChange(policy, priority_class=(ident[2], value))
        return PolicyChange(policy)

    def patch_config(self, event: _Event, patch: Mapping[str, Any]) -> Change:
        config = self.world.config
        if config is None:
            # None yet: Kueue's defaults, now written down.
            base = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration"}
            config = KueueConfig(Manifest(base, 0), base)
        merged = _merge(config.config, patch)
        updated = KueueConfig(config.obj, merged)
        try:
            kueue_settings(updated)
        except ScenarioError as exc:
            raise event.wrap(exc) from None
        self.world.config = updated
        return PolicyChange(self.rebuild(event))

    def patch_workload(
        self, event: _Event, ident: Ident, before: Mapping[str, Any], after: Mapping[str, Any]
    ) -> WorkloadChange:
        key = f"{ident[1]}/{ident[2]}"
        if (before.get("spec") or {}).get("podSets") != (after.get("spec") or {}).get("podSets"):
            raise event.fail("with.spec.podSets", "is immutable (Kueue's webhook)")
        obj = Manifest(after, 0)
        old = Manifest(before, 0)
        try:
            new_wl, _ = parse_workload(obj, self.priorities())
            old_wl = self.world.workloads.get(key) or parse_workload(old, self.priorities())[0]
        except ScenarioError as exc:
            raise event.wrap(exc) from None
        old_status = before.get("status") or {}
        new_status = after.get("status") or {}
        fields: dict[str, Any] = {}
        patch = event.raw.get("with") or {}
        for name in _WORKLOAD_FIELDS:
            value = getattr(new_wl, name)
            # What the patch sets counts even when it equals the manifest: the workload may have changed since
            # (Kueue deactivates a workload past its requeue limit; setting active: true then reactivates it).
            if value != getattr(old_wl, name) or _sets(patch, _FIELD_PATHS[name]):
                fields[name] = value
        if "reclaimable_pods" in fields:
            self._reclaimable_grows(event, old_wl, new_wl)
        ready = False
        if new_status.get("conditions") != old_status.get("conditions"):
            ready = self._pods_ready(event, new_status)
        touched = set(new_status) ^ set(old_status) | {k for k in new_status if new_status[k] != old_status.get(k)}
        bad = sorted(touched - {"reclaimablePods", "conditions"})
        if bad:
            raise event.fail(f"with.status.{bad[0]}", "only reclaimablePods and the PodsReady condition can change")
        self.world.workloads[key] = new_wl
        if not fields and not ready:
            raise event.fail("with", "changes nothing the simulation reads")
        return WorkloadChange(key, fields, ready)

    def _reclaimable_grows(self, event: _Event, old: Workload, new: Workload) -> None:
        """Kueue's webhook: a pod set's reclaimable count may not go down, nor disappear, while quota is held."""
        for name, count in old.reclaimable_pods.items():
            if new.reclaimable_pods.get(name, 0) < count:
                raise event.fail(
                    "with.status.reclaimablePods",
                    f"{name}: cannot be less than {count} (Kueue's webhook: reclaimable pods only grow)",
                )

    def _pods_ready(self, event: _Event, status: Mapping[str, Any]) -> bool:
        """A PodsReady=True condition in the patched status (the only condition a simulation reads)."""
        conditions = status.get("conditions") or []
        if not isinstance(conditions, list):
            raise event.fail("with.status.conditions", "must be a list")
        for i, cond in enumerate(conditions):
            if not isinstance(cond, Mapping) or cond.get("type") != "PodsReady":
                kind = cond.get("type") if isinstance(cond, Mapping) else cond
                raise event.fail(f"with.status.conditions[{i}].type", f"only PodsReady can be set, got {kind!r}")
            if str(cond.get("status")) != "True":
                raise event.fail(f"with.status.conditions[{i}].status", "only PodsReady=True can be set")
        return bool(conditions)

    def delete(self, event: _Event, ident: Ident) -> Change:
        kind, namespace, name = ident
        del self.world.objects[ident]
        if kind == "Workload":
            self.world.workloads.pop(f"{namespace}/{name}", None)
            return WorkloadEnd(f"{namespace}/{name}", deleted=True)
        if kind == "Namespace":
            # Deleting a namespace deletes what is in it: its LocalQueues and Workloads.
            for other in [i for i in self.world.objects if i[0] in NAMESPACED and i[1] == name]:
                del self.world.objects[other]
            for key in [k for k in self.world.workloads if k.startswith(f"{name}/")]:
                del self.world.workloads[key]
            return PolicyChange(self.rebuild(event), deleted_namespace=name)
        policy = self.rebuild(event)
        if kind == "Node":
            return PolicyChange(policy, node_left=name)
        if kind == "ClusterQueue":
            return PolicyChange(policy, deleted_queue=name)
        return PolicyChange(policy)


def compile_timeline(
    timelines: list[Manifest],
    by_kind: Mapping[str, list[Manifest]],
    config: KueueConfig | None,
    *,
    start: float,
    known: Known,
    build: PolicyBuilder,
) -> tuple[TimelineEvent, ...]:
    """Every event of the Timeline documents, checked against the objects at its time, in the order they apply."""
    if not timelines:
        return ()
    raw_events: list[tuple[float, float, int, _Event]] = []
    order = 0
    names: set[str] = set()
    for tl in timelines:
        events = tl.raw.get("events")
        if not isinstance(events, list) or not events:
            raise tl.fail("events", "required: a list of events")
        for i, raw in enumerate(events):
            event = _Event(tl, i, raw)
            if event.name in names:
                raise event.fail("name", f"duplicate event name {event.name!r}")
            names.add(event.name)
            when, offset = _time(event, start)
            raw_events.append((when, offset, order, event))
            order += 1
    raw_events.sort(key=lambda item: (item[0], item[2]))
    world = World(by_kind, config)
    compiler = _Compiler(world, start=start, known=known, build=build)
    out = []
    for when, offset, order, event in raw_events:
        target, change = compiler.compile(event, when)
        out.append(TimelineEvent(order, event.name, when, offset, event.verb, target, change))
    return tuple(out)


# ------------------------------------------------------------------------------------------------ applying


def apply_event(event: TimelineEvent, replay: Replay, now: float) -> None:
    """Apply a compiled event to the replay's engine at ``now``."""
    change = event.change
    if isinstance(change, WorkloadCreate):
        replay.submit_now(change.workload, now, change.checks_delay)
    elif isinstance(change, WorkloadEnd):
        wl = replay.engine.workloads.get(change.key)
        if wl is None or wl.state in (FINISHED, DELETED):
            replay.note(now, change.key, "ignored", f"{event.verb}: the workload already ended")
        elif change.deleted:
            replay.delete_now(change.key, now)
        else:
            replay.finish_now(change.key, now)
    elif isinstance(change, WorkloadChange):
        _change_workload(change, replay, now)
    else:
        _change_policy(change, replay, now)


def _change_workload(change: WorkloadChange, replay: Replay, now: float) -> None:
    engine = replay.engine
    wl = engine.workloads.get(change.key)
    if wl is None or wl.state in (FINISHED, DELETED):
        replay.note(now, change.key, "ignored", "patch: the workload already ended")
        return
    fields = dict(change.fields)
    if "queue_name" in fields and wl.state != PENDING:
        # Kueue's webhook refuses a new queue for a workload holding quota.
        fields.pop("queue_name")
        replay.note(now, change.key, "ignored", "spec.queueName is immutable while the workload holds quota")
    if fields:
        engine.update(replace(wl.spec, **fields), now)
        if "runtime" in fields:
            replay.runtime_changed(change.key, now)
        if "active" in fields and not fields["active"] and engine.evicting:
            replay.complete_evictions(now)
    if change.pods_ready:
        engine.pods_ready(change.key, now)


def _change_policy(change: PolicyChange, replay: Replay, now: float) -> None:
    engine = replay.engine
    policy = change.policy
    if change.node_left is not None:
        replay.node_left(change.node_left, now)
    if change.deleted_namespace is not None:
        for key in sorted(k for k, w in engine.live.items() if w.spec.namespace == change.deleted_namespace):
            replay.delete_now(key, now)
    if change.deleted_queue is not None:
        policy = _terminating(change.deleted_queue, replay, policy, now)
    named = {c.name for c in policy.cluster_queues}
    kept = tuple(c.spec for c in engine.cqs.values() if c.spec.terminating and c.name not in named)
    if kept:
        # A ClusterQueue deleted earlier still runs workloads it admitted: it stays, terminating, until they end.
        policy = replace(policy, cluster_queues=(*policy.cluster_queues, *kept))
    # The scenario's reservations hold whatever the timeline changes (the engine applies those then in force).
    policy = replace(policy, reservations=engine.spec_state.reservations)
    tracked = engine.pods_ready_config is not None
    engine.reconfigure(policy, now)
    replay.policy_changed(now, tracked_before=tracked)
    if change.priority_class is not None:
        name, value = change.priority_class
        for _, wl in sorted(engine.live.items()):
            if wl.spec.priority_class == name and wl.spec.priority != value:
                engine.update(replace(wl.spec, priority=value), now)


def _terminating(name: str, replay: Replay, policy: ClusterState, now: float) -> ClusterState:
    """A deleted ClusterQueue: gone at once unless workloads it admitted run; then it stays, terminating (it admits
    nothing), until they have all finished (Kueue's finalizer). Reservations awaiting checks are released."""
    engine = replay.engine
    old = engine.cqs.get(name)
    if old is None:
        return policy
    for key in sorted(old.admitted):
        if old.admitted[key].state == RESERVED:
            engine.release_reservation(key)
    if not any(w.state in (ADMITTED, EVICTING) for w in old.admitted.values()):
        return policy
    keep = replace(old.spec, terminating=True)

    def finalizer(at: float) -> bool:
        engine = replay.engine
        cq = engine.cqs.get(name)
        if cq is None or not cq.spec.terminating:
            return True  # re-created meanwhile, or already gone
        if any(w.state in (ADMITTED, EVICTING) for w in cq.admitted.values()):
            return False
        current = engine.spec_state
        tracked = engine.pods_ready_config is not None
        rest = tuple(c for c in current.cluster_queues if c.name != name)
        engine.reconfigure(replace(current, cluster_queues=rest), at)
        replay.policy_changed(at, tracked_before=tracked)
        replay.note(at, f"ClusterQueue/{name}", "deleted", "its finalizer ends: no workload it admitted runs")
        return True

    replay.finalizers.append(finalizer)
    return replace(policy, cluster_queues=(*policy.cluster_queues, keep))


__all__ = [
    "Known",
    "PolicyChange",
    "TimelineEvent",
    "WorkloadChange",
    "WorkloadCreate",
    "WorkloadEnd",
    "apply_event",
    "compile_timeline",
]
