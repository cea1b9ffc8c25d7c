"""Every pending job's verdict, ETA and place in its queue, as the pages the poll reads (one per ``PAGE_SPAN`` ids).

A refresh turns the window (``queues.diagnosis_window``) into one entry per pending job: its verdict (shared by the
jobs of a group), its ETA and its place in its queue (the queues' lengths are on ``ClusterDiagnosis``). The entries
are stored by job id in pages of ``PAGE_SPAN`` ids (``DiagnosisPage``), each with the verdicts and ETA kinds its jobs
use, so that a poll reads one small row whatever the length of the queue, and a change rewrites the pages whose
content changed, not a row per job whose place or ETA moved (after one job ends, most of them).

ETAs (``Eta``): "starts now" and "no estimate" as before; a job the window admitted gets the replay's time as its
p50; a job behind the window gets a p50 *extended* from it — the window end plus, for each job of its group still
ahead of it, the mean time the window took per admission of that group (counted from its first event) — with at
least ``EXTENDED_SPREAD`` of the wait added for its p90, and a method that says so; a group the window admitted none
of gets no p50 ("not before the window's end"). What an entry stores does not move with the clock (the p90 as its
spread, as before).

An entry whose estimate moved much at a refresh keeps the one before it and when the page last held it (``b``, per
job id, beside the entries; carried while the estimate does not move much again): the job page says what changed
since (``queues.selectors.eta_change``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from queues import engine
from queues.diagnosis_context import (
    ETA_HORIZON,
    FALLBACK_SPREAD,
    EngineContext,
    Eta,
    Verdict,
    context_levels,
    eta_spread_terms,
    flavor_labels,
    verdict_of,
)
from queues.diagnosis_input import KeptInput
from queues.diagnosis_window import Window
from queues.engine_jobs import PerCluster
from queues.models import Team

#: Job ids per page.
PAGE_SPAN = 1024
#: The p90 of an extended ETA adds at least this share of the wait (it extends a replay; it is not one).
EXTENDED_SPREAD = FALLBACK_SPREAD
#: A window shorter than this (seconds) is not extended (its rate says nothing).
MIN_WINDOW_SECONDS = 60.0

# The kinds of ETA; the p50 (when there is one) is per job.
STARTS_NOW, NEVER, REPLAYED, EXTENDED, BEYOND, PAST_HORIZON = (
    "now",
    "never",
    "replayed",
    "extended",
    "beyond",
    "horizon",
)


def page_of(job_id: int) -> int:
    """The page a job's diagnosis is stored in."""
    return job_id // PAGE_SPAN


@dataclass(frozen=True)
class PageEntry:
    """One job's stored diagnosis as a poll reads it: verdict, ETA (shown at ``now``) and (place, queue length)."""

    verdict: Verdict
    eta: Eta
    position: tuple[int, int]
    #: The last estimate that differed much from this one, and when the page last held it (``with_estimates_before``).
    before: dict | None = None


def verdict_content(verdict: Verdict) -> dict:
    """What a page stores of a verdict (the assignment's flavors and nodes are not shown by the job page)."""
    return {
        "admissible": verdict.admissible,
        "preempting": bool(verdict.preemption_targets),
        "code": verdict.code,
        "message": verdict.message,
        "kueue_message": verdict.kueue_message,
        "details": verdict.details,
    }


def _verdict(content: Mapping) -> Verdict:
    details = dict(content.get("details") or {})
    return Verdict(
        admissible=bool(content.get("admissible")),
        code=content.get("code", ""),
        message=content.get("message", ""),
        kueue_message=content.get("kueue_message", ""),
        details=details,
        preemption_targets=list(details.get("victims", [])) if content.get("preempting") else [],
    )


