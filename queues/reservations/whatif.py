"""What-if of a reservation before it is decided: recent history replayed with it in place.

A reservation is for a window to come, so its preview places it at the same time of the week in the most recent past
that is over (whole weeks back: Thursday 09:00–17:00 next week is replayed as last Thursday 09:00–17:00, or the one
before when last week's has not ended yet) and replays the cluster's recorded jobs from a day before that window to a
day after it (or now), twice through the engine — the history as it happened (its recorded policy changes and the
reservations that held capacity then, ``queues.policy.whatif``), and the same history with this reservation's hold
added. It shows who would have waited how much longer (and the reserving team's jobs that would have started
sooner), per job and per team.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.utils import timezone

from queues.engine import model as m
from queues.engine_input import ts, window_engine_nodes, workload_name
from queues.models import Reservation, TeamQuota
from queues.policy.recorded import recorded_policy
from queues.policy.whatif import percentile, policy_configuration, recorded_jobs, replay_policy, with_holds
from queues.reservations.holds import cluster_holds, hold_name, lead

#: History replayed before and after the reservation's window placed in the past.
MARGIN = timedelta(days=1)
#: A job counts as delayed (or sped up) when its wait changed by more than this.
NOTICEABLE_SECONDS = 60.0
#: Jobs listed by name (the most delayed first); the totals count every job.
MAX_LISTED = 50


@dataclass(frozen=True)
class JobChange:
    """One recorded job whose wait the reservation changes: waits in seconds (None: still waiting at the end)."""

    job_id: int
    name: str
    team: str
    owner: str
    submitted_at: str
    wait_before: float | None
    wait_after: float | None

    @property
    def extra_seconds(self) -> float:
        """How much longer it waits with the reservation (negative: sooner); a job left waiting counts to the end."""
        return (self.wait_after or 0.0) - (self.wait_before or 0.0)


def placed_window(reservation: Reservation, *, now: datetime) -> tuple[datetime, datetime, int]:
    """The reservation's window moved back by whole weeks to the latest one that has ended, and how many weeks."""
    weeks = max(1, math.ceil((reservation.ends_at - now) / timedelta(days=7)))
    shift = timedelta(days=7 * weeks)
    return reservation.starts_at - shift, reservation.ends_at - shift, weeks


