"""Node placement: where the pods of an admitted pod set run (topology-aware, best-fit, deterministic).

Kueue itself places pods only for Topology-Aware-Scheduling flavors; the portal's engine places every
pod when Nodes are known, so a workload is admitted only if all its pods fit on Ready, schedulable,
tolerated nodes matching its flavor, within the free allocatable capacity and its topology request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kernel.quantity import is_device_resource

from .capacity_view import CapacityView, FreeSummary
from .labels import HOSTNAME_LABEL, first_untolerated, node_affinity_matches, taint_to_string
from .model import HEALTH_TAINT_KEYS, Node, NodeSelectorTerm, Taint, Toleration

PODS = "pods"

#: Resources a node may omit (hand-written scenarios often list only devices): not checked when absent.
_OPTIONAL_NODE_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})


class NodeState:
    """A node with its free capacity and health facts."""

    __slots__ = (
        "allocatable",
        "capacity",
        "degraded",
        "health_gap",
        "health_gap_by",
        "health_node",
        "health_reason",
        "health_taints",
        "labels",
        "name",
        "ready",
        "taints",
        "unschedulable",
        "used",
    )

    def __init__(self, node: Node) -> None:
        self.name = node.name
        self.labels = dict(node.labels)
        self.labels.setdefault(HOSTNAME_LABEL, node.name)
        self.taints = node.taints
        self.ready = node.ready
        self.unschedulable = node.unschedulable
        self.allocatable = dict(node.allocatable)
        self.capacity = dict(node.capacity)
        for res, val in self.allocatable.items():
            self.capacity.setdefault(res, val)
        self.used: dict[str, int] = {}
        self.health_reason = node.health_reason
        self.health_taints = tuple(
            t
            for t in node.taints
            if t.effect in ("NoSchedule", "NoExecute") and (t.key in HEALTH_TAINT_KEYS or _healthish(t.key))
        )
        self.health_gap = {
            res: cap - self.allocatable.get(res, 0)
            for res, cap in self.capacity.items()
            if is_device_resource(res) and cap > self.allocatable.get(res, 0)
        }
        self.health_gap_by = node.health_gap_by
        self.health_node = (not node.ready) or (node.unschedulable and bool(node.health_reason))
        self.degraded = node.degraded_devices > 0

    @property
    def health_excluded(self) -> bool:
        """True when some of this node's capacity is excluded for health."""
        return self.health_node or bool(self.health_taints) or bool(self.health_gap)

    def health_excluded_units(self, resource: str) -> int:
        """How much of ``resource`` on this node is excluded for health."""
        if self.health_node or self.health_taints:
            return self.capacity.get(resource, 0)
        return self.health_gap.get(resource, 0)

    def health_note(self) -> str:
        """A short human description of the node's health exclusion."""
        if self.health_reason:
            return self.health_reason
        if not self.ready:
            return "NotReady"
        if self.health_taints:
            return "taint " + ", ".join(taint_to_string(t) for t in self.health_taints)
        if self.health_gap:
            return ", ".join(f"{n} {r} unhealthy" for r, n in sorted(self.health_gap.items()))
        return ""


def _healthish(key: str) -> bool:
    lowered = key.lower()
    return "xid" in lowered or "unhealthy" in lowered


