"""Reads of the wait attribution: GPU-hours of waiting per week and cause (closed sums plus the open spans up to
now), per class and team, the jobs behind one week and cause, and the summary sentence.

Bounded query counts: the report is three queries whatever the range (weekly sums, open spans grouped in SQL,
class names; one more for the per-team sums of several teams), the drill-down two.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, F, QuerySet, Sum

from pools.models import ResourceClass
from queues.models import Job, Membership, Team, WaitOpen, WaitTally, WaitWeekly
from queues.waiting.causes import CAUSES, HARDWARE_CAUSES, cause_label
from queues.waiting.rollup import EPOCH, attribution_tz
from queues.waiting.spans import duration_us, week_bounds

US_PER_HOUR = 3_600_000_000


def hours(us: int) -> Decimal:
    """Device-µs as device-hours, to 0.001."""
    return (Decimal(us) / US_PER_HOUR).quantize(Decimal("0.001"))


def lead_teams_visible_to(user: AbstractBaseUser) -> QuerySet[Team]:
    """Teams whose waiting and costs the user may see: every team for staff, else the teams the user leads."""
    if not user.is_authenticated:
        return Team.objects.none()
    if user.is_staff or user.is_superuser:
        return Team.objects.all()
    return Team.objects.filter(memberships__user=user, memberships__role=Membership.Role.LEAD).distinct()


def weeks_between(first: date, last: date) -> list[date]:
    """Mondays from the week of ``first`` to the week of ``last``, inclusive."""
    monday = first - timedelta(days=first.weekday())
    out = []
    while monday <= last:
        out.append(monday)
        monday += timedelta(days=7)
    return out


@dataclass
class WaitReport:
    """Device-µs of waiting per week × cause, per class × cause and per team × cause, over a range of weeks."""

    weeks: list[date]
    by_week: dict[date, dict[str, int]] = field(default_factory=dict)
    #: Device-µs per (week, team id, class id, cause): what the CSV lists (read only when asked for).
    cells: dict[tuple[date, int, int, str], int] = field(default_factory=dict)
    by_class: dict[int, dict[str, int]] = field(default_factory=dict)
    by_team: dict[int, dict[str, int]] = field(default_factory=dict)
    class_names: dict[int, str] = field(default_factory=dict)
    #: Jobs still waiting in the teams (their open spans count up to the report's ``now``).
    waiting_jobs: int = 0
    now: datetime | None = None

    @property
    def total(self) -> dict[str, int]:
        """Device-µs per cause over the whole range."""
        out: dict[str, int] = defaultdict(int)
        for causes in self.by_week.values():
            for cause, us in causes.items():
                out[cause] += us
        return dict(out)

    @property
    def total_us(self) -> int:
        """Device-µs of waiting over the whole range."""
        return sum(self.total.values())

    @property
    def causes(self) -> list[str]:
        """Causes with any waiting in the range, in the closed set's order."""
        total = self.total
        return [c for c in CAUSES if total.get(c)]

    def week_total(self, week: date) -> int:
        """Device-µs of waiting in one week."""
        return sum(self.by_week.get(week, {}).values())


def _scope(qs: QuerySet, teams: Sequence[Team] | None, resource_class: ResourceClass | None) -> QuerySet:
    if teams is not None:
        qs = qs.filter(team__in=teams)
    if resource_class is not None:
        qs = qs.filter(resource_class=resource_class)
    return qs


def _open_groups(
    *, teams: Sequence[Team] | None, resource_class: ResourceClass | None, last_week: date
) -> Iterable[dict]:
    """The open spans grouped by (team, class, cause, week they started in): how many, Σ devices, Σ devices×since."""
    qs = _scope(WaitOpen.objects.filter(since_week__lte=last_week), teams, resource_class)
    return (
        qs.values("team_id", "resource_class_id", "cause", "since_week")
        .annotate(n=Count("pk"), n_devices=Sum("devices"), weighted=Sum(F("devices") * F("since_us")))
        .order_by()
    )


