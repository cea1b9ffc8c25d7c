"""Kueue's queues inside the engine: per-ClusterQueue heaps of same-shape groups, parking and waking.

Pending workloads of a ClusterQueue with the same shape share a ``ShapeGroup``; the queue's heap holds each
active group's head. An inadmissible head parks its group (BestEffortFIFO) or blocks the queue
(StrictFIFO) until a release or an admission in the cohort can change the outcome.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .quota import QuotaTree
from .records import PENDING, ClusterQueueInfo, ShapeGroup, WorkloadInfo

if TYPE_CHECKING:
    from .scheduler import Engine


def enqueue(engine: Engine, wl: WorkloadInfo) -> None:
    """Put a workload back in its ClusterQueue as pending (nowhere when it cannot be queued: see ``Engine.blocker``)."""
    wl.state = PENDING
    wl.group = None
    wl.pod_sets = wl.full_pod_sets
    if engine.blocker(wl) is not None or wl.requeue_at is not None:
        # Not queued: it cannot be (see ``Engine.blocker``), or it waits out a requeue backoff (``pods_ready``).
        return
    cq = engine.cqs[wl.cq]  # type: ignore[index]
    group = cq.groups.get(wl.shape)
    if group is None:
        group = ShapeGroup(cq, wl.shape)
        cq.groups[wl.shape] = group
        group.active = True
    wl.group = group
    item = (-wl.priority, wl.ts, wl.key, wl)
    was_head = group.items[0] if group.items else None
    heapq.heappush(group.items, item)
    if cq.strict:
        cq.blocked = False
    if not group.active:
        if cq.strict:
            activate(engine, group)
        return
    if was_head is None or item[:3] < was_head[:3]:
        push_group(engine, group)


def push_group(engine: Engine, group: ShapeGroup) -> None:
    """Push the group's head onto its ClusterQueue's heap (older entries for the group become stale)."""
    head = group.items[0]
    group.version += 1
    cq = group.cq
    heapq.heappush(cq.heap, (head[0], head[1], head[2], next(engine.heap_seq), group.version, group))
    engine.queued.add(cq.name)


def activate(engine: Engine, group: ShapeGroup) -> None:
    """Make a parked group eligible again."""
    group.active = True
    group.quota_blocked = False
    group.quota_wait = None
    group.cq.wake_memo = None
    if group.items:
        push_group(engine, group)


def park(engine: Engine, group: ShapeGroup) -> None:
    """Take a group out of its queue until something that could change its outcome happens."""
    if not group.active:
        return
    group.active = False
    memo = group.fit_memo
    if memo is not None and memo[0] == group.cq.root.usage_version and memo[1] == engine.pool.version:
        # ``may_fit`` just judged it at this very state: keep what it found blocks the group.
        group.quota_blocked, group.quota_wait = memo[3], memo[4]
    else:
        group.quota_blocked = False  # parked by a full evaluation: the reason is not known here
        group.quota_wait = None
    group.version += 1
    group.cq.parked.append(group)
    group.cq.wake_memo = None


def reactivate_cq(engine: Engine, cq: ClusterQueueInfo, quota_changed: bool = True) -> None:
    """Wake a ClusterQueue: unblock it and activate its parked groups (without preemption, only those that may fit).

    ``quota_changed`` False says only node capacity was freed (a release in another cohort): a group whose last
    check failed on quota stays parked without a new check, since its cohort's quota did not change.
    """
    cq.blocked = False
    if cq.parked:
        parked, cq.parked = cq.parked, []
        still = cq.parked
        quick = not cq.preempts
        released = cq.root.released
        for group in parked:
            if group.active:
                continue
            if quick:
                if group.quota_blocked:
                    if not quota_changed:
                        still.append(group)
                        continue
                    # Still short: a ClusterQueue's available quota grows by at most what is released in its
                    # tree (``QuotaTree``), so a flavor that was short by ``s`` cannot fit before ``s`` more has
                    # been released there (most parked groups stop here).
                    wait = group.quota_wait
                    if wait is not None:
                        for fr, threshold in wait:
                            if released.get(fr, 0) >= threshold:
                                break
                        else:
                            still.append(group)
                            continue
                if not may_fit(engine, cq, group):
                    still.append(group)
                    continue
            activate(engine, group)
        cq.wake_memo = None


def _fit_plan(engine: Engine, cq: ClusterQueueInfo, wl: WorkloadInfo) -> tuple | None:
    """What ``may_fit`` checks for a shape: (per flavor: its ((flavor, resource), request) pairs and the key of
    its nodes' ``NodePool.summary_for``; per resource (name, total request, per-pod request); the resource names).

    None when the pre-check cannot decide (several pod sets, or requests spread over resource groups): the
    group is then always woken. An empty flavor list means the shape never fits this ClusterQueue.
    """
    single = cq.single_pod_set_requests(wl)
    if single is None:
        return None
    ps, requests = single
    if ps.spec.min_count is not None:
        return None  # partial admission: fewer pods than the full count may fit
    groups = {cq.rg_of.get(r) for r, v in requests.items() if v > 0}
    if len(groups) != 1:
        return None
    (idx,) = groups
    wanted = tuple((r, v) for r, v in requests.items() if v > 0)
    checks = []
    for fname in cq.rgs[idx].flavors if idx is not None else ():
        flavor = engine.flavors.get(fname)
        summary_key = (tuple(sorted(flavor.node_labels.items())), tuple(ps.per_pod)) if flavor is not None else None
        checks.append((tuple(((fname, r), v) for r, v in wanted), summary_key))
    need = tuple((r, v * ps.count, v) for r, v in ps.per_pod.items())
    return (tuple(checks), need, tuple(ps.per_pod))


def may_fit(engine: Engine, cq: ClusterQueueInfo, group: ShapeGroup) -> bool:
    """Cheap, exact pre-check for a parked group (no preemption, no nodes): can its head fit any flavor now?

    Without preemption and placement a pod set's outcome depends only on whether some flavor has
    ``request <= available`` for every resource, so a parked group that fails this stays parked without
    a full evaluation (Kueue would evaluate and park it again with the same result). The check depends only
    on the group's shape, so it is prepared once per group.
    """
    items = group.items
    if items:
        first = items[0][3]
        if first.state != PENDING or first.group is not group:
            items = group.prune()
    if not items:
        group.quota_blocked = False
        return False
    version = cq.root.usage_version
    pool_version = engine.pool.version
    memo = group.fit_memo
    if memo is not None and memo[0] == version and memo[1] == pool_version:
        # Same quota usage in its tree and same node usage: the same answer (it depends on the shape only).
        group.quota_blocked, group.quota_wait = memo[3], memo[4]
        return memo[2]
    fits = _may_fit(engine, cq, group, items[0][3])
    group.fit_memo = (version, pool_version, fits, group.quota_blocked, group.quota_wait)
    return fits


def _may_fit(engine: Engine, cq: ClusterQueueInfo, group: ShapeGroup, head: WorkloadInfo) -> bool:
    group.quota_blocked = False
    group.quota_wait = None
    plan = group.fit_plan
    if plan is None:
        plan = _fit_plan(engine, cq, head) or (None,)
        group.fit_plan = plan
    if plan[0] is None:
        return True
    checks, need, resources = plan
    node = cq.node
    # ``QuotaTree.available``'s own cache, read here first (most checks hit it).
    cache = node.available_cache
    version = cq.root.usage_version
    pool = engine.pool
    quota_ok = False
    waits = []
    for needs, summary_key in checks:
        for fr, v in needs:
            cached = cache.get(fr)
            a = cached[1] if cached is not None and cached[0] == version else QuotaTree.available(node, fr)
            if v > a:
                waits.append((fr, v - a))
                break
        else:
            quota_ok = True
            if not pool.enabled or not resources:
                return True
            if summary_key is None:
                continue
            # Placement needs, at least, enough free capacity in total and one node big enough for a pod.
            summary = pool.summary_for(summary_key)
            for r, total, v in need:
                free, largest = summary[r]
                if free < total or largest < v:
                    break
            else:
                return True
    if not quota_ok:
        group.quota_blocked = True
        released = cq.root.released
        group.quota_wait = tuple([(fr, released.get(fr, 0) + short_by) for fr, short_by in waits])
    return False


def on_release(engine: Engine, cq_name: str | None, nodes: Iterable[str] = ()) -> None:
    """Quota or nodes were freed in ``cq_name`` (None: anywhere): wake the queues that could use them."""
    if cq_name is None or cq_name not in engine.cqs:
        for cq in engine.cqs.values():
            reactivate_cq(engine, cq)
        return
    released_in = engine.cqs[cq_name]
    cohort = released_in.cohort_cqs
    node_only: list[ClusterQueueInfo] = []
    if engine.pool.enabled:
        freed = set(nodes)
        if freed:
            # Node capacity is shared across cohorts: wake every queue with a flavor on the freed nodes.
            for cq in released_in.outside_cqs:
                memo = cq.wake_memo
                wake = memo if memo is not None and not cq.blocked and not cq.preempts else _may_wake(cq)
                if wake and cq_nodes(engine, cq) & freed:
                    node_only.append(cq)
    if not node_only:
        # ``cohort_cqs`` is in name order.
        for cq in cohort:
            reactivate_cq(engine, cq)
        return
    for cq in sorted((*cohort, *node_only), key=lambda c: c.name):
        reactivate_cq(engine, cq, quota_changed=cq not in node_only)


def _may_wake(cq: ClusterQueueInfo) -> bool:
    """False when freed node capacity alone cannot change anything for ``cq``: it is not blocked and every
    parked group of it waits for quota (so ``reactivate_cq(..., quota_changed=False)`` would be a no-op)."""
    if cq.blocked or cq.preempts:
        return True
    # Parked groups and their flags change only in ``park``, ``activate`` and ``reactivate_cq``, which forget this.
    if cq.wake_memo is None:
        cq.wake_memo = any(not g.active and not g.quota_blocked for g in cq.parked)
    return cq.wake_memo


def cq_nodes(engine: Engine, cq: ClusterQueueInfo) -> set[str]:
    """Names of the nodes any of the ClusterQueue's flavors can use (cached until nodes change)."""
    cached = engine.cq_node_cache.get(cq.name)
    if cached is None:
        cached = set()
        for rg in cq.rgs:
            for fname in rg.flavors:
                flavor = engine.flavors.get(fname)
                if flavor is not None:
                    cached.update(n.name for n in engine.pool.flavor_nodes(flavor.node_labels))
        engine.cq_node_cache[cq.name] = cached
    return cached


def on_admission(engine: Engine, cq_name: str) -> None:
    """An admission in the cohort may open preemption chances: wake its preempting queues."""
    for cq in engine.cqs[cq_name].cohort_cqs:
        if cq.preempts:
            reactivate_cq(engine, cq)


def next_head(engine: Engine, cq: ClusterQueueInfo) -> WorkloadInfo | None:
    """The ClusterQueue's next head among active groups, dropping stale heap entries; None when empty."""
    heap = cq.heap
    while heap:
        negp, ts, key, _, version, group = heap[0]
        if version != group.version or not group.active:
            heapq.heappop(heap)
            continue
        items = group.items
        if items:
            first = items[0][3]
            if first.state != PENDING or first.group is not group:
                items = group.prune()
        if not items:
            heapq.heappop(heap)
            group.version += 1
            continue
        top = items[0]
        if top[2] != key or top[1] != ts or top[0] != negp:
            heapq.heappop(heap)
            push_group(engine, group)
            continue
        return top[3]
    return None


def queue_head(engine: Engine, cq_name: str) -> WorkloadInfo | None:
    """The first pending workload of a ClusterQueue in queue order, parked or not."""
    best: WorkloadInfo | None = None
    for w in engine.live.values():
        if w.state == PENDING and w.cq == cq_name and w.group is not None:
            if best is None or w.sort_key() < best.sort_key():
                best = w
    return best
