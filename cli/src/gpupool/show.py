"""The API's answers as plain text: a job table, a job, why it waits (since, place, ETA, suggestions), a timeline."""

from __future__ import annotations

from datetime import UTC, datetime

#: A job's states (queues.models.Job.State) and those it does not leave.
STATES = ("pending", "admitted", "running", "preempting", "suspended", "succeeded", "failed", "cancelled", "timed-out")
FINAL_STATES = ("succeeded", "failed", "cancelled", "timed-out")


def when(value: str | None) -> datetime | None:
    """An API timestamp (ISO 8601) as an aware datetime."""
    if not value:
        return None
    moment = datetime.fromisoformat(value)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def span(seconds: float) -> str:
    """A length of time for people: ``45s``, ``12m``, ``2h 5m``, ``3d 4h``."""
    seconds = round(abs(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if hours < 1:
        return f"{minutes}m"
    if days < 1:
        return f"{hours}h {minutes % 60}m" if minutes % 60 else f"{hours}h"
    return f"{days}d {hours % 24}h" if hours % 24 else f"{days}d"


def stamp(value: str | None, *, now: datetime) -> str:
    """``2026-12-04 19:40 UTC (5m ago)`` or ``(in 2h)``; ``-`` for none."""
    moment = when(value)
    if moment is None:
        return "-"
    delta = (moment - now).total_seconds()
    relative = "now" if abs(delta) < 1 else (f"in {span(delta)}" if delta > 0 else f"{span(delta)} ago")
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M} UTC ({relative})"


def short_time(value: str | None) -> str:
    """``2026-12-04 19:40`` (UTC) for tables."""
    moment = when(value)
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M}" if moment else "-"


def devices(job: dict) -> str:
    """``4×2`` (devices per pod × pods), ``4``, or with a kind's other pod sets ``24 in 2 pod sets`` (their total,
    as the job page says)."""
    per_pod, pods = job.get("devices_per_pod", 1), job.get("pod_count", 1)
    sets = job.get("pod_set_count") or 1
    if sets > 1 and job.get("total_devices") is not None:
        return f"{job['total_devices']} in {sets} pod sets"
    return f"{per_pod}×{pods}" if pods != 1 else str(per_pod)


def table(rows: list[list[str]], header: list[str]) -> str:
    """Columns padded to their widest cell, the last one left ragged."""
    cells = [header, *rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) if i < len(header) - 1 else cell for i, cell in enumerate(row)).rstrip()
        for row in cells
    )


def job_table(jobs: list[dict]) -> str:
    """The job list: id, name, state, class, devices, owner, submitted, and the wait reason of a pending job."""
    if not jobs:
        return "no jobs"
    rows = [
        [
            str(j["id"]),
            j["name"],
            j["state"],
            j.get("resource_class") or "-",
            devices(j),
            j.get("owner") or "-",
            short_time(j.get("submitted_at")),
            j.get("wait_label") or j.get("wait_reason") or "",
        ]
        for j in jobs
    ]
    return table(rows, ["ID", "NAME", "STATE", "CLASS", "GPUS", "OWNER", "SUBMITTED (UTC)", "WAITING FOR"])


def eta_text(eta: dict | None, *, now: datetime) -> str:
    """The expected start: "could start now", "no estimate", or p50 and p90."""
    if not eta:
        return "no estimate"
    if eta.get("starts_now"):
        return "could start now"
    p50, p90 = when(eta.get("p50")), when(eta.get("p90"))
    if p50 is None:
        return "no estimate"
    text = f"around {stamp(eta['p50'], now=now)}"
    if p90 is not None:
        text += f", by {stamp(eta['p90'], now=now)} at the latest (p90)"
    return text


def changes_text(changes: dict) -> str:
    """A suggestion's changes as ``field=value`` pairs."""
    return ", ".join(f"{k}={v}" for k, v in changes.items())