def open_weeks(group: dict, *, weeks: Sequence[date], now: datetime) -> Iterable[tuple[date, int]]:
    """(week, device-µs) that a group of open spans adds to each of ``weeks`` up to ``now``.

    In the week the spans started: Σ devices × (end of that week or now) − Σ devices × since; in each later week:
    Σ devices × (the week's part before now). Exact, from the group's two sums.
    """
    tz = attribution_tz()
    now_us = duration_us(EPOCH, now)
    for week in weeks:
        if week < group["since_week"]:
            continue
        lo, hi = week_bounds(week, tz)
        if lo >= now:
            break
        end_us = min(duration_us(EPOCH, hi), now_us)
        if week == group["since_week"]:
            us = group["n_devices"] * end_us - group["weighted"]
        else:
            us = group["n_devices"] * (end_us - duration_us(EPOCH, lo))
        if us > 0:
            yield week, us


def wait_report(
    *,
    teams: Sequence[Team] | None,
    first_week: date,
    last_week: date,
    now: datetime,
    resource_class: ResourceClass | None = None,
    cells: bool = False,
) -> WaitReport:
    """Waiting of ``teams`` (None: every team) from the week of ``first_week`` to the week of ``last_week``: the
    closed sums of the weekly rollup plus every open span up to ``now``. ``cells``: also per week × team × class ×
    cause (the CSV's rows); without them the sums are grouped in SQL (a year of every team is ~1,700 rows, not 40,000).
    """
    weeks = weeks_between(first_week, last_week)
    report = WaitReport(weeks=weeks, now=now)
    if not weeks:
        return report
    by_week: dict[date, dict[str, int]] = {w: defaultdict(int) for w in weeks}
    by_class: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    by_team: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    by_cell: dict[tuple[date, int, int, str], int] = defaultdict(int)
    closed = _scope(WaitWeekly.objects.filter(week__gte=weeks[0], week__lte=weeks[-1]), teams, resource_class)
    one_team = teams is not None and len(teams) == 1
    if cells:
        for row in (
            closed.values("team_id", "resource_class_id", "week", "cause").annotate(us=Sum("device_us")).order_by()
        ):
            by_cell[(row["week"], row["team_id"], row["resource_class_id"], row["cause"])] += row["us"]
            by_week[row["week"]][row["cause"]] += row["us"]
            by_class[row["resource_class_id"]][row["cause"]] += row["us"]
            by_team[row["team_id"]][row["cause"]] += row["us"]
    else:
        for row in closed.values("resource_class_id", "week", "cause").annotate(us=Sum("device_us")).order_by():
            by_week[row["week"]][row["cause"]] += row["us"]
            by_class[row["resource_class_id"]][row["cause"]] += row["us"]
            if one_team:
                by_team[teams[0].pk][row["cause"]] += row["us"]  # type: ignore[index]
        if not one_team:
            for row in closed.values("team_id", "cause").annotate(us=Sum("device_us")).order_by():
                by_team[row["team_id"]][row["cause"]] += row["us"]
    for group in _open_groups(teams=teams, resource_class=resource_class, last_week=weeks[-1]):
        report.waiting_jobs += group["n"]
        for week, us in open_weeks(group, weeks=weeks, now=now):
            if cells:
                by_cell[(week, group["team_id"], group["resource_class_id"], group["cause"])] += us
            by_week[week][group["cause"]] += us
            by_class[group["resource_class_id"]][group["cause"]] += us
            by_team[group["team_id"]][group["cause"]] += us
    report.by_week = {w: dict(c) for w, c in by_week.items()}
    report.cells = dict(by_cell)
    report.by_class = {k: dict(v) for k, v in by_class.items()}
    report.by_team = {k: dict(v) for k, v in by_team.items()}
    report.class_names = dict(ResourceClass.objects.filter(pk__in=list(by_class)).values_list("pk", "name"))
    return report


