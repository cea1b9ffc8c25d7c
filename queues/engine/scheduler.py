"""The admission engine: Kueue's queues, flavor assignment, preemption and scheduling cycle, plus placement.

``Engine`` holds a mutable working copy of a ``ClusterState`` with incremental usage accounting (per
ClusterQueue and cohort, per node) so that cycles, replays and diagnoses are cheap. Nothing here reads
the wall clock; iteration orders are fixed (sorted names, priority/time/key orderings), so the same
input always yields the same decisions.

The work is split by responsibility: ``records`` (the working records and constants), ``queueing`` (queue
heaps, parking, waking), ``flavor_assignment``, ``pod_placement`` (Kueue's TAS step), ``victims`` and
``preemption`` (with ``fair_sharing``), and ``cycle`` (the scheduling cycle). This module keeps the state,
its loading and the workload lifecycle (submit, finish, evictions, stopped queues, node changes, export).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from itertools import count as _counter

from . import messages as msg
from . import pods_ready
from .cycle import find_heads, run_cycle
from .decisions import QUEUE_STOP_REASONS, PodSetAssignment, QueueStopEviction
from .fair_share import share
from .labels import NAMESPACE_NAME_LABEL, selector_matches
from .model import (
    Admission,
    AdmissionCheck,
    ClusterQueue,
    ClusterState,
    Eviction,
    FlavorResource,
    LocalQueue,
    Node,
    PodSetAdmission,
    QuotaHold,
    ResourceFlavor,
    Topology,
    WaitForPodsReady,
    Workload,
)
from .placement import NodePool
from .pod_placement import place_all
from .queueing import enqueue, on_admission, on_release
from .quota import QuotaTree
from .records import (
    ADMITTED,
    DELETED,
    EVICTING,
    FINISHED,
    PENDING,
    RESERVED,
    ClusterQueueInfo,
    CycleOutcome,
    PodSetFlavors,
    PodSetInfo,
    WorkloadInfo,
)
from .reservations import HoldOutcome, hold_quota, in_force
from .usage_decay import UsageMemory

__all__ = [
    "ADMITTED",
    "DELETED",
    "EVICTING",
    "FINISHED",
    "PENDING",
    "RESERVED",
    "CycleOutcome",
    "Engine",
    "engines_built",
]

#: How many ``Engine``s this process has built (``engines_built``).
_BUILT = [0]


def engines_built() -> int:
    """How many ``Engine``s this process has built: each explain, settle and replay builds one (tests and
    benchmarks count them to show a page view builds none)."""
    return _BUILT[0]


class Engine:
    """A working copy of a cluster state that runs Kueue scheduling cycles."""

    # ------------------------------------------------------------------ configuration

    def __init__(self, state: ClusterState, now: float = 0.0) -> None:
        _BUILT[0] += 1
        self.now = now
        self.flavors: dict[str, ResourceFlavor] = {f.name: f for f in state.flavors}
        self.topologies: dict[str, Topology] = {t.name: t for t in state.topologies}
        self.admission_checks: dict[str, AdmissionCheck] = {a.name: a for a in state.admission_checks}
        self.namespaces: dict[str, dict[str, str]] = {}
        for ns in state.namespaces:
            labels = dict(ns.labels)
            labels.setdefault(NAMESPACE_NAME_LABEL, ns.name)
            self.namespaces[ns.name] = labels
        self.local_queues: dict[tuple[str, str], LocalQueue] = {(q.namespace, q.name): q for q in state.local_queues}
        #: Whether any queue has a stopPolicy (only then can ``drain`` find anything to do).
        self.has_stopped_queues = any(q.stop_policy != "None" for q in state.local_queues) or any(
            c.stop_policy != "None" for c in state.cluster_queues
        )
        #: The reservations' holds in force at ``now`` and what each moved (``reservations``); none: the policy as is.
        self.holds: tuple[QuotaHold, ...] = in_force(state.reservations, now) if state.reservations else ()
        self.hold_outcomes: tuple[HoldOutcome, ...] = ()
        cluster_queues = state.cluster_queues
        if self.holds:
            held = hold_quota(state.cluster_queues, state.cohorts, self.holds)
            cluster_queues = held.cluster_queues
            self.hold_outcomes = held.outcomes
            self.quota = QuotaTree(held.cluster_queues, held.cohorts)
        else:
            self.quota = QuotaTree(state.cluster_queues, state.cohorts)
        self.fair = state.fair_sharing
        #: Kueue's waitForPodsReady (None: pods count as Ready once admitted; ``pods_ready`` is not consulted).
        self.pods_ready_config: WaitForPodsReady | None = state.wait_for_pods_ready
        #: Keys of workloads holding quota whose pods are not all Ready yet (only with ``pods_ready_config``).
        self.not_ready: set[str] = set()
        #: StrictFIFO heads that need preemption, found no candidates and hold capacity back in every cycle.
        self.reserving: dict[str, WorkloadInfo] = {}
        #: The workload blockAdmission held back when it was about to be admitted: first once admission resumes.
        self.held: WorkloadInfo | None = None
        #: Whether a workload carries the portal's preemption protection (only then can protection change a decision).
        self.has_protection = any(w.protection is not None for w in state.workloads)
        #: Set while explaining what preemption would do without the protections (``reasons``): candidates then
        #: include protected workloads.
        self.ignore_protection = False
        self.pool = NodePool(state.nodes)
        self.cqs: dict[str, ClusterQueueInfo] = {}
        for spec in sorted(cluster_queues, key=lambda c: c.name):
            self.cqs[spec.name] = self._compile_cq(spec)
        for cq in self.cqs.values():
            cq.cohort_cqs = [self.cqs[name] for name in sorted(self.quota.cohort_cqs(cq.name))]
            members = {c.name for c in cq.cohort_cqs}
            cq.outside_cqs = [c for c in self.cqs.values() if c.name not in members]
        self.workloads: dict[str, WorkloadInfo] = {}
        #: The workloads not finished (``workloads`` keeps the finished ones for reports): what scans walk.
        self.live: dict[str, WorkloadInfo] = {}
        self.cq_node_cache: dict[str, set[str]] = {}
        self.flavor_checks: dict[tuple, tuple[str, str] | None] = {}
        #: ``pod_placement.podset_request``'s node requests shared by pod sets of the same shape.
        self.podset_requests: dict[tuple, tuple] = {}
        self.evicting: set[str] = set()
        self.dirty: set[str] = set()
        self.heap_seq = _counter()
        #: Names of the ClusterQueues whose heap may hold entries (``cycle.find_heads`` looks at these only).
        self.queued: set[str] = set()
        self.spec_state = state
        unplaced: list[WorkloadInfo] = []
        for wspec in sorted(state.workloads, key=lambda w: w.key):
            wl = self._add(wspec)
            if wl.state in (RESERVED, ADMITTED, EVICTING) and self.pool.enabled and not wl.pods:
                unplaced.append(wl)
        for wl in sorted(unplaced, key=lambda w: (w.admitted_at or 0.0, w.key)):
            self._place_existing(wl)
        if self.pods_ready_config is not None:
            pods_ready.load(self, now)
        for cq in self.cqs.values():
            self._mark_borrowing(cq)
        # A preemptor keeps its ClusterQueue's head until it is admitted or found inadmissible (see heads()).
        self.preemptors: dict[str, WorkloadInfo] = {}
        # Only evicting workloads name a preemptor to pin: sort those, not every workload.
        evicting = [wl for wl in self.workloads.values() if wl.state == EVICTING]
        for wl in sorted(evicting, key=lambda w: w.key):
            preemptor = self.workloads.get(wl.eviction.preemptor or "") if wl.eviction is not None else None
            if preemptor is not None and preemptor.state == PENDING and preemptor.cq:
                self.preemptors.setdefault(preemptor.cq, preemptor)
        #: Fairness that remembers (Cohorts with ``usage_decay``); None where no Cohort has it.
        self.memory = UsageMemory.build(state, self.quota, now)

    def _compile_cq(self, spec: ClusterQueue) -> ClusterQueueInfo:
        cq = ClusterQueueInfo(spec, self.quota.cqs[spec.name])
        flavor_names = [f for rg in cq.rgs for f in rg.flavors]
        missing = sorted({f for f in flavor_names if f not in self.flavors})
        causes = []
        if spec.terminating:
            causes.append("is terminating")
        if cq.stopped:
            causes.append("is stopped")
        if missing:
            causes.append(f"references missing ResourceFlavor(s): {', '.join(missing)}")
        check_missing = sorted(c.name for c in spec.admission_checks if c.name not in self.admission_checks)
        if check_missing:
            causes.append(f"references missing AdmissionCheck(s): {', '.join(check_missing)}")
        check_inactive = sorted(
            c.name
            for c in spec.admission_checks
            if c.name in self.admission_checks and not self.admission_checks[c.name].active
        )
        if check_inactive:
            causes.append(f"references inactive AdmissionCheck(s): {', '.join(check_inactive)}")
        for fname in flavor_names:
            flavor = self.flavors.get(fname)
            if flavor and flavor.topology_name and flavor.topology_name not in self.topologies:
                causes.append(f'there is no Topology "{flavor.topology_name}" for TAS flavor "{fname}"')
        node = cq.node
        for anc in node.path_to_root():
            if anc.name in self.quota.cyclic:
                causes.append("cohort has a cycle")
                break
        cq.inactive = ", ".join(causes)
        cq.tas_only = bool(flavor_names) and all(
            self.flavors.get(f) is not None and self.flavors[f].topology_name for f in flavor_names
        )
        return cq

    # ------------------------------------------------------------------ workloads

    def _resolve_queue(self, wl: WorkloadInfo) -> None:
        spec = wl.spec
        lq = self.local_queues.get((spec.namespace, spec.queue_name))
        wl.lq = lq
        if spec.admission is not None:
            wl.cq = spec.admission.cluster_queue
        elif lq is not None:
            wl.cq = lq.cluster_queue
        else:
            wl.cq = None

    def blocker(self, wl: WorkloadInfo) -> tuple[str, str, str] | None:
        """(kueue_message, kueue_reason, cause) when the workload cannot even be queued, else None."""
        spec = wl.spec
        if not spec.active:
            text = f"{msg.DEACTIVATED} due to {wl.deactivated}" if wl.deactivated else msg.DEACTIVATED
            return text, "Deactivated", "deactivated"
        if spec.admission_gated_by:
            return msg.admission_gated(spec.admission_gated_by), "AdmissionGated", "admission_gated"
        if wl.lq is None:
            return msg.local_queue_missing(spec.queue_name), "Misconfigured", "local_queue_missing"
        if wl.lq.stop_policy in ("Hold", "HoldAndDrain"):
            return msg.local_queue_inactive(spec.queue_name), "Suspended", "local_queue_stopped"
        cq = self.cqs.get(wl.cq or "")
        if cq is None:
            return msg.cluster_queue_missing(wl.cq or ""), "Misconfigured", "cluster_queue_missing"
        if cq.inactive:
            return msg.cluster_queue_inactive(cq.name, cq.stopped), "Suspended", "cluster_queue_inactive"
        labels = self.namespaces.get(spec.namespace, {NAMESPACE_NAME_LABEL: spec.namespace})
        if not selector_matches(cq.spec.namespace_selector, labels):
            return msg.NAMESPACE_MISMATCH, "Misconfigured", "namespace_mismatch"
        if spec.admission_checks and any(state in ("Retry", "Rejected") for state in spec.admission_checks.values()):
            return msg.FAILED_CHECKS, "PendingEvaluation", "failed_checks"
        return None

    def _shape(self, wl: WorkloadInfo) -> tuple:
        parts = []
        for ps in wl.pod_sets:
            spec = ps.spec
            parts.append(
                (
                    ps.name,
                    ps.count,
                    tuple(ps.per_pod.items()),
                    tuple(sorted(spec.node_selector.items())),
                    spec.node_affinity,
                    spec.tolerations,
                    spec.topology,
                    spec.min_count,
                )
            )
        return (wl.priority, tuple(parts))

    def _add(self, spec: Workload) -> WorkloadInfo:
        wl = WorkloadInfo(spec)
        if wl.requeue_at is not None and (self.pods_ready_config is None or wl.requeue_at <= self.now):
            wl.requeue_at = None  # its backoff is over (or nothing holds workloads back)
        self.workloads[wl.key] = wl
        self.live[wl.key] = wl
        self._resolve_queue(wl)
        wl.shape = self._shape(wl)
        if spec.admission is not None:
            self._load_admission(wl, spec.admission)
        else:
            enqueue(self, wl)
        return wl

    def _load_admission(self, wl: WorkloadInfo, admission: Admission) -> None:
        by_name = {p.name: p for p in admission.pod_sets}
        usage: dict[FlavorResource, int] = {}
        assignment = []
        pods: list[tuple[str, dict[str, int]]] = []
        for ps in wl.pod_sets:
            psa = by_name.get(ps.name)
            # Reclaimable pods scale an admitted pod set down; a partial admission keeps its smaller count.
            count = min(psa.count, ps.count) if psa is not None else ps.count
            flavors = dict(psa.flavors) if psa is not None else {}
            ps_usage = {r: v * count for r, v in ps.per_pod.items()}
            if "pods" in flavors and "pods" not in ps_usage:
                # Kueue's admission charges the pod count to a pods quota (as the engine's own decisions do).
                ps_usage["pods"] = count
            for res, val in ps_usage.items():
                flavor = flavors.get(res)
                if flavor is None:
                    continue
                usage[(flavor, res)] = usage.get((flavor, res), 0) + val
            nodes = list(psa.nodes) if psa is not None else []
            for node in nodes:
                pods.append((node, ps.per_pod))
            assignment.append(PodSetAssignment(ps.name, count, flavors, ps_usage, tuple(nodes)))
        wl.assignment = assignment
        wl.usage = usage
        wl.pods = pods
        cq = self.cqs.get(wl.cq or "")
        wl.pending_checks = self.pending_checks(cq, wl, assignment) if cq is not None else ()
        wl.state = EVICTING if wl.eviction is not None else (RESERVED if wl.pending_checks else ADMITTED)
        if wl.eviction is not None:
            wl.preempted_by = wl.eviction.preemptor
            self.evicting.add(wl.key)
        if wl.admitted_at is None:
            wl.admitted_at = wl.created
        qnode = cq.node if cq is not None else None
        if qnode is not None and cq is not None:
            QuotaTree.add_usage(qnode, usage)
            cq.admitted[wl.key] = wl
        self.pool.add(pods)

    def _mark_borrowing(self, cq: ClusterQueueInfo) -> None:
        """Workloads that already hold quota borrow when, in admission order, they take the queue past nominal."""
        running: dict[FlavorResource, int] = {}
        for wl in sorted(cq.admitted.values(), key=lambda w: (w.admitted_at or 0.0, w.key)):
            for fr, val in wl.usage.items():
                running[fr] = running.get(fr, 0) + val
            wl.borrowing = any(running[fr] > cq.node.subtree.get(fr, 0) for fr in wl.usage)

    def _place_existing(self, wl: WorkloadInfo) -> None:
        cq = self.cqs.get(wl.cq or "")
        if cq is None:
            return
        psas = [PodSetFlavors(a.name, a.count, flavors=dict(a.flavors), usage=dict(a.usage)) for a in wl.assignment]
        results = place_all(self, wl, cq, psas)
        if results is None:
            return
        pods: list[tuple[str, dict[str, int]]] = []
        new_assignment = []
        for ps, a, nodes in zip(wl.pod_sets, wl.assignment, results, strict=True):
            pods.extend((n, ps.per_pod) for n in nodes)
            new_assignment.append(replace(a, nodes=tuple(nodes)))
        wl.pods = pods
        wl.assignment = new_assignment
        self.pool.add(pods)

    def pending_checks(
        self, cq: ClusterQueueInfo, wl: WorkloadInfo, assignment: Iterable[PodSetAssignment]
    ) -> tuple[str, ...]:
        """Names of the admission checks the assignment still waits for (rules filtered by flavor), sorted."""
        if not cq.checks:
            return ()
        used = {f for a in assignment for f in a.flavors.values()}
        out = []
        for rule in cq.checks:
            if rule.on_flavors and not used.intersection(rule.on_flavors):
                continue
            if wl.spec.admission_checks.get(rule.name) != "Ready":
                out.append(rule.name)
        return tuple(sorted(out))

    # ------------------------------------------------------------------ cycle

    def heads(self) -> list[tuple[ClusterQueueInfo, WorkloadInfo]]:
        """The head of every ClusterQueue that can admit now (see ``cycle.find_heads``)."""
        return find_heads(self)

    def cycle(self, now: float, heads: list[tuple[ClusterQueueInfo, WorkloadInfo]] | None = None) -> CycleOutcome:
        """One Kueue scheduling cycle: nominate every head, order, admit or preempt, re-checking fit."""
        return run_cycle(self, now, heads)

    # ------------------------------------------------------------------ lifecycle

    def release(self, key: str) -> None:
        """Free a workload's quota and nodes (it finished, or its eviction completed)."""
        wl = self.workloads[key]
        cq = self.cqs.get(wl.cq or "")
        if cq is not None:
            QuotaTree.remove_usage(cq.node, wl.usage)
            cq.admitted.pop(key, None)
        self.pool.remove(wl.pods)
        freed = [n for n, _ in wl.pods]
        wl.usage = {}
        wl.pods = []
        if self.not_ready:
            self.not_ready.discard(key)
        if wl.cq:
            self.dirty.add(wl.cq)
        on_release(self, wl.cq, freed)

    def add_node(self, node: Node) -> None:
        """A node joins the cluster: its capacity is offered to every queue at the next cycle."""
        self.pool.add_node(node)
        self.pool.enabled = True
        self.spec_state = replace(
            self.spec_state, nodes=(*[n for n in self.spec_state.nodes if n.name != node.name], node)
        )
        self.cq_node_cache.clear()
        on_release(self, None)

    def remove_node(self, name: str, now: float) -> list[str]:
        """A node leaves the cluster: workloads with a pod on it lose those pods and are requeued at once.

        As when a node disappears under the simulated backend, the workload is evicted without a checkpoint and
        its eviction completes at once (its pods are gone); it queues again ordered by the eviction time. Returns
        the keys of the requeued workloads, in key order.
        """
        lost = sorted(
            key
            for key, wl in self.live.items()
            if wl.state in (RESERVED, ADMITTED, EVICTING) and any(n == name for n, _ in wl.pods)
        )
        for key in lost:
            wl = self.workloads[key]
            if wl.state != EVICTING:
                wl.state = EVICTING
                wl.eviction = Eviction(
                    reason="NodeLost", message=f"node {name} left the cluster", preemptor=None, issued_at=now
                )
            self.evicting.add(key)
            self.complete_eviction(key, now)
        self.pool.remove_node(name)
        self.spec_state = replace(self.spec_state, nodes=tuple(n for n in self.spec_state.nodes if n.name != name))
        self.cq_node_cache.clear()
        return lost

    def finish(self, key: str) -> None:
        """A running workload ended: release it."""
        wl = self.workloads[key]
        if wl.state in (ADMITTED, RESERVED, EVICTING):
            self.release(key)
        self.evicting.discard(key)
        wl.state = FINISHED
        wl.group = None
        self.live.pop(key, None)

    def drain(self, now: float) -> list[QueueStopEviction]:
        """Kueue's workload controller on stopped queues: take quota back from workloads of stopped queues.

        An admitted workload whose LocalQueue (checked first, as Kueue does) or ClusterQueue is ``HoldAndDrain`` is
        evicted (it keeps its quota until ``complete_eviction``); one that only has quota reserved loses the
        reservation at once under any stopPolicy. ``Hold`` leaves admitted workloads running. Workloads already
        being evicted are left alone. Idempotent: a second call at any time finds nothing new.
        """
        if not self.has_stopped_queues:
            return []
        out: list[QueueStopEviction] = []
        for cq in self.cqs.values():
            for key in sorted(cq.admitted):
                wl = cq.admitted[key]
                if wl.state not in (ADMITTED, RESERVED):
                    continue
                lq_policy = wl.lq.stop_policy if wl.lq is not None else "None"
                if wl.state == ADMITTED:
                    if lq_policy == "HoldAndDrain":
                        reason, text = "LocalQueueStopped", msg.LOCAL_QUEUE_STOPPED
                    elif cq.spec.stop_policy == "HoldAndDrain":
                        reason, text = "ClusterQueueStopped", msg.CLUSTER_QUEUE_STOPPED
                    else:
                        continue
                    wl.state = EVICTING
                    self.evicting.add(key)
                    wl.eviction = Eviction(reason=reason, message=text, preemptor=None, issued_at=now)
                    out.append(QueueStopEviction(key, cq.name, reason, text))  # type: ignore[arg-type]
                    continue
                if lq_policy != "None":
                    reason, text = "LocalQueueStopped", msg.local_queue_stopped(wl.spec.queue_name)
                elif cq.spec.stop_policy != "None":
                    reason, text = "ClusterQueueStopped", msg.cluster_queue_inactive(cq.name, True)
                else:
                    continue
                # Nothing runs yet: Kueue unsets the reservation directly; the queue order is unchanged.
                self.release_reservation(key)
                out.append(QueueStopEviction(key, cq.name, reason, text, admitted=False))  # type: ignore[arg-type]
        return out

    def release_reservation(self, key: str) -> None:
        """Unset the quota reservation of a workload whose admission checks are not all Ready (nothing runs yet):
        it is pending again in its old place."""
        wl = self.workloads[key]
        self.release(key)
        wl.assignment = []
        wl.admitted_at = None
        wl.pending_checks = ()
        enqueue(self, wl)

    def complete_eviction(self, key: str, now: float) -> None:
        """An evicted workload's pods are gone: release its quota and requeue it (ordered by eviction time).

        A workload evicted by a stopped queue keeps its queue position (Kueue orders it by creation time); it stays
        pending, outside the queue, until the queue restarts.
        """
        wl = self.workloads[key]
        self.evicting.discard(key)
        if wl.state != EVICTING:
            return
        self.release(key)
        wl.assignment = []
        wl.admitted_at = None
        wl.pending_checks = ()
        wl.pods_ready_at = None
        if wl.eviction is None or wl.eviction.reason not in QUEUE_STOP_REASONS:
            if wl.eviction is not None and wl.eviction.reason in pods_ready.EVICTION_REASONS:
                pods_ready.requeue_time(self, wl, now)
            else:
                wl.ts = now
                wl.evicted_at = now
        wl.eviction = None
        enqueue(self, wl)

    def complete_evictions(self, now: float) -> list[str]:
        """Complete every eviction in progress; returns the requeued keys."""
        keys = sorted(self.evicting)
        for key in keys:
            self.complete_eviction(key, now)
        return keys

    def checks_ready(self, key: str, now: float | None = None) -> bool:
        """Mark every admission check of a quota-reserved workload Ready; True if it became admitted (at ``now``,
        the engine's time when not given)."""
        wl = self.workloads[key]
        if wl.state != RESERVED:
            return False
        wl.pending_checks = ()
        wl.state = ADMITTED
        if self.pods_ready_config is not None:
            pods_ready.admitted(self, wl, self.now if now is None else now)
        return True

    def submit(self, spec: Workload) -> WorkloadInfo:
        """Add a new pending workload."""
        known = self.workloads.get(spec.key)
        if known is not None and known.state != DELETED:
            raise ValueError(f"workload {spec.key} already exists")
        if spec.protection is not None:
            self.has_protection = True
        return self._add(spec)

    def protection_lapsed(self, key: str) -> None:
        """A protection of ``key`` may have lapsed (its minimum runtime ended, it wrote a checkpoint): the queues
        of its cohort tree that preempt are woken, as after an admission, to try again."""
        wl = self.workloads.get(key)
        if wl is not None and wl.state in (ADMITTED, EVICTING) and wl.cq in self.cqs:
            on_admission(self, wl.cq or "")

    def delete(self, key: str) -> None:
        """A workload object was deleted: a pending one leaves its queue, one holding quota releases it at once
        (Kueue drops a deleted workload from its cache and queues). It stays in ``workloads`` as ``DELETED``."""
        wl = self.workloads[key]
        if wl.state in (ADMITTED, RESERVED, EVICTING):
            self.release(key)
        self.evicting.discard(key)
        wl.state = DELETED
        wl.group = None
        self.live.pop(key, None)
        self._unpin(wl)

    def _unpin(self, wl: WorkloadInfo) -> None:
        """Forget ``wl`` as a queue's pinned preemptor or reserving StrictFIFO head."""
        for name, pinned in list(self.preemptors.items()):
            if pinned is wl:
                del self.preemptors[name]
        for name, head in list(self.reserving.items()):
            if head is wl:
                del self.reserving[name]

    def update(self, spec: Workload, now: float) -> None:
        """A workload object changed (priority, active, queue name, pod sets, reclaimable pods, simulation facts).

        A pending workload is queued again under its new spec, keeping its queue time (Kueue re-sorts it; a change
        of its requests makes it a new shape). One holding quota keeps its admission: its priority counts for
        preemption from now on, its usage shrinks with its reclaimable pods (those pods leave their nodes), and
        ``active: false`` evicts it (``Deactivated``: "The workload is deactivated"); ``active: true`` queues a
        deactivated workload again.
        """
        wl = self.workloads[spec.key]
        if wl.state in (FINISHED, DELETED):
            return
        if spec.protection is not None:
            self.has_protection = True
        old = wl.spec
        if wl.state == PENDING:
            reactivated = spec.active and not old.active
            queued_at = wl.ts if wl.ts != spec.created_at else spec.requeued_at
            fresh_spec = replace(
                spec,
                admission=None,
                admitted_at=None,
                eviction=None,
                requeued_at=queued_at,
                requeue_count=0 if reactivated else wl.requeue_count,
                requeue_at=None if reactivated else wl.requeue_at,
            )
            deactivated = "" if reactivated else wl.deactivated
            wl.state = DELETED  # the old record leaves its group (groups skip workloads no longer pending)
            wl.group = None
            self._unpin(wl)
            fresh = self._add(fresh_spec)
            fresh.deactivated = deactivated
            return
        wl.spec = spec
        wl.priority = spec.priority
        if dict(spec.reclaimable_pods) != dict(old.reclaimable_pods):
            self._reclaim(wl, spec)
        if not spec.active and old.active and wl.state in (ADMITTED, RESERVED):
            self._deactivate(wl, now, "")

    def _reclaim(self, wl: WorkloadInfo, spec: Workload) -> None:
        """Reclaimable pods changed on a workload holding quota: its usage and pods shrink to what still runs."""
        reclaimable = spec.reclaimable_pods
        wl.full_pod_sets = [PodSetInfo(ps, max(0, ps.count - reclaimable.get(ps.name, 0))) for ps in spec.pod_sets]
        cq = self.cqs.get(wl.cq or "")
        by_name = {p.name: p for p in wl.full_pod_sets}
        usage: dict[FlavorResource, int] = {}
        pods: list[tuple[str, dict[str, int]]] = []
        assignment: list[PodSetAssignment] = []
        for a in wl.assignment:
            ps = by_name.get(a.name)
            count = a.count if ps is None else min(a.count, ps.count)
            per_pod = ps.per_pod if ps is not None else {}
            ps_usage = {r: v * count for r, v in per_pod.items()}
            if "pods" in a.flavors:
                ps_usage["pods"] = count
            for res, val in ps_usage.items():
                flavor = a.flavors.get(res)
                if flavor is not None:
                    usage[(flavor, res)] = usage.get((flavor, res), 0) + val
            nodes = a.nodes[:count] if a.nodes else ()
            pods.extend((n, per_pod) for n in nodes)
            assignment.append(PodSetAssignment(a.name, count, dict(a.flavors), ps_usage, tuple(nodes)))
        if cq is not None:
            QuotaTree.remove_usage(cq.node, wl.usage)
            QuotaTree.add_usage(cq.node, usage)
            self.dirty.add(cq.name)
        freed = [n for n, _ in wl.pods]
        self.pool.remove(wl.pods)
        self.pool.add(pods)
        wl.usage, wl.pods, wl.assignment = usage, pods, assignment
        wl.pod_sets = wl.full_pod_sets
        on_release(self, wl.cq, freed)

    def _deactivate(self, wl: WorkloadInfo, now: float, why: str) -> None:
        """Evict a workload holding quota because it was deactivated (by a user, or by Kueue: ``why``)."""
        reason = f"DeactivatedDueTo{pods_ready.DEACTIVATION_CAUSE}" if why else "Deactivated"
        text = f"{msg.DEACTIVATED} due to {why}" if why else msg.DEACTIVATED
        wl.deactivated = why
        if wl.state == RESERVED:
            self.release_reservation(wl.key)  # nothing runs yet: the reservation goes at once
            return
        wl.state = EVICTING
        self.evicting.add(wl.key)
        wl.eviction = Eviction(reason=reason, message=text, preemptor=None, issued_at=now)

    def pods_ready(self, key: str, now: float) -> None:
        """Every pod of an admitted workload is Ready (Kueue's PodsReady=True): it no longer blocks admission."""
        pods_ready.mark_ready(self, key, now)

    def pods_ready_timeout(self, key: str, now: float) -> Eviction | None:
        """waitForPodsReady's timeout of ``key`` expired: evict it (``PodsReadyTimeout``) and set its backoff, or
        deactivate it past ``backoffLimitCount``; the eviction issued (None when its pods are Ready or it no
        longer runs)."""
        return pods_ready.timeout(self, key, now)

    def backoff_finished(self, key: str) -> bool:
        """The requeue backoff of a timed-out workload ended: it queues again; True if it did."""
        return pods_ready.backoff_finished(self, key)

    def reconfigure(self, policy: ClusterState, now: float) -> None:
        """Kueue's objects changed (ClusterQueues, Cohorts, LocalQueues, flavors, topologies, nodes, namespaces,
        priority classes, admission checks, the Configuration): rebuild on ``policy``, keeping every workload.

        ``policy``'s workloads are ignored. Workloads holding quota keep it (even where the new quota is smaller,
        as Kueue keeps running what it admitted); pending ones are queued again in their order (Kueue requeues the
        inadmissible workloads of a ClusterQueue or Cohort that changed). Finished and deleted ones are kept for
        reports; a preemptor keeps its queue's head. The teams' recent usage (fairness that remembers) is kept
        unless ``policy`` brings its own.
        """
        previous = self.workloads
        pinned = {name: wl.key for name, wl in self.preemptors.items()}
        held = self.held.key if self.held is not None else None
        pool_enabled = self.pool.enabled
        not_ready = set(self.not_ready) if self.pods_ready_config is not None else None
        exported = self.export_state()
        # The teams' recent usage goes on where the new policy brings none (a recorded policy change mid-replay).
        remembered = {cq.name: cq for cq in exported.cluster_queues if cq.consumed_at is not None}
        queues = tuple(
            replace(cq, consumed=remembered[cq.name].consumed, consumed_at=remembered[cq.name].consumed_at)
            if cq.consumed_at is None and cq.name in remembered
            else cq
            for cq in policy.cluster_queues
        )
        state = replace(policy, workloads=exported.workloads, cluster_queues=queues)
        Engine.__init__(self, state, now)
        self.pool.enabled = self.pool.enabled or pool_enabled
        for key, old in previous.items():
            wl = self.workloads.get(key)
            if wl is None:
                self.workloads[key] = old
                continue
            wl.deactivated = old.deactivated
            if not_ready is not None:
                wl.pods_ready_at = old.pods_ready_at
            wl.preempted_by = old.preempted_by
            wl.note = old.note
        if self.pods_ready_config is None:
            self.not_ready = set()
        elif not_ready is not None:
            # Tracked before: what was Ready stays Ready (``load`` would read the specs' facts again).
            self.not_ready = {k for k in not_ready if k in self.live and self.live[k].state != PENDING}
        for name, key in pinned.items():
            wl = self.live.get(key)
            if name in self.cqs and wl is not None and wl.state == PENDING and wl.cq == name:
                self.preemptors[name] = wl
        if held is not None:
            self.held = self.live.get(held)

    # ------------------------------------------------------------------ fair sharing

    def weighted_shares(self) -> tuple[dict[str, int], dict[str, int]]:
        """Kueue's ``status.fairSharing.weightedShare`` of every ClusterQueue and Cohort (names sorted)."""
        queues = {name: share(self.cqs[name].node).weighted_share for name in sorted(self.cqs)}
        cohorts = {name: share(node).weighted_share for name, node in sorted(self.quota.cohorts.items())}
        return queues, cohorts

    # ------------------------------------------------------------------ export

    def workload_spec(self, wl: WorkloadInfo) -> Workload:
        """The Workload dataclass as the engine now sees it."""
        spec = wl.spec
        if wl.state in (ADMITTED, RESERVED, EVICTING):
            admission = Admission(
                cluster_queue=wl.cq or "",
                pod_sets=tuple(PodSetAdmission(a.name, a.count, dict(a.flavors), a.nodes) for a in wl.assignment),
            )
            checks = dict(spec.admission_checks)
            for name in wl.pending_checks:
                checks.setdefault(name, "Pending")
            return replace(
                spec,
                admission=admission,
                admitted_at=wl.admitted_at,
                eviction=wl.eviction,
                admission_checks=checks,
                requeued_at=wl.evicted_at,
                requeue_count=wl.requeue_count,
                requeue_at=wl.requeue_at,
            )
        requeued = wl.ts if wl.ts != spec.created_at else spec.requeued_at
        if wl.requeue_count != spec.requeue_count or wl.requeue_at != spec.requeue_at:
            spec = replace(spec, requeue_count=wl.requeue_count, requeue_at=wl.requeue_at)
        return replace(spec, admission=None, admitted_at=None, eviction=None, requeued_at=requeued)

    def export_state(self) -> ClusterState:
        """The current state as a ClusterState (finished workloads dropped)."""
        workloads = tuple(
            self.workload_spec(w)
            for w in sorted(self.live.values(), key=lambda w: w.key)
            if w.state not in (FINISHED, DELETED)
        )
        memory = self.memory
        if memory is None:
            return replace(self.spec_state, workloads=workloads)
        recent = memory.export()
        queues = tuple(
            replace(cq, consumed=recent[cq.name], consumed_at=memory.at) if cq.name in recent else cq
            for cq in self.spec_state.cluster_queues
        )
        return replace(self.spec_state, workloads=workloads, cluster_queues=queues)