def diagnosis(d: dict, *, now: datetime) -> str:
    """Why the job waits, in sentences: reason, since, place in queue, ETA, Kueue's words, suggestions."""
    head = f"job {d['job']} is {d['state']}"
    if not d.get("waiting"):
        return f"{head}: it is not waiting."
    lines = [f"{head}: {d.get('label') or d.get('code') or 'waiting'}" + (f" ({d['code']})" if d.get("code") else "")]
    if d.get("message"):
        lines.append(f"  {d['message']}")
    lines.extend(lent_lines(d.get("details") or {}, now=now))
    lines.append(f"  since:    {stamp(d.get('since'), now=now)}")
    if d.get("position"):
        lines.append(f"  in queue: {d['position']} of {d.get('queue_length') or '?'} (1 = next)")
    lines.append(f"  expected: {eta_text(d.get('eta'), now=now)}")
    if (d.get("eta") or {}).get("method"):
        lines.append(f"  how:      {d['eta']['method']}")
    if d.get("kueue_message"):
        lines.append(f"  Kueue:    {d['kueue_message']}")
    if d.get("stale"):
        lines.append(f"  note:     the portal has lost sight of the cluster; this is as of {d['stale']}")
    suggestions = d.get("suggestions") or []
    if suggestions:
        lines.append("It would start now if:")
        for index, s in enumerate(suggestions, 1):
            lines.append(f"  {index}. {s['title']}: {s['message']}")
            if s.get("changes"):
                lines.append(f"     (resubmit with {changes_text(s['changes'])})")
    return "\n".join(lines)


def lent_lines(details: dict, *, now: datetime) -> list[str]:
    """A lent-out reason's figures: who holds the team's quota, whether reclaim is on, when it comes back."""
    holders = details.get("lentTo")
    if not holders:
        return []
    held = "; ".join(f"{h.get('team') or h.get('clusterQueue')} {h.get('units')}" for h in holders)
    policy = details.get("reclaim") or "Never"
    reclaim = f"on ({policy})" if details.get("reclaimOn") else f"off ({policy}): back as their jobs end"
    back = stamp(details["returnsP50"], now=now) if details.get("returnsP50") else "no estimate"
    return [f"  lent:     {details.get('lent')} held by {held}", f"  reclaim:  {reclaim}", f"  back:     {back} (p50)"]


def job_text(job: dict, *, now: datetime) -> str:
    """A job: what it asked for, where it runs, and when things happened."""
    lines = [
        f"job {job['id']} {job['name']}: {job['state']}",
        f"  team {job.get('team')}, owner {job.get('owner')}, cluster {job.get('cluster') or '-'}",
        f"  class {job.get('resource_class')}: {devices(job)} devices"
        + (f" on {job['assigned_flavor']}" if job.get("assigned_flavor") else "")
        + (f", priority {job['priority_class']}" if job.get("priority_class") else ""),
        f"  image {job.get('image')}",
    ]
    if job.get("kind") and job["kind"] != "batch":
        lines.insert(2, f"  kind {job['kind']}")
    pod_sets = job.get("pod_sets") or []
    for ps in pod_sets if len(pod_sets) > 1 else []:
        where = f" on {', '.join(ps['flavors'])}" if ps.get("flavors") else ""
        lines.append(
            f"  pod set {ps['name']}: {ps['count']} pod(s) × {ps['devices_per_pod']} devices, "
            f"{ps['cpu']} CPU, {ps['memory']} memory{where}"
        )
    if job.get("command") or job.get("args"):
        lines.append("  command " + " ".join([*(job.get("command") or []), *(job.get("args") or [])]))
    for label, key in (("submitted", "submitted_at"), ("admitted", "admitted_at"), ("started", "started_at")):
        if job.get(key):
            lines.append(f"  {label:9} {stamp(job[key], now=now)}")
    if job.get("finished_at"):
        lines.append(f"  {'finished':9} {stamp(job['finished_at'], now=now)}")
    if job.get("borrowing"):
        lines.append("  borrows idle capacity of the cohort (can be reclaimed)")
    if job.get("preemption_count"):
        lines.append(f"  preempted {job['preemption_count']} time(s)")
    return "\n".join(lines)


