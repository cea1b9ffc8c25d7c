"""Kueue's scheduling cycle: nominate every ClusterQueue head, order the entries, admit or preempt."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from . import messages as msg
from . import pods_ready
from .decisions import AdmissionDecision, PodSetAssignment, Preemption
from .fair_sharing import tournament
from .flavor_assignment import assign, assign_if_fits, quota_fit_plan
from .model import Eviction, FlavorResource
from .partial_admission import search as reduce_counts
from .pod_placement import placement_ok
from .preemption import preemption_targets
from .queueing import may_fit, next_head, on_admission, park, push_group
from .quota import QuotaTree
from .records import (
    ADMITTED,
    EVICTING,
    PENDING,
    PS_FIT,
    PS_PREEMPT,
    RESERVED,
    ClusterQueueInfo,
    CycleEntry,
    CycleOutcome,
    FlavorAssignment,
    WorkloadInfo,
)
from .victims import quota_fits, remove_many, restore_many

if TYPE_CHECKING:
    from .scheduler import Engine


def _pinned(engine: Engine, cq: ClusterQueueInfo) -> WorkloadInfo | None:
    """The preemptor that holds ``cq``'s head while its preemption is under way (None: none, or it ended)."""
    wl = engine.preemptors.get(cq.name)
    if wl is None:
        return None
    if wl.state == PENDING and wl.cq == cq.name and wl.group is not None and wl.group.active:
        return wl
    del engine.preemptors[cq.name]
    return None


def _reserving(engine: Engine, cq: ClusterQueueInfo) -> WorkloadInfo | None:
    """The StrictFIFO head of a blocked ``cq`` that holds capacity back in every cycle (None: none, or it ended)."""
    wl = engine.reserving.get(cq.name)
    if wl is None:
        return None
    if wl.state == PENDING and wl.cq == cq.name and wl.group is not None:
        return wl
    del engine.reserving[cq.name]
    return None


def find_heads(engine: Engine) -> list[tuple[ClusterQueueInfo, WorkloadInfo]]:
    """The head of every ClusterQueue that can admit now.

    A workload that issued preemptions stays its queue's head until it is admitted or inadmissible, so a
    parked workload woken by its victims' release cannot take the head and let the freed capacity go to
    another queue (which the preemptor would reclaim again at the same instant, endlessly).
    """
    out = []
    cqs = engine.cqs
    queued = engine.queued
    preemptors = engine.preemptors
    # Name order, as ``engine.cqs``; only queues with heap entries can have a head.
    for name in sorted(queued):
        cq = cqs[name]
        if not cq.heap:
            queued.discard(name)
            continue
        if cq.blocked:
            if engine.reserving:
                reserving = _reserving(engine, cq)
                if reserving is not None:
                    # Kueue requeues a StrictFIFO head at once: it competes (and holds capacity) in every cycle.
                    out.append((cq, reserving))
            continue
        head = _pinned(engine, cq) if preemptors else None
        if head is None:
            head = next_head(engine, cq)
        if head is not None:
            out.append((cq, head))
        elif not cq.heap:
            queued.discard(name)
    return out


