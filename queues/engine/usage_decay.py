"""Fairness that remembers: each ClusterQueue's recent usage, decayed, counted in its share.

Under a Cohort with ``usage_decay`` (``model.UsageDecay``), every ClusterQueue below it carries its *recent usage*
per resource: an exponentially decayed average of what it held, as Kueue's admission fair sharing keeps
``consumedResources`` (KEP-4136; ``pkg/util/admissionfairsharing``): over a time ``Δ`` with usage ``u`` held,
``consumed ← consumed × 0.5^(Δ / half_life) + u × (1 − 0.5^(Δ / half_life))`` — Kueue applies the same step every
``usageSamplingInterval``; the engine applies it exactly between the instants it runs at, since usage only
changes there. An admission adds Kueue's *entry penalty* at once, ``(1 − 0.5^(sampling / half_life)) ×
request``, so a queue admitting many workloads in one instant is ordered behind at once; it is dropped after one
sampling interval, when the decayed average has taken the workload in.

What it changes (``fair_share.share``): the part of the recent usage above the queue's nominal quota (its
*remembered borrowing*) is added to what it borrows now when its dominant resource share is worked out — only
while it borrows now, so quota within nominal is never affected (KAI: "deserved quota still takes precedence").
So among borrowers the one that borrowed more recently comes last for admission and first for preemption, in
fair sharing's tournament and preemption; with fair sharing off, entries that borrow are ordered by it before
priority, and reclaim takes candidates of the queue that borrowed most recently first. Nothing changes for a
queue under no such Cohort: decisions stay identical where the policy is off.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kernel.quantity import is_device_resource

from .fair_share import remembered_share
from .model import ClusterQueue, ClusterState, FlavorResource, UsageDecay
from .quota import QuotaNode, QuotaTree


def decay_factor(elapsed: float, half_life: float) -> float:
    """How much of a past average is left after ``elapsed`` seconds (0 with no half-life: no memory at all)."""
    if half_life <= 0:
        return 0.0
    return 0.5 ** (max(elapsed, 0.0) / half_life)


def duration_words(seconds: float) -> str:
    """A policy's period in words, to a tenth of its largest unit: "7 days", "3.5 days", "12 hours", "90 minutes"."""
    for unit, size in (("day", 86400.0), ("hour", 3600.0), ("minute", 60.0)):
        if seconds >= size:
            text = f"{round(seconds / size, 1):g}"
            return f"{text} {unit}{'' if text == '1' else 's'}"
    return f"{seconds:g} seconds"


def entry_penalty_share(policy: UsageDecay) -> float:
    """Kueue's ``A = 1 − 0.5^(sampling / half_life)``: the share of a request an admission adds at once."""
    return 1.0 - decay_factor(policy.sampling_interval, policy.half_life)


def _per_resource(amounts: Mapping[FlavorResource, int]) -> dict[str, float]:
    out: dict[str, float] = {}
    for (_, resource), value in amounts.items():
        out[resource] = out.get(resource, 0.0) + value
    return out


def scope_of(tree: QuotaTree, policies: Mapping[str, UsageDecay], cq: str) -> QuotaNode | None:
    """The highest Cohort on ``cq``'s path whose policy is set (None: the queue is not under one)."""
    found = None
    for node in tree.cqs[cq].path_to_root():
        if node.name in policies:
            found = node
    return found


