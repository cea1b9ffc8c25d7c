"""The JSON document of ``manage.py simulate --json`` for a finished run, and its text table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from queues.engine.decisions import QUEUE_STOP_REASONS, Explanation
from queues.engine.records import ADMITTED, DELETED, EVICTING, FINISHED, PENDING, RESERVED, WorkloadInfo
from queues.engine.reservation_reasons import explain_all_held
from queues.engine.reservations import hold_quota, in_force, quota_view, touched
from queues.engine.scenario.reservations import describe
from queues.engine.scheduler import Engine
from queues.engine.simulation import ReplayResult, WorkloadRecord, primary_resource


def _rel(value: float | None, start: float) -> float | None:
    """Seconds after the start, rounded to milliseconds (None stays None)."""
    if value is None:
        return None
    return round(value - start, 3)


def _percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile by linear interpolation (None without values)."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return round(ordered[low] + (ordered[high] - ordered[low]) * (pos - low), 3)


def _state(wl: WorkloadInfo) -> str:
    """The document's state of a workload."""
    if wl.state == ADMITTED:
        return "admitted"
    if wl.state == FINISHED:
        return "finished"
    if wl.state == DELETED:
        return "deleted"
    if wl.state == EVICTING:
        return "evicted" if wl.eviction is not None and wl.eviction.reason in QUEUE_STOP_REASONS else "preempted"
    return "pending"


def _reason(wl: WorkloadInfo, explanation: Explanation | None) -> tuple[dict[str, str] | None, str | None]:
    """The wait reason of a pending workload (None otherwise; ``explanation`` is its own), and Kueue's message."""
    if wl.state in (PENDING, RESERVED) and explanation is not None:
        if explanation.reason is not None:
            reason = {"code": explanation.reason.code, "message": explanation.reason.message}
            return reason, explanation.reason.kueue_message
        return {"code": "higher_priority_ahead", "message": "This job fits and is admitted in the next cycle."}, ""
    if wl.state == ADMITTED:
        return None, f"Quota reserved in ClusterQueue {wl.cq}"
    if wl.state == EVICTING and wl.eviction is not None:
        return None, wl.eviction.message
    return None, None


def _row(wl: WorkloadInfo, rec: WorkloadRecord | None, start: float, explanation: Explanation | None) -> dict[str, Any]:
    """One workload's row of the document (``explanation``: the pending workload's)."""
    reason, kueue_message = _reason(wl, explanation)
    if wl.state in (ADMITTED, RESERVED, EVICTING):
        pod_sets = [
            {"name": a.name, "count": a.count, "flavors": dict(sorted(a.flavors.items())), "nodes": list(a.nodes)}
            for a in wl.assignment
        ]
    else:
        pod_sets = [{"name": ps.name, "count": ps.count, "flavors": {}, "nodes": []} for ps in wl.pod_sets]
    admitted_at = rec.admitted_at if rec is not None and rec.admitted_at is not None else None
    if wl.state in (ADMITTED, EVICTING) and admitted_at is None:
        admitted_at = wl.admitted_at
    if wl.state in (PENDING, RESERVED):
        admitted_at = None
    row: dict[str, object] = {
        "name": wl.key,
        "clusterQueue": wl.cq,
        "state": _state(wl),
        "podSets": pod_sets,
        "borrowing": bool(wl.borrowing) if wl.state in (ADMITTED, RESERVED, EVICTING) else False,
        "reason": reason,
        "kueueMessage": kueue_message,
        "preemptedBy": wl.preempted_by or (rec.preempted_by if rec is not None else None),
        "submittedAt": _rel(wl.spec.created_at, start),
        "admittedAt": _rel(admitted_at, start),
        "finishedAt": _rel(rec.finished_at if rec is not None else None, start),
    }
    if rec is not None and rec.stop_eviction is not None:
        # Only on workloads a stopped queue took quota from, so other documents keep their shape.
        row["stopEviction"] = {
            "reason": rec.stop_eviction.reason,
            "message": rec.stop_eviction.message,
            "admitted": rec.stop_eviction.admitted,
            "at": _rel(rec.stopped_at, start),
        }
    if rec is not None and rec.ready_eviction is not None:
        # Only on workloads waitForPodsReady (or a deactivation) evicted.
        row["eviction"] = {
            "reason": rec.ready_eviction.reason,
            "message": rec.ready_eviction.message,
            "at": _rel(rec.ready_evicted_at, start),
        }
    if wl.requeue_count or wl.requeue_at is not None:
        row["requeueState"] = {"count": wl.requeue_count, "requeueAt": _rel(wl.requeue_at, start)}
    return row


def _count(counts: dict[str, dict[str, int]], wl: WorkloadInfo) -> None:
    """Count the workload in its ClusterQueue's totals."""
    if wl.cq not in counts:
        return
    c = counts[wl.cq]
    if wl.state == ADMITTED:
        c["admitted"] += 1
        if wl.borrowing:
            c["borrowing"] += 1
    elif wl.state in (PENDING, RESERVED):
        c["pending"] += 1
    elif wl.state == FINISHED:
        c["finished"] += 1