def run_cycle(
    engine: Engine, now: float, heads: list[tuple[ClusterQueueInfo, WorkloadInfo]] | None = None
) -> CycleOutcome:
    """One Kueue scheduling cycle: nominate every head, order, admit or preempt, re-checking fit."""
    engine.now = now
    memory = engine.memory
    if memory is not None:
        memory.advance(now)
        memory.mark()
    outcome = CycleOutcome()
    reduced: list[WorkloadInfo] = []
    entries = _nominate(engine, heads if heads is not None else find_heads(engine), outcome, reduced)
    if not entries:
        # Every head was found inadmissible at nomination (parked): nothing to order or admit.
        return outcome
    # Kueue's order; among equal borrowing and priority a preemptor from an earlier cycle goes first, so
    # the capacity its victims freed is not taken by a peer that would then be reclaimed in turn.
    pinned = {id(w) for w in engine.preemptors.values()}

    def classic(e: CycleEntry) -> tuple:
        return (e.assignment.borrow, -e.wl.priority, id(e.wl) not in pinned, e.wl.ts, e.wl.key)

    if memory is not None:
        # Fairness that remembers: among entries that borrow, the queue that borrowed less recently first.
        remembered = classic

        def classic(e: CycleEntry) -> tuple:
            borrow = e.assignment.borrow
            keys = e.cq.root.remembered_keys
            value = keys.get(e.cq.name, 0.0) if borrow and keys is not None else 0.0
            return (borrow, value, *remembered(e)[1:])

    if engine.fair is None:
        entries.sort(key=classic)
        ordered: Iterable[CycleEntry] = entries
    else:
        ordered = tournament(entries, classic, lambda e: (id(e.wl) not in pinned, e.wl.ts, e.wl.key))
    held = engine.held
    if held is not None:
        # waitForPodsReady.blockAdmission stopped Kueue's scheduler at this entry: it goes first once unblocked.
        first = [e for e in entries if e.wl is held]
        if not first:
            engine.held = held = None
        else:
            ordered = [*first, *[e for e in ordered if e.wl is not held]]
    preempted: dict[str, WorkloadInfo] = {}
    reservations: list[tuple[ClusterQueueInfo, dict[FlavorResource, int], list[tuple[str, dict[str, int]]]]] = []
    admitted_cqs: set[str] = set()
    changed = False
    # Nominated entries not yet processed, per cohort tree: a reservation can only hold up one of those.
    waiting: dict[int, int] = {}
    for e in entries:
        if e.nominated:
            tree = id(e.cq.root)
            waiting[tree] = waiting.get(tree, 0) + 1
    for e in ordered:
        wl, cq, assignment = e.wl, e.cq, e.assignment
        tree = id(cq.root)
        if e.nominated:
            waiting[tree] -= 1
        if not e.nominated:
            if cq.strict and not e.quick:
                # Kept in every cycle while it finds no candidates (``find_heads``), not only in this one.
                if not e.targets and unreclaimable_reservation(cq, assignment):
                    engine.reserving[cq.name] = wl
                else:
                    engine.reserving.pop(cq.name, None)
            reserved = (
                unreclaimable_reservation(cq, assignment)
                if not e.quick and not e.targets and waiting.get(tree, 0) > 0
                else {}
            )
            if reserved:
                # Kueue's reserveCapacityForUnreclaimablePreempt: hold the capacity for the rest of the cycle.
                QuotaTree.add_usage(cq.node, reserved)
                reservations.append((cq, reserved, []))
                changed = True
            _inadmissible(engine, e.wl, e.cq, outcome)
            if engine.preemptors.get(cq.name) is wl:
                del engine.preemptors[cq.name]
            continue
        if e.targets and any(t.key in preempted for t, _ in e.targets):
            wl.note = {"kind": "overlap", "message": msg.OVERLAPPING_TARGETS}
            continue
        victims = [*preempted.values(), *[t for t, _ in e.targets]] if preempted or e.targets else []
        nodes = _fits_now(engine, e, victims, changed)
        if nodes is None:
            wl.note = {"kind": "no_longer_fits", "message": msg.NO_LONGER_FITS}
            continue
        if e.targets:
            pods = [
                (n, ps.per_pod)
                for ps, ns in zip(wl.pod_sets, nodes or [[]] * len(wl.pod_sets), strict=False)
                for n in ns
            ]
            for target, _ in e.targets:
                preempted[target.key] = target
            QuotaTree.add_usage(cq.node, assignment.usage)
            engine.pool.add(pods)
            reservations.append((cq, assignment.usage, pods))
            changed = True
            engine.preemptors[cq.name] = wl
            if engine.reserving:
                engine.reserving.pop(cq.name, None)
            issued = _issue_preemptions(engine, wl, cq, e.targets)
            outcome.preemptions.extend(issued)
            wl.note = {"kind": "preempting", "count": len(e.targets), "message": assignment.message()}
            continue
        if engine.not_ready and pods_ready.blocking(engine):
            # Kueue's scheduler waits here until every admitted workload is Ready, then admits this one.
            wl.note = {"kind": "waiting_for_pods_ready", "message": pods_ready.BLOCK_MESSAGE}
            engine.held = wl
            continue
        decision = _admit(engine, wl, cq, assignment, nodes or [[] for _ in wl.pod_sets])
        if engine.preemptors.get(cq.name) is wl:
            del engine.preemptors[cq.name]
        if engine.held is wl:
            engine.held = None
        if engine.reserving:
            engine.reserving.pop(cq.name, None)
        changed = True
        outcome.admitted.append(decision)
        admitted_cqs.add(cq.name)
    for cq, usage, pods in reservations:
        QuotaTree.remove_usage(cq.node, usage)
        engine.pool.remove(pods)
    for wl in reduced:
        if wl.state == PENDING:
            wl.pod_sets = wl.full_pod_sets  # a reduction tried but not admitted: the next cycle searches again
    for name in sorted(admitted_cqs):
        on_admission(engine, name)
    if memory is not None:
        memory.mark()
    return outcome