def _eta_kind(ctx: EngineContext, team: Team, kind: str, *, granted: int, end: float | None) -> dict:
    """An ETA kind of a team's jobs as stored: the method and the p90's spread terms (``granted`` admissions of the
    cluster until ``end``: the window it extends)."""
    if kind == STARTS_NOW:
        return {"kind": kind, "method": "The engine admits it now."}
    if kind == NEVER:
        return {"kind": kind, "method": "No estimate: it cannot start until the request or the configuration changes."}
    if kind == PAST_HORIZON:
        return {
            "kind": kind,
            "method": (
                f"No estimate: the running jobs' expected ends do not free room for it within {ETA_HORIZON.days} days."
            ),
        }
    floor, share, samples, method = eta_spread_terms(ctx, team)
    if kind == REPLAYED:
        return {"kind": kind, "method": method, "floor": floor, "share": share, "samples": samples}
    until = datetime.fromtimestamp(end, tz=ctx.now.tzinfo) if end is not None else ctx.now
    reach = (
        f"the engine replayed the queue forward for the next {granted} admissions of the cluster "
        f"(until {until:%Y-%m-%d %H:%M %Z})"
    )
    if kind == BEYOND:
        return {
            "kind": kind,
            "method": (
                f"No estimate yet: {reach}, and no job like this one was admitted in that time; "
                f"it does not start before {until:%Y-%m-%d %H:%M %Z}."
            ),
            "samples": samples,
        }
    return {
        "kind": kind,
        "method": (
            f"p50 extended: {reach}; this job comes later, so its p50 adds, for each job like it still ahead, the "
            f"time that replay took per admission of such a job; p90 adds at least "
            f"{max(share, EXTENDED_SPREAD):.0%} of the expected wait."
        ),
        "floor": floor,
        "share": max(share, EXTENDED_SPREAD),
        "samples": samples,
    }


def build_pages(kept: KeptInput, window: Window, ctx: EngineContext) -> dict[int, str]:
    """Every pending job's entry, as page → JSON text (deterministic: equal content, equal text).

    A page whose entries are those of this process's last build for the cluster keeps its text (no JSON made).
    """
    labels, levels = flavor_labels(ctx), context_levels(ctx)
    horizon, window_end = window.horizon, window.window_end
    now_ts = ctx.now.timestamp()
    # Explained key → (its verdict as JSON text, admissible, waits for room).
    verdicts: dict[str, tuple[str, bool, bool]] = {}
    for key, explanation in window.explanations.items():
        verdict = verdict_of(explanation, labels, levels)
        text = json.dumps(verdict_content(verdict), separators=(",", ":"), sort_keys=True)
        verdicts[key] = (text, verdict.admissible, engine.needs_replay(explanation))
    kinds: dict[tuple[int, str], str] = {}
    teams: dict[int, Team] = {}
    entries: dict[int, list[tuple[int, str, str, float | None, int]]] = {}
    span = window_end - window.origin if window_end is not None else 0.0
    extend = window_end is not None and span >= MIN_WINDOW_SECONDS
    jobs, explained_as, group_head = kept.jobs, window.explained_as, window.group_head
    admitted_at, admitted_in_group = window.admitted_at, window.admitted_in_group
    for members in kept.queues.values():
        rank_in_group: dict[str, int] = {}
        for position, (_, job_id) in enumerate(members, 1):
            kept_job = jobs[job_id]
            key = kept_job.key
            group = kept_job.group
            rank = rank_in_group[group] = rank_in_group.get(group, 0) + 1
            explained = explained_as.get(key) or group_head.get(group)
            if explained is None:  # neither given to the engine nor of a group that was: cannot happen (the window)
                continue
            text, admissible, replay = verdicts[explained]
            p50 = None
            if admissible:
                kind = STARTS_NOW
            elif not replay:
                kind = NEVER
            else:
                at = admitted_at.get(key)
                if at is not None:
                    kind, p50 = REPLAYED, (at if at > now_ts else now_ts)
                elif window_end is None:
                    kind = PAST_HORIZON
                else:
                    admitted = admitted_in_group.get(group, 0)
                    if admitted and extend:
                        p50 = window_end + max(rank - admitted, 1) * span / admitted
                        if p50 <= horizon:
                            kind = EXTENDED
                        else:
                            kind, p50 = PAST_HORIZON, None
                    else:
                        kind = BEYOND
            team_id = kept_job.team_id
            kind_key = (team_id, kind)
            kind_text = kinds.get(kind_key)
            if kind_text is None:
                team = teams.get(team_id) or teams.setdefault(team_id, kept_job.job.team)
                kind_made = _eta_kind(ctx, team, kind, granted=window.granted, end=window_end)
                kind_text = kinds[kind_key] = json.dumps(kind_made, separators=(",", ":"), sort_keys=True)
            page = job_id // PAGE_SPAN
            if page in entries:
                entries[page].append((job_id, text, kind_text, p50, position))
            else:
                entries[page] = [(job_id, text, kind_text, p50, position)]
    previous = _ENTRIES.take(kept.cluster_id, {})
    out: dict[int, str] = {}
    kept_pages: dict[int, tuple[tuple, str]] = {}
    for page, rows in entries.items():
        rows.sort()
        key_rows = tuple(rows)
        last = previous.get(page)
        text = last[1] if last is not None and last[0] == key_rows else _page_json(rows)
        out[page] = text
        kept_pages[page] = (key_rows, text)
    _ENTRIES.put(kept.cluster_id, kept_pages)
    return out