class UsageMemory:
    """The recent usage of every ClusterQueue under a Cohort with ``usage_decay``, and its effect on their nodes."""

    __slots__ = ("at", "consumed", "held", "nodes", "penalties", "policy", "scope", "tree")

    def __init__(self, tree: QuotaTree, policies: Mapping[str, UsageDecay], now: float) -> None:
        self.tree = tree
        self.at = now
        self.policy: dict[str, UsageDecay] = {}
        self.scope: dict[str, QuotaNode] = {}
        for name in sorted(tree.cqs):
            top = scope_of(tree, policies, name)
            if top is not None:
                self.scope[name] = top
                self.policy[name] = policies[top.name]
        self.nodes: dict[str, QuotaNode] = {name: tree.cqs[name] for name in self.scope}
        self.consumed: dict[str, dict[str, float]] = {name: {} for name in self.scope}
        self.held: dict[str, dict[str, float]] = {name: {} for name in self.scope}
        #: (drop at, queue, per-resource amount): entry penalties not yet taken in by the average.
        self.penalties: list[tuple[float, str, dict[str, float]]] = []

    @classmethod
    def build(cls, state: ClusterState, tree: QuotaTree, now: float) -> UsageMemory | None:
        """The memory of ``state`` at ``now``, or None when no Cohort has the policy (nothing changes then)."""
        policies = {c.name: c.usage_decay for c in state.cohorts if c.usage_decay is not None}
        if not policies:
            return None
        memory = cls(tree, policies, now)
        if not memory.scope:
            return None
        specs: dict[str, ClusterQueue] = {cq.name: cq for cq in state.cluster_queues}
        for name in memory.scope:
            spec = specs[name]
            memory.consumed[name] = {r: float(v) for r, v in spec.consumed.items()}
        memory.mark()
        # A history as of an earlier instant is brought to ``now`` with the usage the state holds.
        for name in memory.scope:
            since = specs[name].consumed_at
            if since is not None and since < now:
                memory._decay(name, now - since)
        memory.refresh()
        return memory

    # ------------------------------------------------------------------ time

    def _decay(self, name: str, elapsed: float) -> None:
        d = decay_factor(elapsed, self.policy[name].half_life)
        consumed, held = self.consumed[name], self.held[name]
        for resource in set(consumed) | set(held):
            consumed[resource] = consumed.get(resource, 0.0) * d + held.get(resource, 0.0) * (1.0 - d)

    def advance(self, now: float) -> None:
        """Bring every queue's recent usage to ``now``: what each held since the last instant, decayed in."""
        if now <= self.at:
            return
        for name in self.scope:
            self._decay(name, now - self.at)
        self.at = now
        self.penalties = [p for p in self.penalties if p[0] > now]
        self.refresh()

    def mark(self) -> None:
        """Remember the usage every queue holds now (it is held until the next ``advance``)."""
        for name, node in self.nodes.items():
            self.held[name] = _per_resource(node.usage)

    def admitted(self, name: str, usage: Mapping[FlavorResource, int]) -> None:
        """A workload of ``name`` was admitted now: its entry penalty counts at once."""
        policy = self.policy.get(name)
        if policy is None:
            return
        share = entry_penalty_share(policy)
        amount = {r: v * share for r, v in _per_resource(usage).items() if v}
        if amount:
            self.penalties.append((self.at + policy.sampling_interval, name, amount))
            self.refresh([name])

    # ------------------------------------------------------------------ readings

    def recent(self, name: str) -> dict[str, float]:
        """A queue's recent usage per resource, entry penalties included."""
        out = dict(self.consumed.get(name, {}))
        for _, queue, amount in self.penalties:
            if queue == name:
                for resource, value in amount.items():
                    out[resource] = out.get(resource, 0.0) + value
        return out

    def quota(self, node: QuotaNode) -> dict[str, float]:
        """A node's own subtree quota per resource (summed over flavors)."""
        return _per_resource(node.subtree)

    def ratio(self, name: str) -> tuple[float, str] | None:
        """(recent usage ÷ nominal quota, resource) of the queue's most used resource — devices first — or None
        when it is under no policy or used nothing. ``inf`` for usage of a resource it has no quota of."""
        if name not in self.scope:
            return None
        recent = self.recent(name)
        quota = self.quota(self.nodes[name])
        best: tuple[bool, float, str] | None = None
        for resource, used in sorted(recent.items()):
            if used <= 0:
                continue
            nominal = quota.get(resource, 0.0)
            value = used / nominal if nominal > 0 else float("inf")
            candidate = (is_device_resource(resource), value, resource)
            if best is None or candidate[:2] > best[:2]:
                best = candidate
        return None if best is None else (best[1], best[2])

    def refresh(self, names: Iterable[str] | None = None) -> None:
        """Write each queue's remembered borrowing (recent usage above its quota) on its node and on the Cohorts
        between it and its policy's Cohort; bump what caches the shares when a value changed."""
        names = list(self.scope) if names is None else list(names)
        touched: set[int] = set()
        for name in names:
            node = self.nodes[name]
            quota = self.quota(node)
            recent = self.recent(name)
            over = {r: v - quota.get(r, 0.0) for r, v in recent.items() if v - quota.get(r, 0.0) > 1e-12}
            if _set(node, over):
                touched.add(id(node))
            top = self.scope[name]
            cur = node.parent
            while cur is not None and cur is not top:
                members = [n for n in self.nodes if self.scope[n] is top and cur in self.nodes[n].path_to_root()]
                total: dict[str, float] = {}
                for member in members:
                    for r, v in self.recent(member).items():
                        total[r] = total.get(r, 0.0) + v
                cohort_quota = self.quota(cur)
                cohort_over = {r: v - cohort_quota.get(r, 0.0) for r, v in total.items()}
                cohort_over = {r: v for r, v in cohort_over.items() if v > 1e-12}
                if _set(cur, cohort_over):
                    touched.add(id(cur))
                cur = cur.parent
        for name in names:
            node = self.nodes[name]
            root = node.root()
            if root.remembered_keys is None:
                root.remembered_keys = {}
            root.remembered_keys[name] = remembered_share(node)
            if id(node) in touched:
                root.usage_version += 1

    def export(self) -> dict[str, dict[str, float]]:
        """Every queue's recent usage (entry penalties included) as of ``at``, for the exported state."""
        return {name: self.recent(name) for name in self.scope}


def _set(node: QuotaNode, over: dict[str, float]) -> bool:
    """Store a node's remembered borrowing; True when it changed (its ``changes`` is bumped then)."""
    value = over or None
    if node.remembered == value:
        return False
    node.remembered = value
    node.changes += 1
    return True