_ZERO = {"admitted": 0, "pending": 0, "preempted": 0, "finished": 0, "borrowing": 0}


def _queues(
    engine: Engine, result: ReplayResult, counts: Mapping[str, Mapping[str, int]], window: float
) -> dict[str, Any]:
    """Every ClusterQueue's figures: utilization of its primary resource over the window (or now) and counts."""
    queues: dict[str, Any] = {}
    # A ClusterQueue a timeline deleted keeps its figures over the run.
    for name in sorted(set(engine.cqs) | set(result.queues)):
        stats = result.queues[name]
        if name in engine.cqs:
            resource, nominal = primary_resource(engine, name)
        else:
            resource, nominal = stats.resource, 0
        if window > 0 and stats.nominal_log:
            # The nominal quota changed during the run: usage over the quota each stretch had.
            capacity = stats.nominal_seconds(result.start, result.end)
            utilization = round(stats.integral / capacity, 4) if capacity > 0 else None
        elif nominal <= 0:
            utilization = None
        elif window > 0:
            utilization = round(stats.integral / (nominal * window), 4)
        else:
            usage = sum(v for (f, r), v in engine.cqs[name].node.usage.items() if r == resource)
            utilization = round(usage / nominal, 4)
        c = counts.get(name, _ZERO)
        queues[name] = {
            "utilization": utilization,
            "admitted": c["admitted"],
            "pending": c["pending"],
            "borrowing": c["borrowing"],
            "finished": c["finished"],
            "preempted": stats.preempted,
            "admissions": stats.admissions,
            "resource": resource,
            "nominal": nominal,
        }
        if stats.drained:
            queues[name]["evicted"] = stats.drained
    return queues


def document(engine: Engine, start: float, result: ReplayResult, window: float) -> dict[str, Any]:
    """The ``simulate --json`` document: one row per workload and a summary per ClusterQueue (and Cohort)."""
    rows = []
    waits: list[float] = []
    counts: dict[str, dict[str, int]] = {
        name: {"admitted": 0, "pending": 0, "preempted": 0, "finished": 0, "borrowing": 0} for name in engine.cqs
    }
    pending = [engine.workloads[key] for key in sorted(engine.workloads)]
    explanations = explain_all_held(engine, [wl for wl in pending if wl.state in (PENDING, RESERVED)])
    for key in sorted(engine.workloads):
        wl = engine.workloads[key]
        rec = result.records.get(key)
        if rec is not None and rec.first_admitted_at is not None:
            waits.append(rec.first_admitted_at - wl.spec.created_at)
        rows.append(_row(wl, rec, start, explanations.get(key)))
        _count(counts, wl)
    queues = _queues(engine, result, counts, window)
    summary: dict[str, Any] = {
        "clusterQueues": queues,
        "waitSeconds": {"p50": _percentile(waits, 0.5), "p90": _percentile(waits, 0.9)},
    }
    if engine.fair is not None:
        # Shown only with fair sharing on, so documents of clusters without it keep their shape.
        queue_shares, cohort_shares = engine.weighted_shares()
        for name, value in queue_shares.items():
            queues[name]["weightedShare"] = value
        summary["fairSharing"] = {"preemptionStrategies": list(engine.fair.preemption_strategies)}
        summary["cohorts"] = {name: {"weightedShare": value} for name, value in cohort_shares.items()}
    return {"workloads": rows, "summary": summary}


def timeline_section(doc: dict[str, Any], scenario: Any, replay: Any, end: float) -> None:
    """Add the timeline to a document: its events (``applied`` when the run reached them) and every decision in
    order, each naming the event it followed (``after``: the last event applied before it, None before any);
    each workload row gets ``decidedAfter``, the event its last decision followed."""
    start = scenario.start
    decisions = []
    last: dict[str, str | None] = {}
    for at, key, what, detail, after in replay.decisions or ():
        decisions.append({"at": _rel(at, start), "workload": key, "decision": what, "detail": detail, "after": after})
        last[key] = after
    doc["timeline"] = {
        "events": [{**e.describe(), "applied": e.at <= end} for e in scenario.timeline],
        "decisions": decisions,
    }
    for row in doc["workloads"]:
        row["decidedAfter"] = last.get(row["name"])