@dataclass(frozen=True, slots=True)
class PodSetRequest:
    """What placement needs to know about one pod set."""

    count: int
    per_pod: Mapping[str, int]
    node_labels: Mapping[str, str]
    node_selector: Mapping[str, str] = field(default_factory=dict)
    node_affinity: tuple[NodeSelectorTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    levels: tuple[str, ...] = ()
    topology_name: str | None = None
    required: str | None = None
    preferred: str | None = None
    #: The node filter part of the request and the whole request as hashable keys (for the pool's caches).
    filter_key: tuple = field(init=False, compare=False, repr=False)
    key: tuple = field(init=False, compare=False, repr=False)
    #: The positive per-pod requests, by resource name.
    wanted: tuple[tuple[str, int], ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        filter_key = (
            tuple(sorted(self.node_labels.items())),
            tuple(sorted(self.node_selector.items())),
            self.node_affinity,
            self.tolerations,
        )
        object.__setattr__(self, "filter_key", filter_key)
        object.__setattr__(self, "wanted", tuple((r, v) for r, v in sorted(self.per_pod.items()) if v > 0))
        key = (filter_key, self.levels, tuple(sorted(self.per_pod.items())), self.count, self.required, self.preferred)
        object.__setattr__(self, "key", key)


@dataclass(slots=True)
class PlacementResult:
    """The outcome of placing one pod set."""

    ok: bool
    nodes: list[str]
    fit: int
    total_nodes: int
    exclusions: dict[str, int]
    level: str | None = None
    free_units: dict[str, int] = field(default_factory=dict)
    best_domain: tuple[str, ...] = ()

    def exclusion_text(self) -> str:
        """Kueue's ". Total nodes: T; excluded: ..." suffix ("" without exclusions)."""
        if not self.exclusions:
            return ""
        parts = sorted(f"{k}: {v}" for k, v in self.exclusions.items())
        return f". Total nodes: {self.total_nodes}; excluded: {', '.join(parts)}"


class NodePool:
    """All nodes, with the capacity admitted workloads use on each."""

    def __init__(self, nodes: Iterable[Node]) -> None:
        self.nodes: dict[str, NodeState] = {n.name: NodeState(n) for n in sorted(nodes, key=lambda n: n.name)}
        self.enabled = bool(self.nodes)
        #: True when some node reports allocatable ``pods``: each pod then takes one (as in Kueue's TAS).
        self.counts_pods = any(PODS in n.allocatable for n in self.nodes.values())
        self._flavor_cache: dict[tuple[tuple[str, str], ...], list[NodeState]] = {}
        self._static_cache: dict[tuple, _Static] = {}
        self._summaries: dict[tuple, FreeSummary] = {}
        self._views: dict[tuple, CapacityView] = {}
        self._place_cache: dict[tuple, PlacementResult] = {}
        # ``_fit_view``'s view per request object (by id, with the request to check it is the same object).
        self._fit_views: dict[int, tuple[PodSetRequest, CapacityView]] = {}
        # Names of the nodes whose usage changed, in order; ``version`` counts every change ever made.
        self._log: list[str] = []
        self._log_base = 0
        self.version = 0
        #: Bumped only when nodes join or leave (what a placement ignoring usage depends on).
        self.nodes_version = 0

    # ------------------------------------------------------------------ membership

    def add_node(self, node: Node) -> None:
        """A node joins (a replay adds nodes at the time they first appeared); an existing name is replaced."""
        self.nodes[node.name] = NodeState(node)
        self.nodes = dict(sorted(self.nodes.items()))
        self.counts_pods = self.counts_pods or PODS in node.allocatable
        self._forget()

    def remove_node(self, name: str) -> None:
        """A node leaves; the caller has first released the pods on it."""
        if self.nodes.pop(name, None) is not None:
            self._forget()

    def _forget(self) -> None:
        # Every cache assumes a fixed node set.
        self._flavor_cache.clear()
        self._static_cache.clear()
        self._summaries.clear()
        self._views.clear()
        self._place_cache.clear()
        self._fit_views.clear()
        self.version += 1
        self.nodes_version += 1
        self._log = []
        self._log_base = self.version

    # ------------------------------------------------------------------ usage

    def add(self, pods: Iterable[tuple[str, Mapping[str, int]]]) -> None:
        """Account the requests of pods (node name, per-pod requests) to their nodes."""
        counts_pods = self.counts_pods
        for name, per_pod in pods:
            node = self.nodes.get(name)
            if node is None:
                continue
            self._changed(name)
            used = node.used
            for res, val in per_pod.items():
                used[res] = used.get(res, 0) + val
            if counts_pods and PODS not in per_pod:
                used[PODS] = used.get(PODS, 0) + 1

    def remove(self, pods: Iterable[tuple[str, Mapping[str, int]]]) -> None:
        """Undo ``add``."""
        counts_pods = self.counts_pods
        for name, per_pod in pods:
            node = self.nodes.get(name)
            if node is None:
                continue
            self._changed(name)
            used = node.used
            for res, val in per_pod.items():
                used[res] = used.get(res, 0) - val
            if counts_pods and PODS not in per_pod:
                used[PODS] = used.get(PODS, 0) - 1

    def _changed(self, name: str) -> None:
        self.version += 1
        self._log.append(name)
        keep = len(self.nodes)
        if len(self._log) > 4 * keep + 4096:
            # Keep the last ``keep`` changes: a view further behind has more changes than nodes and rebuilds from
            # scratch anyway (``CapacityView.catch_up``); one within them still catches up.
            self._log = self._log[-keep:] if keep else []
            self._log_base = self.version - len(self._log)

    def _changes_since(self, seen: int) -> list[str] | None:
        """The nodes changed after version ``seen`` (None when the log no longer reaches back that far)."""
        if seen < self._log_base:
            return None
        return self._log[seen - self._log_base :]

    # ------------------------------------------------------------------ placement

    def flavor_nodes(self, node_labels: Mapping[str, str]) -> list[NodeState]:
        """Nodes carrying all of a flavor's node labels (cached: the node set does not change)."""
        items = tuple(sorted(node_labels.items()))
        cached = self._flavor_cache.get(items)
        if cached is None:
            cached = [n for n in self.nodes.values() if all(n.labels.get(k) == v for k, v in items)]
            self._flavor_cache[items] = cached
        return cached

    def free_summary(self, node_labels: Mapping[str, str], resources: Iterable[str]) -> dict[str, tuple[int, int]]:
        """Per resource (total free, largest free on one node) over schedulable nodes matching the labels."""
        return self.summary_for((tuple(sorted(node_labels.items())), tuple(resources)))

    def summary_for(self, key: tuple[tuple[tuple[str, str], ...], tuple[str, ...]]) -> dict[str, tuple[int, int]]:
        """``free_summary`` by its key: (the node labels as sorted items, the resources)."""
        summary = self._summaries.get(key)
        if summary is None:
            nodes = [n for n in self.flavor_nodes(dict(key[0])) if n.ready and not n.unschedulable]
            summary = FreeSummary(nodes, key[1], _OPTIONAL_NODE_RESOURCES)
            self._summaries[key] = summary
        elif summary.seen != self.version:
            summary.catch_up(self._changes_since(summary.seen), self.version)
        summary.seen = self.version
        return summary.figures()

    def eligible_nodes(self, req: PodSetRequest, *, healthy: bool = False) -> list[NodeState]:
        """The nodes a pod set may use (flavor labels, selector, affinity, taints, topology levels), in name order.

        ``healthy`` lifts health exclusions (NotReady nodes, health taints) as ``place(healthy=True)`` does.
        """
        return list(self._static(req, healthy, req.levels).nodes)

    def _static(self, req: PodSetRequest, healthy: bool, levels: tuple[str, ...]) -> _Static:
        """The usage-independent part of a placement (node filters and the domain tree), cached."""
        key = (req.filter_key, levels, healthy)
        cached = self._static_cache.get(key)
        if cached is not None:
            return cached
        static = _Static()
        for node in self.flavor_nodes(req.node_labels):
            if (not healthy or not node.health_node) and (not node.ready or node.unschedulable):
                continue
            static.total += 1
            label = ""
            if req.node_selector and not node_affinity_matches(req.node_selector, (), node.labels):
                label = "nodeSelector"
            elif req.node_affinity and not node_affinity_matches({}, req.node_affinity, node.labels):
                label = "affinity"
            else:
                taints: Iterable[Taint] = node.taints
                if healthy and node.health_taints:
                    taints = [t for t in node.taints if t not in node.health_taints]
                bad = first_untolerated(taints, req.tolerations)
                if bad is not None:
                    label = f'taint "{taint_to_string(bad)}"'
                elif levels and any(lvl != HOSTNAME_LABEL and lvl not in node.labels for lvl in levels):
                    label = "topologyDomain"
            if label:
                static.exclusions[label] = static.exclusions.get(label, 0) + 1
                continue
            static.nodes.append(node)
        static.leaves = _leaf_skeleton(static.nodes, levels)
        self._static_cache[key] = static
        return static

    def place(
        self,
        req: PodSetRequest,
        *,
        empty: bool = False,
        healthy: bool = False,
        ignore_topology: bool = False,
    ) -> PlacementResult:
        """Place ``req.count`` pods; ``empty`` ignores current usage, ``healthy`` lifts health exclusions."""
        memo = (req.key, empty, healthy, ignore_topology, None if empty else self.version)
        cached = self._place_cache.get(memo)
        if cached is not None:
            return cached
        if len(self._place_cache) > 4096:
            self._place_cache.clear()
        result = self._place(req, empty=empty, healthy=healthy, ignore_topology=ignore_topology)
        self._place_cache[memo] = result
        return result

    def fits(self, req: PodSetRequest) -> bool:
        """Whether ``place(req)`` would succeed now, without choosing the nodes (same views, no result built)."""
        view = self._fit_view(req)
        levels = req.levels
        required = req.required
        if required and required in levels:
            return view.best_fit_at(view.depth_of(levels.index(required)), req.count) is not None
        # Otherwise placement falls back to any nodes: a preferred domain with room has it within the root's.
        return view.root.cap >= req.count

    def place_nodes(self, req: PodSetRequest) -> list[str] | None:
        """The nodes ``place(req)`` chooses now, sorted (None when it does not fit), without its full result."""
        nodes = self._choose(req, self._fit_view(req), req.levels)[0]
        return sorted(nodes) if nodes is not None else None

    def _fit_view(self, req: PodSetRequest) -> CapacityView:
        """``_view`` for ``req`` as the cycle places it (usage counted, health exclusions kept), caught up.

        Kept per request object: the cycle asks about the same few requests over and over, and their cache keys
        are nested tuples whose hashing is not cached.
        """
        entry = self._fit_views.get(id(req))
        if entry is not None and entry[0] is req:
            view = entry[1]
            if view.seen != self.version:
                view.catch_up(self._changes_since(view.seen), self.version)
            return view
        levels = req.levels
        view = self._view(req, self._static(req, False, levels), levels, False, False)
        if len(self._fit_views) > 1024:
            self._fit_views.clear()
        self._fit_views[id(req)] = (req, view)
        return view

    def _view(self, req: PodSetRequest, static: _Static, levels: tuple[str, ...], healthy: bool, empty: bool):
        """The capacity view for this filter and per-pod request, caught up with the pool's changes."""
        wanted = req.wanted
        key = (id(static), wanted, empty, healthy)
        view = self._views.get(key)
        if view is None or view.static is not static:
            if len(self._views) > 1024:
                self._views.clear()
            columns = [static.column(res, healthy) for res, _ in wanted]
            view = CapacityView(static, wanted, columns, empty)
            view.seen = self.version
            self._views[key] = view
        elif view.seen != self.version:
            view.catch_up(self._changes_since(view.seen), self.version)
        return view

    def _place(self, req: PodSetRequest, *, empty: bool, healthy: bool, ignore_topology: bool) -> PlacementResult:
        levels = () if ignore_topology else req.levels
        static = self._static(req, healthy, levels)
        view = self._view(req, static, levels, healthy, empty)
        result_nodes, fit, used_level, best_key = self._choose(req, view, levels)
        return PlacementResult(
            ok=result_nodes is not None,
            nodes=sorted(result_nodes) if result_nodes is not None else [],
            fit=fit,
            total_nodes=static.total,
            exclusions=view.exclusions(),
            level=used_level,
            free_units=view.free_units(),
            best_domain=best_key,
        )

    def _choose(
        self, req: PodSetRequest, view: CapacityView, levels: tuple[str, ...]
    ) -> tuple[list[str] | None, int, str | None, tuple[str, ...]]:
        """(the nodes, unsorted, or None; pods that fit; the topology level used; the best domain when none fits)."""
        root = view.root
        count = req.count
        candidates_levels: list[int] = []
        if levels and (req.required or req.preferred):
            wanted_level = req.required or req.preferred
            if wanted_level in levels:
                idx = levels.index(wanted_level)
                candidates_levels = [idx] if req.required else list(range(idx, -1, -1))
        result_nodes: list[str] | None = None
        fit = 0
        used_level = None
        best_key: tuple[str, ...] = ()
        if req.required and candidates_levels:
            depth = view.depth_of(candidates_levels[0])
            largest = view.largest_at(depth)
            fit = min(count, largest.cap if largest is not None else 0)
            best = view.best_fit_at(depth, count)
            if best is not None:
                result_nodes = view.fill(best, count)
                used_level = req.required
            elif largest is not None:
                best_key = largest.key
        else:
            for idx in candidates_levels:
                best = view.best_fit_at(view.depth_of(idx), count)
                if best is not None:
                    result_nodes = view.fill(best, count)
                    used_level = levels[idx]
                    break
            if result_nodes is None and root.cap >= count:
                result_nodes = view.fill(root, count)
            fit = min(count, root.cap)
        if result_nodes is not None:
            fit = count
        return result_nodes, fit, used_level, best_key


class _Static:
    __slots__ = ("_columns", "exclusions", "leaves", "nodes", "total")

    def __init__(self) -> None:
        self._columns: dict[tuple[str, bool], list[int | None]] = {}
        self.total = 0
        self.exclusions: dict[str, int] = {}
        self.nodes: list[NodeState] = []
        self.leaves: list[LeafSkeleton] = []

    def column(self, res: str, healthy: bool) -> list[int | None]:
        """Per node, the amount of ``res`` usable at all (None: the node does not report an optional resource)."""
        key = (res, healthy)
        col = self._columns.get(key)
        if col is None:
            col = []
            for node in self.nodes:
                if res in node.allocatable or res in node.capacity:
                    if healthy and res in node.health_gap:
                        col.append(node.capacity.get(res, 0))
                    else:
                        col.append(node.allocatable.get(res, 0))
                elif res in _OPTIONAL_NODE_RESOURCES:
                    col.append(None)
                else:
                    col.append(0)
            self._columns[key] = col
        return col


class LeafSkeleton:
    """A node's place in the domain tree: its key (domain values along the levels, then its name)."""

    __slots__ = ("degraded", "key")

    def __init__(self, key: tuple[str, ...], degraded: bool) -> None:
        self.key = key
        # Only nodes are marked: the preference never changes which topology domain is chosen.
        self.degraded = degraded


def _leaf_skeleton(nodes: list[NodeState], levels: tuple[str, ...]) -> list[LeafSkeleton]:
    """Each node's key in the domain tree over ``levels`` (the hostname level is the node itself)."""
    domain_levels = [lvl for lvl in levels if lvl != HOSTNAME_LABEL]
    return [
        LeafSkeleton((*[node.labels.get(lvl, "") for lvl in domain_levels], node.name), node.degraded) for node in nodes
    ]