#: Per cluster, each page's entries and JSON text as this process last built them (an equal page is not made again).
_ENTRIES: PerCluster[dict[int, tuple[tuple, str]]] = PerCluster()


def _page_json(rows: list[tuple[int, str, str, float | None, int]]) -> str:
    """A page's JSON text from its rows (job id, verdict JSON, ETA kind JSON, p50, place), sorted by job id: the
    verdicts and kinds listed once each (in order of first use), each job pointing at them."""
    verdict_index: dict[str, int] = {}
    kind_index: dict[str, int] = {}
    jobs = []
    for job_id, verdict, kind, p50, position in rows:
        vi = verdict_index.setdefault(verdict, len(verdict_index))
        ei = kind_index.setdefault(kind, len(kind_index))
        jobs.append(f'"{job_id}":[{vi},{ei},{"null" if p50 is None else repr(p50)},{position}]')
    return f'{{"e":[{",".join(kind_index)}],"j":{{{",".join(jobs)}}},"v":[{",".join(verdict_index)}]}}'


def page_digest(text: str) -> str:
    """The digest of a page's JSON text (a changed digest rewrites the page)."""
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def page_entry(text: str, job_id: int, *, length: int, now: datetime) -> PageEntry | None:
    """The job's entry in a page's JSON text, its ETA as shown at ``now`` and ``length`` the length of its queue
    (``ClusterDiagnosis.window``, not in the page: a job joining the back of a queue changes no page but its own);
    None when the page does not hold it."""
    data = json.loads(text)
    row = data["j"].get(str(job_id))
    if row is None:
        return None
    vi, ei, p50, position = row
    return PageEntry(
        verdict=_verdict(data["v"][vi]),
        eta=_eta(data["e"][ei], p50, now=now),
        position=(position, length),
        before=data.get("b", {}).get(str(job_id)),
    )


def page_estimates(data: Mapping) -> dict[str, tuple[bool, float | None, str, str]]:
    """Per job id (as the page's JSON keys it) of a parsed page: its estimate as (starts now, p50, method) and the
    code of its verdict."""
    kinds, verdicts = data.get("e", []), data.get("v", [])
    return {
        job_id: (kinds[ei]["kind"] == STARTS_NOW, p50, kinds[ei].get("method", ""), verdicts[vi].get("code", ""))
        for job_id, (vi, ei, p50, _) in data.get("j", {}).items()
    }


def with_estimates_before(text: str, before: Mapping[str, dict]) -> str:
    """A page's JSON text with, per job id, the last estimate that differed much from its own (the ``b`` member;
    the text unchanged when there is none). Not part of the page's digest: it changes only with the entries."""
    if not before:
        return text
    return '{"b":' + json.dumps(before, separators=(",", ":"), sort_keys=True) + "," + text[1:]


def _eta(kind: Mapping, p50: float | None, *, now: datetime) -> Eta:
    """The Eta of a stored kind and p50, as shown at ``now``."""
    return Eta(
        starts_now=kind["kind"] == STARTS_NOW,
        p50=datetime.fromtimestamp(p50, tz=UTC) if p50 is not None else None,
        method=kind.get("method", ""),
        samples=int(kind.get("samples", 0)),
        spread_floor=float(kind.get("floor", 0.0)),
        spread_share=float(kind.get("share", 0.0)),
        extended=kind["kind"] == EXTENDED,
    ).seen_at(now)


def extended_eta(ctx: EngineContext, summary: Mapping, *, queue: str, team: Team) -> Eta:
    """The ETA of a job that would join the back of ``queue`` (namespace/local queue) now, extended from the last
    refresh's window (``ClusterDiagnosis.window``) at the pace that window admitted the queue's jobs."""
    if not summary:
        return Eta(method="No estimate yet: the queue's diagnosis is being computed.")
    origin, end, granted = float(summary["origin"]), summary.get("end"), int(summary.get("granted", 0))
    pending, admitted = summary.get("queues", {}).get(queue, [0, 0])
    p50 = None
    if end is None:
        kind = PAST_HORIZON
    elif admitted and end - origin >= MIN_WINDOW_SECONDS:
        p50 = end + (pending - admitted + 1) * (end - origin) / admitted
        kind = EXTENDED if p50 <= ctx.now.timestamp() + ETA_HORIZON.total_seconds() else PAST_HORIZON
    else:
        kind = BEYOND
    if kind == PAST_HORIZON:
        p50 = None
    return _eta(_eta_kind(ctx, team, kind, granted=granted, end=end), p50, now=ctx.now)