def _nominate(
    engine: Engine,
    heads: list[tuple[ClusterQueueInfo, WorkloadInfo]],
    outcome: CycleOutcome,
    reduced: list[WorkloadInfo] | None = None,
) -> list[CycleEntry]:
    """Kueue's nomination: every head's flavor assignment and, when it needs preemption, its targets."""
    entries: list[CycleEntry] = []
    # Without preemption a head that fails ``may_fit`` is inadmissible (an exact shortcut). It still needs its full
    # assignment when that could reserve capacity (``unreclaimable_reservation``) that another head of its cohort
    # tree might otherwise take: one that passes, or whose queue preempts (only those can be admitted).
    quick: list[bool] = []
    live: set[int] = set()
    for cq, wl in heads:
        group = wl.group
        failed = not cq.preempts and group is not None and not may_fit(engine, cq, group)
        if failed and wl.reducible:
            failed = False  # ``may_fit`` checks the full counts; fewer pods may fit
        quick.append(failed)
        if not failed:
            live.add(id(cq.root))
    fair = engine.fair is not None
    if fair and not live:
        return _all_inadmissible(engine, heads, outcome)
    for i, (cq, wl) in enumerate(heads):
        failed = quick[i]
        wl.note = None
        if failed:
            if fair:
                if id(cq.root) not in live:
                    # Fair sharing's order reads every head's usage and borrowing (not its placement): it stays in
                    # the tournament with its quota assignment and is found inadmissible in its turn. With no head
                    # of its tree that may be admitted, its reservation could hold nothing up.
                    entries.append(
                        CycleEntry(wl, cq, assign(engine, wl, cq, place=False, explain=False), [], False, quick=True)
                    )
                    continue
            elif not (id(cq.root) in live and _may_reserve(cq, wl)):
                _inadmissible(engine, wl, cq, outcome)
                continue
        assignment, mode = _assign(engine, wl, cq)
        targets: list[tuple[WorkloadInfo, str]] = []
        nominated = False
        if mode == PS_FIT:
            nominated = True
        elif mode == PS_PREEMPT:
            targets = preemption_targets(engine, wl, cq, assignment)
            nominated = bool(targets)
        if not nominated and wl.reducible:
            found = reduce_counts(engine, wl, cq, _targets_finder(engine, wl, cq))
            if found is not None:
                assignment, targets, pod_sets = found
                wl.pod_sets = pod_sets  # kept while the cycle admits it; restored at its end otherwise
                nominated = True
                if reduced is not None:
                    reduced.append(wl)
        entries.append(CycleEntry(wl, cq, assignment, targets, nominated))
    return entries


def _targets_finder(
    engine: Engine, wl: WorkloadInfo, cq: ClusterQueueInfo
) -> Callable[[FlavorAssignment], list[tuple[WorkloadInfo, str]]]:
    """The preemption targets of ``wl``'s assignments in ``cq`` (for a partial admission's search)."""

    def targets_of(assignment: FlavorAssignment) -> list[tuple[WorkloadInfo, str]]:
        return preemption_targets(engine, wl, cq, assignment)

    return targets_of