def logs_text(found: dict) -> str:
    """Each pod's last lines under a header naming the pod and its node (or why it wrote none)."""
    pods = found.get("pods") or []
    if not pods:
        return f"job {found.get('job')} ({found.get('state')}): no pod has written a log yet"
    blocks = []
    for pod in pods:
        where = f" on {pod['node']}" if pod.get("node") else ""
        head = f"==> {pod['pod']}{where} (last {found.get('tail_lines')} lines) <=="
        body = pod.get("lines") or [f"({pod.get('note') or 'no lines yet'})"]
        blocks.append("\n".join([head, *body]))
    return "\n\n".join(blocks)


def timeline_text(entries: list[dict], *, now: datetime) -> str:
    """The timeline, one event a line, with how long what it started lasted."""
    if not entries:
        return "no events yet"
    rows = []
    for e in entries:
        lasted = "" if e.get("duration_seconds") is None else span(e["duration_seconds"])
        if lasted and e.get("ongoing"):
            lasted += " so far"
        rows.append([short_time(e["at"]), e.get("label") or e["kind"], lasted, e.get("message") or ""])
    return table(rows, ["AT (UTC)", "EVENT", "LASTED", "WHAT"])


def feasibility_text(f: dict, *, now: datetime) -> str:
    """The feasibility check: would it start now, if not why and when, and what would help."""
    if f.get("admissible"):
        head = "it would start now" + (f" on {', '.join(f['flavors'])}" if f.get("flavors") else "")
        return head + (" (borrowing idle cohort capacity)" if f.get("borrowing") else "")
    lines = [f"it would wait: {f.get('label') or f.get('code')} ({f.get('code')})"]
    if f.get("message"):
        lines.append(f"  {f['message']}")
    lines.append(f"  expected: {eta_text(f.get('eta'), now=now)}")
    for index, s in enumerate(f.get("suggestions") or [], 1):
        if index == 1:
            lines.append("It would start now if:")
        lines.append(f"  {index}. {s['title']}: {s['message']}")
    return "\n".join(lines)


#: A reservation's states (queues.models.Reservation.State).
RESERVATION_STATES = ("requested", "approved", "refused", "cancelled")


def reservation_table(rows: list[dict]) -> str:
    """One line per reservation: id, team, devices, window (UTC), state, purpose."""
    if not rows:
        return "no reservations"
    lines = [
        [
            str(r["id"]),
            r["team"],
            f"{r['count']}× {r['flavor']}",
            f"{short_time(r['starts_at'])} – {short_time(r['window_end'])}",
            r["state"],
            r["purpose"],
        ]
        for r in rows
    ]
    return table(lines, ["ID", "TEAM", "DEVICES", "WINDOW (UTC)", "STATE", "PURPOSE"])


def reservation_text(r: dict, *, now: datetime) -> str:
    """A reservation: what, when, its state and why (the rules' reasons, the admin's note)."""
    lines = [
        f"reservation {r['id']}: {r['count']}× {r['flavor']} ({r['resource_class'] or '-'}) for {r['team']} "
        f"on {r['cluster']}: {r['state']}",
        f"  from:    {stamp(r['starts_at'], now=now)}",
        f"  to:      {stamp(r['window_end'], now=now)}" + (" (cancelled)" if r.get("cancelled_at") else ""),
        f"  purpose: {r['purpose']}",
        f"  asked:   {r.get('requested_by') or '-'} at {stamp(r['requested_at'], now=now)}",
    ]
    if r.get("decided_at"):
        who = r.get("decided_by") or ("the rules" if r.get("decision") in ("auto", "rules") else "-")
        lines.append(f"  decided: {who} at {stamp(r['decided_at'], now=now)}")
    lines += [f"  - {reason}" for reason in r.get("reasons") or []]
    if r.get("decision_note"):
        lines.append(f"  note:    {r['decision_note']}")
    return "\n".join(lines)
