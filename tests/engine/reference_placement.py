"""The node placement of queues/engine/placement.py before its capacity views (commit 5626359), kept as the
reference the incremental views must agree with: every pod set placed by a full scan of the nodes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kernel.quantity import is_device_resource
from queues.engine.labels import HOSTNAME_LABEL, first_untolerated, node_affinity_matches, taint_to_string
from queues.engine.model import HEALTH_TAINT_KEYS, Node, NodeSelectorTerm, Taint, Toleration

#: Resources a node may omit (hand-written scenarios often list only devices): not checked when absent.
_OPTIONAL_NODE_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})


class NodeState:
    """A node with its free capacity and health facts."""

    __slots__ = (
        "allocatable",
        "capacity",
        "degraded",
        "health_gap",
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
        self.health_taints = tuple(t for t in node.taints if t.key in HEALTH_TAINT_KEYS or _healthish(t.key))
        self.health_gap = {
            res: cap - self.allocatable.get(res, 0)
            for res, cap in self.capacity.items()
            if is_device_resource(res) and cap > self.allocatable.get(res, 0)
        }
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


class _Domain:
    __slots__ = ("cap", "children", "degraded", "key", "node")

    def __init__(self, key: tuple[str, ...], node: NodeState | None = None) -> None:
        self.key = key
        self.node = node
        self.cap = 0
        self.children: list[_Domain] = []
        # Only nodes are marked: the preference never changes which topology domain is chosen.
        self.degraded = node is not None and node.degraded


class NodePool:
    """All nodes, with the capacity admitted workloads use on each."""

    def __init__(self, nodes: Iterable[Node]) -> None:
        self.nodes: dict[str, NodeState] = {n.name: NodeState(n) for n in sorted(nodes, key=lambda n: n.name)}
        self.enabled = bool(self.nodes)
        self._flavor_cache: dict[tuple[tuple[str, str], ...], list[NodeState]] = {}
        self._static_cache: dict[tuple, _Static] = {}
        self._summary_cache: dict[tuple, tuple[int, dict[str, tuple[int, int]]]] = {}
        self._place_cache: dict[tuple, PlacementResult] = {}
        self.version = 0

    # ------------------------------------------------------------------ membership

    def add_node(self, node: Node) -> None:
        """A node joins (a replay adds nodes at the time they first appeared); an existing name is replaced."""
        self.nodes[node.name] = NodeState(node)
        self.nodes = dict(sorted(self.nodes.items()))
        self._forget()

    def remove_node(self, name: str) -> None:
        """A node leaves; the caller has first released the pods on it."""
        if self.nodes.pop(name, None) is not None:
            self._forget()

    def _forget(self) -> None:
        # Every cache assumes a fixed node set.
        self._flavor_cache.clear()
        self._static_cache.clear()
        self._summary_cache.clear()
        self._place_cache.clear()
        self.version += 1

    # ------------------------------------------------------------------ usage

    def add(self, pods: Iterable[tuple[str, Mapping[str, int]]]) -> None:
        """Account the requests of pods (node name, per-pod requests) to their nodes."""
        for name, per_pod in pods:
            node = self.nodes.get(name)
            if node is None:
                continue
            self.version += 1
            used = node.used
            for res, val in per_pod.items():
                used[res] = used.get(res, 0) + val

    def remove(self, pods: Iterable[tuple[str, Mapping[str, int]]]) -> None:
        """Undo ``add``."""
        for name, per_pod in pods:
            node = self.nodes.get(name)
            if node is None:
                continue
            self.version += 1
            used = node.used
            for res, val in per_pod.items():
                used[res] = used.get(res, 0) - val

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
        key = (tuple(sorted(node_labels.items())), tuple(resources))
        cached = self._summary_cache.get(key)
        if cached is not None and cached[0] == self.version:
            return cached[1]
        out: dict[str, tuple[int, int]] = {}
        nodes = [n for n in self.flavor_nodes(node_labels) if n.ready and not n.unschedulable]
        for res in resources:
            total = 0
            largest = 0
            optional = res in _OPTIONAL_NODE_RESOURCES
            for n in nodes:
                if optional and res not in n.allocatable:
                    total = largest = 1 << 60
                    break
                free = n.allocatable.get(res, 0) - n.used.get(res, 0)
                if free > 0:
                    total += free
                    largest = max(largest, free)
            out[res] = (total, largest)
        self._summary_cache[key] = (self.version, out)
        return out

    def _static(self, req: PodSetRequest, healthy: bool, levels: tuple[str, ...]) -> _Static:
        """The usage-independent part of a placement (node filters and the domain tree), cached."""
        key = (
            tuple(sorted(req.node_labels.items())),
            tuple(sorted(req.node_selector.items())),
            req.node_affinity,
            req.tolerations,
            levels,
            healthy,
        )
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
        static.root, static.leaves, static.internal = _build_tree(static.nodes, levels)
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
        memo = (
            tuple(sorted(req.node_labels.items())),
            tuple(sorted(req.node_selector.items())),
            req.node_affinity,
            req.tolerations,
            req.levels,
            tuple(sorted(req.per_pod.items())),
            req.count,
            req.required,
            req.preferred,
            empty,
            healthy,
            ignore_topology,
            None if empty else self.version,
        )
        cached = self._place_cache.get(memo)
        if cached is not None:
            return cached
        if len(self._place_cache) > 4096:
            self._place_cache.clear()
        result = self._place(req, empty=empty, healthy=healthy, ignore_topology=ignore_topology)
        self._place_cache[memo] = result
        return result

    def _place(self, req: PodSetRequest, *, empty: bool, healthy: bool, ignore_topology: bool) -> PlacementResult:
        levels = () if ignore_topology else req.levels
        static = self._static(req, healthy, levels)
        exclusions = dict(static.exclusions)
        wanted = [(r, v) for r, v in sorted(req.per_pod.items()) if v > 0]
        columns = [static.column(res, healthy) for res, _ in wanted]
        sums = [0] * len(wanted)
        nodes = static.nodes
        for i, leaf in enumerate(static.leaves):
            used = nodes[i].used
            fit = 1 << 20
            blocking = ""
            for j, (res, need) in enumerate(wanted):
                total = columns[j][i]
                if total is None:
                    continue
                free = total if empty else total - used.get(res, 0)
                if free < 0:
                    free = 0
                sums[j] += free
                pods = free // need
                if pods < fit:
                    fit = pods
                    if pods == 0 and not blocking:
                        blocking = res
            if fit <= 0:
                label = f'resource "{blocking}"'
                exclusions[label] = exclusions.get(label, 0) + 1
                fit = 0
            leaf.cap = fit
        free_units = {res: sums[j] for j, (res, _) in enumerate(wanted) if any(c is not None for c in columns[j])}
        for dom in static.internal:
            dom.cap = sum(c.cap for c in dom.children)
        root = static.root
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
            domains = _domains_at(root, candidates_levels[0])
            fit = min(count, max((d.cap for d in domains), default=0))
            best = _best_fit(domains, count)
            if best is not None:
                result_nodes = _fill(best, count)
                used_level = req.required
            elif domains:
                best_key = min(domains, key=lambda d: (-d.cap, d.key)).key
        else:
            for idx in candidates_levels:
                best = _best_fit(_domains_at(root, idx), count)
                if best is not None:
                    result_nodes = _fill(best, count)
                    used_level = levels[idx]
                    break
            if result_nodes is None and root.cap >= count:
                result_nodes = _fill(root, count)
            fit = min(count, root.cap)
        if result_nodes is not None:
            fit = count
        return PlacementResult(
            ok=result_nodes is not None,
            nodes=sorted(result_nodes) if result_nodes is not None else [],
            fit=fit,
            total_nodes=static.total,
            exclusions=exclusions,
            level=used_level,
            free_units=free_units,
            best_domain=best_key,
        )


class _Static:
    __slots__ = ("_columns", "exclusions", "internal", "leaves", "nodes", "root", "total")

    def __init__(self) -> None:
        self._columns: dict[tuple[str, bool], list[int | None]] = {}
        self.total = 0
        self.exclusions: dict[str, int] = {}
        self.nodes: list[NodeState] = []
        self.root = _Domain(())
        self.leaves: list[_Domain] = []
        self.internal: list[_Domain] = []

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


def _build_tree(nodes: list[NodeState], levels: tuple[str, ...]) -> tuple[_Domain, list[_Domain], list[_Domain]]:
    """The domain tree over ``nodes`` (leaves = nodes) and its internal domains deepest first."""
    root = _Domain(())
    index: dict[tuple[str, ...], _Domain] = {(): root}
    depth: dict[int, list[_Domain]] = {0: [root]}
    domain_levels = [lvl for lvl in levels if lvl != HOSTNAME_LABEL]
    leaves = []
    for node in nodes:
        parent = root
        key: tuple[str, ...] = ()
        for i, lvl in enumerate(domain_levels):
            key = (*key, node.labels.get(lvl, ""))
            dom = index.get(key)
            if dom is None:
                dom = _Domain(key)
                index[key] = dom
                parent.children.append(dom)
                depth.setdefault(i + 1, []).append(dom)
            parent = dom
        leaf = _Domain((*key, node.name), node)
        parent.children.append(leaf)
        leaves.append(leaf)
    internal = [d for level in sorted(depth, reverse=True) for d in depth[level]]
    return root, leaves, internal


def _domains_at(root: _Domain, level_idx: int) -> list[_Domain]:
    """Domains at depth ``level_idx + 1`` of the tree (the node leaves for the hostname level)."""
    current = [root]
    for _ in range(level_idx + 1):
        nxt: list[_Domain] = []
        for dom in current:
            if dom.node is not None:
                nxt.append(dom)
            else:
                nxt.extend(dom.children)
        current = nxt
    return current


def _best_fit(domains: list[_Domain], count: int) -> _Domain | None:
    """The fitting domain with the least room (a node without degraded devices first)."""
    fitting = [d for d in domains if d.cap >= count]
    if not fitting:
        return None
    return min(fitting, key=lambda d: (d.degraded, d.cap, d.key))


def _fill(domain: _Domain, count: int) -> list[str]:
    """Assign ``count`` pods inside ``domain`` (which has room for them).

    Nodes with degraded devices are used last: they take only the pods the other nodes cannot hold. Each group is
    filled on as few sub-domains as possible (best-fit on the last one).
    """
    if domain.node is not None:
        return [domain.node.name] * count
    children = [d for d in domain.children if d.cap > 0]
    preferred = [d for d in children if not d.degraded]
    if len(preferred) == len(children):
        return _fill_children(children, count)
    first = _fill_children(preferred, min(count, sum(d.cap for d in preferred)))
    return first + _fill_children([d for d in children if d.degraded], count - len(first))


def _fill_children(children: list[_Domain], count: int) -> list[str]:
    """Assign ``count`` pods over ``children``, fewest first, best-fit on the last one."""
    remaining = count
    out: list[str] = []
    unused = sorted(children, key=lambda d: (-d.cap, d.key))
    while remaining > 0 and unused:
        fitting = [d for d in unused if d.cap >= remaining]
        if fitting:
            best = min(fitting, key=lambda d: (d.cap, d.key))
            out.extend(_fill(best, remaining))
            return out
        biggest = unused.pop(0)
        if biggest.cap <= 0:
            break
        out.extend(_fill(biggest, biggest.cap))
        remaining -= biggest.cap
    return out