def _all_inadmissible(
    engine: Engine, heads: list[tuple[ClusterQueueInfo, WorkloadInfo]], outcome: CycleOutcome
) -> list[CycleEntry]:
    """Park every head when none may be admitted (fair sharing); no entry is left for the tournament.

    The tournament would process them one by one with their quota assignments, and none changes the usage or the
    nodes (a quick head holds no capacity back), so each ends parked as in any order: only ``outcome.parked``'s
    order differs.
    """
    for cq, wl in heads:
        _inadmissible(engine, wl, cq, outcome)
        if engine.preemptors.get(cq.name) is wl:
            del engine.preemptors[cq.name]
    return []


def unreclaimable_reservation(cq: ClusterQueueInfo, assignment: FlavorAssignment) -> dict[FlavorResource, int]:
    """What a head that needs preemption but has no candidates holds for the rest of the cycle (Kueue's
    ``resourcesToReserve``, pkg/scheduler/scheduler.go); nothing when its queue can always reclaim.

    A ClusterQueue whose ``reclaimWithinCohort`` is not ``Any`` cannot count on taking its nominal quota back
    later, so the capacity its head would use is reserved: no other queue of the cohort borrows it in this
    cycle (that queue's head then "no longer fits"). Within nominal quota it reserves up to its unused nominal;
    when borrowing, the whole request, capped by its borrowingLimit.
    """
    if assignment.mode != PS_PREEMPT or cq.spec.preemption.reclaim_within_cohort == "Any":
        return {}
    usage = cq.node.usage
    out: dict[FlavorResource, int] = {}
    for fr, val in assignment.usage.items():
        quota = cq.quotas.get(fr)
        nominal = quota.nominal if quota is not None else 0
        if assignment.borrow > 0:
            limit = quota.borrowing_limit if quota is not None else None
            amount = val if limit is None else min(val, nominal + limit - usage.get(fr, 0))
        else:
            amount = min(val, nominal - usage.get(fr, 0))
        if amount > 0:
            out[fr] = amount
    return out


def _may_reserve(cq: ClusterQueueInfo, wl: WorkloadInfo) -> bool:
    """True when the head could need a capacity reservation (so the quick inadmissible shortcut must not apply).

    A reservation needs an assignment that asks for preemption: within the queue's nominal quota, or reclaimable
    in a nested cohort. The queue then has unused nominal quota in a requested resource, or sits below a cohort
    that has a parent.
    """
    if cq.spec.preemption.reclaim_within_cohort == "Any" or cq.node.parent is None:
        return False
    if cq.node.parent.parent is not None:
        return True
    usage = cq.node.usage
    wanted = {r for ps in wl.pod_sets for r in ps.total}
    return any(fr[1] in wanted and usage.get(fr, 0) < q.nominal for fr, q in cq.quotas.items())


def _assign(engine: Engine, wl: WorkloadInfo, cq: ClusterQueueInfo) -> tuple[FlavorAssignment, int]:
    """The head's flavor assignment and its mode, reusing its group's last one that did not fit when nothing
    changed since.

    For a queue that does not preempt, the assignment depends only on the shape, the quota usage of its tree
    and — once quota fits — the nodes' usage (their versions); one that needs preemption looks at other
    workloads: not reused.
    """
    group = wl.group
    if cq.preempts or group is None:
        result = assign(engine, wl, cq, defer_nodes=True, explain=False)
        return result, result.mode
    root = cq.root
    pool = engine.pool
    memo = group.assign_memo
    if memo is not None and memo[0] == root.usage_version and memo[1] in (None, pool.version, -pool.nodes_version - 1):
        return memo[2], memo[3]
    plan = group.quota_plan
    if plan is None:
        plan = group.quota_plan = quota_fit_plan(engine, wl, cq) or (None,)
    found = assign_if_fits(engine, wl, cq, plan, defer_nodes=True) if plan[0] is not None else None
    result = found if found is not None else assign(engine, wl, cq, defer_nodes=True, explain=False)
    mode = result.mode
    if mode == PS_FIT:
        group.assign_memo = None
    else:
        # Read the versions after: assign tries placements and undoes them, which counts as changes. An
        # assignment that failed on quota never looked at the nodes: it holds whatever they do (None); one
        # that only probed an empty cluster holds while no node joins or leaves (a negative key).
        nodes = {"": None, "empty": -pool.nodes_version - 1, "usage": pool.version}[result.placement_read]
        group.assign_memo = (root.usage_version, nodes, result, mode)
    return result, mode