@dataclass(frozen=True)
class WaitJobRow:
    """One job behind a week and cause: its device-µs and wall µs of waiting there, and whether it still waits."""

    job: Job
    device_us: int
    wait_us: int
    still_waiting: bool

    @property
    def device_hours(self) -> Decimal:
        """Device-hours of waiting in that week and cause."""
        return hours(self.device_us)

    @property
    def wait_hours(self) -> Decimal:
        """Hours the job waited there."""
        return hours(self.wait_us)


@dataclass
class WaitJobs:
    """The jobs behind one week × cause: the first ``limit`` by device-hours, and how many there are in all."""

    week: date
    cause: str
    rows: list[WaitJobRow]
    count: int
    total_us: int

    @property
    def total_hours(self) -> Decimal:
        """GPU-hours of waiting of every job of the week and cause (not only those shown)."""
        return hours(self.total_us)


def wait_jobs(
    *,
    teams: Sequence[Team] | None,
    week: date,
    cause: str,
    now: datetime,
    resource_class: ResourceClass | None = None,
    limit: int = 50,
) -> WaitJobs:
    """The jobs whose waiting makes up ``cause`` in ``week`` (closed tallies plus open spans up to ``now``), most
    device-hours first."""
    week -= timedelta(days=week.weekday())
    per_job: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])
    closed = _scope(WaitTally.objects.filter(week=week, cause=cause), teams, resource_class).values_list(
        "job_id", "device_us", "wait_us"
    )
    for job_id, device_us, wait_us in closed:
        per_job[job_id][0] += device_us
        per_job[job_id][1] += wait_us
    lo, hi = week_bounds(week, attribution_tz())
    if lo < now:
        end = min(hi, now)
        spans = _scope(WaitOpen.objects.filter(cause=cause, since__lt=end), teams, resource_class).values_list(
            "job_id", "since", "devices"
        )
        for job_id, since, devices in spans:
            us = duration_us(max(since, lo), end)
            if us > 0:
                cell = per_job[job_id]
                cell[0] += devices * us
                cell[1] += us
                cell[2] = 1
    ranked = sorted(per_job.items(), key=lambda kv: (-kv[1][0], kv[0]))
    top = ranked[:limit]
    jobs = Job.objects.select_related("team", "resource_class", "owner").in_bulk([k for k, _ in top])
    rows = [WaitJobRow(jobs[k], v[0], v[1], bool(v[2])) for k, v in top if k in jobs]
    return WaitJobs(week=week, cause=cause, rows=rows, count=len(per_job), total_us=sum(v[0] for v in per_job.values()))


def wait_sentence(report: WaitReport, *, who: str, week: date, this_week: date) -> str:
    """'Computer Vision waited 312 GPU-hours this week: 58 % own quota used up, 22 % fragmentation, …' for one week
    of the report (the three largest causes; a hardware cause names its class when one class has most of it)."""
    causes = report.by_week.get(week, {})
    total = sum(causes.values())
    when = "this week" if week == this_week else f"in the week of {week:%d %b %Y}"
    if total <= 0:
        return f"{who} did not wait {when}."
    parts = []
    for cause, us in sorted(causes.items(), key=lambda kv: (-kv[1], CAUSES.index(kv[0])))[:3]:
        share = round(100 * us / total)
        if share < 1:
            break
        label = cause_label(cause)
        if cause in HARDWARE_CAUSES:
            label += _dominant_class(report, cause)
        parts.append(f"{share} % {label}")
    amount = hours(total)
    amount_text = f"{amount:,.0f}" if amount >= 10 else f"{amount:,.1f}"
    return f"{who} waited {amount_text} GPU-hours {when}: {', '.join(parts)}."


def _dominant_class(report: WaitReport, cause: str) -> str:
    """' (H100 80GB)' when one class holds more than half the range's waiting of ``cause``, else ''."""
    per_class = {k: v.get(cause, 0) for k, v in report.by_class.items()}
    total = sum(per_class.values())
    if not total:
        return ""
    class_id, us = max(per_class.items(), key=lambda kv: kv[1])
    if us * 2 <= total or class_id not in report.class_names:
        return ""
    return f" ({report.class_names[class_id]})"