def reservation_whatif(
    *, reservation: Reservation, now: datetime | None = None, on_progress: Callable[[str, float], None] | None = None
) -> dict:
    """Replay recent history with and without ``reservation`` (placed in the past, see ``placed_window``); a
    JSON-ready result: the window, per-team figures, the jobs delayed and the reserving team's jobs sped up."""
    now = now or timezone.now()
    cluster = reservation.cluster
    placed_start, placed_end, weeks = placed_window(reservation, now=now)
    start, end = placed_start - MARGIN, min(now, placed_end + MARGIN)
    jobs, left_out = recorded_jobs(cluster=cluster, start=start, end=end)
    nodes = window_engine_nodes(cluster=cluster, start=start, end=end)
    current = policy_configuration(cluster=cluster, nodes=False)
    recorded = recorded_policy(cluster=cluster, start=start, end=end, now=replace(current, nodes=(), workloads=()))
    steps = [(ts(step.at), step.policy) for step in recorded.steps]
    history = tuple(h for h in cluster_holds(cluster=cluster, start=start, end=end) if h.name != hold_name(reservation))
    queue = TeamQuota.objects.filter(team=reservation.team, cluster=cluster).values_list(
        "cluster_queue_name", flat=True
    )
    added = m.QuotaHold(
        name=hold_name(reservation),
        cluster_queue=queue.first() or "",
        flavor=reservation.flavor.name,
        resource=reservation.resource_name,
        count=reservation.count,
        start=ts(placed_start - lead()),
        end=ts(placed_end),
        holder=reservation.team.name,
    )
    teams = dict(TeamQuota.objects.filter(cluster=cluster).values_list("cluster_queue_name", "team__name"))
    waits: dict[str, dict[str, float | None]] = {"current": {}, "proposed": {}}
    outcomes = {}
    for side, holds in (("current", history), ("proposed", (*history, added))):
        config, changes = with_holds(recorded.initial, steps, holds)
        report = None if on_progress is None else (lambda share, side=side: on_progress(side, share))
        outcomes[side] = replay_policy(
            config=config,
            changes=changes,
            jobs=jobs,
            start=ts(start),
            end=ts(end),
            teams=teams,
            nodes=nodes,
            on_progress=report,
            job_waits=waits[side],
        )
    by_key = {f"{r.job.team.namespace}/{workload_name(r.job)}": r.job for r in jobs if not r.carried_in}
    owners = dict(
        get_user_model().objects.filter(pk__in={j.owner_id for j in by_key.values()}).values_list("pk", "username")
    )
    changed: list[JobChange] = []
    for key, job in by_key.items():
        before, after = waits["current"].get(key), waits["proposed"].get(key)
        # a job still waiting at the end counts its wait to the end of the replay
        before_s = before if before is not None else (ts(end) - ts(job.submitted_at))
        after_s = after if after is not None else (ts(end) - ts(job.submitted_at))
        if abs(after_s - before_s) <= NOTICEABLE_SECONDS:
            continue
        changed.append(
            JobChange(
                job_id=job.pk,
                name=job.name,
                team=job.team.name,
                owner=owners.get(job.owner_id, ""),
                submitted_at=job.submitted_at.isoformat(),
                wait_before=before,
                wait_after=after,
            )
        )
    delayed = sorted((c for c in changed if c.extra_seconds > 0), key=lambda c: (-c.extra_seconds, c.job_id))
    sooner = sorted((c for c in changed if c.extra_seconds < 0), key=lambda c: (c.extra_seconds, c.job_id))
    per_team: dict[str, dict] = defaultdict(lambda: {"delayed": 0, "extra_hours": 0.0, "sooner": 0, "saved_hours": 0.0})
    for c in delayed:
        per_team[c.team]["delayed"] += 1
        per_team[c.team]["extra_hours"] += c.extra_seconds / 3600
    for c in sooner:
        per_team[c.team]["sooner"] += 1
        per_team[c.team]["saved_hours"] += -c.extra_seconds / 3600
    current_by, proposed_by = outcomes["current"].by_queue(), outcomes["proposed"].by_queue()
    team_rows = []
    for name in sorted(set(current_by) | set(proposed_by)):
        before, after = current_by.get(name), proposed_by.get(name)
        team = (after or before).team  # type: ignore[union-attr]
        team_rows.append(
            {
                "team": team,
                "cluster_queue": name,
                "jobs": (after or before).jobs,  # type: ignore[union-attr]
                "wait_p50_before": before.wait_p50_seconds if before else None,
                "wait_p50_after": after.wait_p50_seconds if after else None,
                "wait_p90_before": before.wait_p90_seconds if before else None,
                "wait_p90_after": after.wait_p90_seconds if after else None,
                "preemptions_before": before.preemptions if before else 0,
                "preemptions_after": after.preemptions if after else 0,
                **per_team.get(team, {"delayed": 0, "extra_hours": 0.0, "sooner": 0, "saved_hours": 0.0}),
            }
        )
    extra = [c.extra_seconds for c in delayed]
    return {
        "cluster": cluster.name,
        "start": start.isoformat(),
        "end": end.isoformat(),
        "placed_start": placed_start.isoformat(),
        "placed_end": placed_end.isoformat(),
        "weeks_back": weeks,
        "jobs": sum(1 for r in jobs if not r.carried_in),
        "carried_in": sum(1 for r in jobs if r.carried_in),
        "left_out": left_out,
        "reservations_in_history": [h.name for h in history],
        "delayed_count": len(delayed),
        "delayed_hours": sum(extra) / 3600,
        "delay_p50_seconds": percentile(extra, 0.5),
        "delay_max_seconds": max(extra, default=None),
        "sooner_count": len(sooner),
        "teams": team_rows,
        "delayed": [c.__dict__ | {"extra_seconds": c.extra_seconds} for c in delayed[:MAX_LISTED]],
        "sooner": [c.__dict__ | {"extra_seconds": c.extra_seconds} for c in sooner[:MAX_LISTED]],
        "unsettled": sorted({*outcomes["current"].unsettled, *outcomes["proposed"].unsettled}),
    }


__all__ = ["JobChange", "placed_window", "reservation_whatif"]