def _fits_now(engine: Engine, e: CycleEntry, victims: list[WorkloadInfo], changed: bool) -> list[list[str]] | None:
    """Re-check a nominated entry after what the cycle did so far: nodes per pod set, None if it no longer fits."""
    if not changed and not victims:
        # Nothing moved since nomination: its fit and node placement still hold.
        if not engine.pool.enabled:
            return []
        if e.assignment.nodes_deferred:
            return placement_ok(engine, e.wl, e.cq, e.assignment)
        return [list(p.nodes) for p in e.assignment.pod_sets]
    remove_many(engine, victims)
    nodes: list[list[str]] | None = []
    fits = quota_fits(e.cq, e.assignment.usage, True)
    if fits and engine.pool.enabled:
        nodes = placement_ok(engine, e.wl, e.cq, e.assignment)
        fits = nodes is not None
    restore_many(engine, victims)
    return nodes if fits else None


def _inadmissible(engine: Engine, wl: WorkloadInfo, cq: ClusterQueueInfo, outcome: CycleOutcome) -> None:
    wl.note = {"kind": "inadmissible"}
    if cq.strict:
        if not cq.blocked:
            # A blocked queue's head evaluated again (it holds capacity back every cycle) changes nothing.
            outcome.parked.append(wl.key)
        cq.blocked = True
    else:
        outcome.parked.append(wl.key)
        if wl.group is not None:
            park(engine, wl.group)


def _issue_preemptions(
    engine: Engine, wl: WorkloadInfo, cq: ClusterQueueInfo, targets: list[tuple[WorkloadInfo, str]]
) -> list[Preemption]:
    out = []
    for target, reason in targets:
        if target.state == EVICTING:
            continue
        victim_cq = engine.cqs[target.cq]  # type: ignore[index]
        text = msg.preempted(wl.spec.uid, wl.spec.job_uid, reason, cq.path, victim_cq.path)
        target.state = EVICTING
        engine.evicting.add(target.key)
        target.eviction = Eviction(reason=reason, message=text, preemptor=wl.key, issued_at=engine.now)
        target.preempted_by = wl.key
        out.append(Preemption(target.key, wl.key, reason, text, victim_cq.name, cq.name))  # type: ignore[arg-type]
    return out


def _admit(
    engine: Engine, wl: WorkloadInfo, cq: ClusterQueueInfo, assignment: FlavorAssignment, nodes: list[list[str]]
) -> AdmissionDecision:
    pod_sets = []
    pods: list[tuple[str, dict[str, int]]] = []
    for ps, psa, ns in zip(wl.pod_sets, assignment.pod_sets, nodes, strict=False):
        pod_sets.append(PodSetAssignment(ps.name, ps.count, dict(psa.flavors), dict(psa.usage), tuple(ns)))
        pods.extend((n, ps.per_pod) for n in ns)
    borrowing = assignment.borrow > 0
    QuotaTree.add_usage(cq.node, assignment.usage)
    if engine.memory is not None:
        engine.memory.admitted(cq.name, assignment.usage)
    engine.pool.add(pods)
    engine.dirty.add(cq.name)
    wl.usage = dict(assignment.usage)
    wl.pods = pods
    wl.assignment = pod_sets
    wl.admitted_at = engine.now
    wl.borrowing = borrowing
    wl.pending_checks = engine.pending_checks(cq, wl, pod_sets)
    wl.state = RESERVED if wl.pending_checks else ADMITTED
    wl.eviction = None
    wl.note = None
    if engine.pods_ready_config is not None:
        pods_ready.admitted(engine, wl, engine.now)
    cq.admitted[wl.key] = wl
    group = wl.group
    wl.group = None
    if group is not None and group.active:
        items = group.prune()
        if items:
            push_group(engine, group)
    return AdmissionDecision(
        workload=wl.key,
        cluster_queue=cq.name,
        pod_sets=tuple(pod_sets),
        borrowing=borrowing,
        pending_checks=wl.pending_checks,
        message=msg.quota_reserved(cq.name),
    )