def reservations_section(doc: dict[str, Any], scenario: Any, replay: Any, *, with_decisions: bool) -> None:
    """Add the reservations to a document: the holds, and at the start and at each edge the run crossed, the holds in
    force, what each moved and the quota of every queue and cohort in the reserved flavors; ``with_decisions`` (no
    timeline section lists them) adds every decision in order, each naming the edge it followed (``after``)."""
    start = scenario.start
    state = scenario.state
    pairs = touched(state.reservations)

    def edge(at: float, label: str, policy: Any, holds: Any, outcomes: Any) -> dict[str, Any]:
        held = hold_quota(policy.cluster_queues, policy.cohorts, holds)
        return {
            "at": _rel(at, start),
            "edge": label,
            "inForce": [h.name for h in holds],
            "moved": [
                {
                    "reservation": o.hold.name,
                    "moved": o.moved,
                    "shifts": {f"{s.kind}/{s.name}": s.delta for s in o.shifts},
                    **({"problem": o.problem} if o.problem else {}),
                }
                for o in outcomes
            ],
            "quota": quota_view(held.cluster_queues, held.cohorts, pairs),
        }

    first = in_force(state.reservations, start)
    edges = [edge(start, "start", state, first, hold_quota(state.cluster_queues, state.cohorts, first).outcomes)]
    edges += [edge(*entry) for entry in replay.reservation_log]
    section: dict[str, Any] = {"holds": [describe(h, start) for h in state.reservations], "edges": edges}
    if with_decisions:
        section["decisions"] = [
            {"at": _rel(at, start), "workload": key, "decision": what, "detail": detail, "after": after}
            for at, key, what, detail, after in replay.decisions or ()
        ]
    doc["reservations"] = section


def render_table(document: Mapping[str, Any]) -> str:
    """A readable text table of a ``run_scenario`` document."""
    headers = ["WORKLOAD", "QUEUE", "STATE", "FLAVORS", "NODES", "REASON"]
    rows = []
    for w in document["workloads"]:
        flavors = ",".join(sorted({f for ps in w["podSets"] for f in ps["flavors"].values()})) or "-"
        nodes = ",".join(sorted({n for ps in w["podSets"] for n in ps["nodes"]})) or "-"
        reason = (
            w["reason"]["code"]
            if w["reason"]
            else ("preempted by " + w["preemptedBy"] if w["preemptedBy"] and w["state"] == "preempted" else "-")
        )
        stop = w.get("stopEviction")
        if stop and stop["admitted"]:
            reason = f"{reason} (evicted: {stop['reason']})" if w["reason"] else f"evicted: {stop['reason']}"
        rows.append([w["name"], w["clusterQueue"] or "-", w["state"], flavors, nodes, reason])
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in [headers, *rows]]
    for w in document["workloads"]:
        if w["reason"]:
            lines.append("")
            lines.append(f"{w['name']}: [{w['reason']['code']}] {w['reason']['message']}")
            if w["kueueMessage"]:
                lines.append(f"  kueue: {w['kueueMessage']}")
    lines.append("")
    lines.append("QUEUE  UTILIZATION  ADMITTED  PENDING")
    for name, q in document["summary"]["clusterQueues"].items():
        util = "-" if q["utilization"] is None else f"{q['utilization'] * 100:.1f}%"
        share = f"  weightedShare={q['weightedShare']}" if "weightedShare" in q else ""
        lines.append(f"{name}  {util}  {q['admitted']}  {q['pending']}{share}")
    wait = document["summary"]["waitSeconds"]
    p50 = "-" if wait["p50"] is None else f"{wait['p50']}s"
    p90 = "-" if wait["p90"] is None else f"{wait['p90']}s"
    lines.append(f"wait p50={p50} p90={p90}")
    timeline = document.get("timeline")
    if timeline:
        lines.append("")
        lines.append("EVENT  AT  CHANGE  APPLIED")
        for e in timeline["events"]:
            lines.append(f"{e['name']}  {e['at']}s  {e['verb']} {e['object']}  {'yes' if e['applied'] else 'no'}")
        lines.append("")
        lines.append("AT  WORKLOAD  DECISION  AFTER")
        for d in timeline["decisions"]:
            detail = f" ({d['detail']})" if d["detail"] else ""
            lines.append(f"{d['at']}s  {d['workload']}  {d['decision']}{detail}  {d['after'] or '-'}")
    reservations = document.get("reservations")
    if reservations:
        lines.append("")
        lines.append("RESERVATION  QUEUE  RESERVED  FROM  TO")
        for h in reservations["holds"]:
            reserved = f"{h['count']} {h['flavor']}/{h['resource']}"
            lines.append(f"{h['name']}  {h['clusterQueue']}  {reserved}  {h['start']}s  {h['end']}s")
        for e in reservations["edges"]:
            lines.append("")
            lines.append(f"{e['at']}s  {e['edge']}: in force {', '.join(e['inForce']) or 'none'}")
            for owner, entries in e["quota"].items():
                for line, q in entries.items():
                    limits = "".join(f" {k}={v}" for k, v in q.items() if k != "nominal")
                    lines.append(f"  {owner} {line} nominal={q['nominal']}{limits}")
        for d in reservations.get("decisions", ()):
            detail = f" ({d['detail']})" if d["detail"] else ""
            lines.append(f"{d['at']}s  {d['workload']}  {d['decision']}{detail}  {d['after'] or '-'}")
    return "\n".join(lines)
