"""Reads of reservations: who sees which, the week calendar of a class, how much of a window was used, and the
catalogue's "free for the next 2 h 10 min"."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Q, QuerySet
from django.utils import timezone

from kernel.labels import duration_short
from pools.models import Allocation, Cluster, ResourceClass
from queues.models import Membership, Reservation, Team
from queues.reservations.capacity import healthy_capacity
from queues.reservations.holds import charged_window, until_text
from queues.visibility import sees_every_team

#: Reservations the catalogue mentions: in force now, or starting within this.
SOON = timedelta(hours=24)


def reservations_visible_to(user: AbstractBaseUser | AnonymousUser) -> QuerySet[Reservation]:
    """Every reservation for platform admins and operators; for others those of their teams.

    (The calendar shows every team's reservations of a class — when capacity is taken and by whom — through
    ``week_calendar``; their purposes only to the team and the admins: ``purpose_visible``.)
    """
    rows = Reservation.objects.select_related("team", "cluster", "flavor", "resource_class", "requested_by")
    if not user.is_authenticated:
        return rows.none()
    if sees_every_team(user):
        return rows
    return rows.filter(team__memberships__user=user).distinct()


def purpose_visible(user: AbstractBaseUser, reservation: Reservation) -> bool:
    """Whether ``user`` may read the reservation's purpose (its team's members, admins and operators)."""
    return sees_every_team(user) or Membership.objects.filter(team_id=reservation.team_id, user_id=user.pk).exists()


def lead_teams(user: AbstractBaseUser) -> QuerySet[Team]:
    """The teams ``user`` may reserve for: those they lead (every team for a platform admin)."""
    if getattr(user, "is_staff", False):
        return Team.objects.order_by("name")
    return Team.objects.filter(memberships__user=user, memberships__role=Membership.Role.LEAD).distinct()


# --------------------------------------------------------------------------- use of a window


@dataclass(frozen=True)
class WindowUse:
    """Device-seconds a window reserved, and how many of them the team's jobs used (capped at the count)."""

    reserved_seconds: float
    used_seconds: float

    @property
    def unused_seconds(self) -> float:
        """Reserved but not used."""
        return max(self.reserved_seconds - self.used_seconds, 0.0)

    @property
    def used_share(self) -> float | None:
        """Used ÷ reserved (None before the window)."""
        return self.used_seconds / self.reserved_seconds if self.reserved_seconds else None


def capped_use(
    intervals: Iterable[tuple[datetime, datetime | None]], *, count: int, start: datetime, end: datetime
) -> float:
    """Device-seconds in [start, end) of devices held over ``intervals`` (one per device, open-ended ones to ``end``),
    at most ``count`` at a time: the part of a reservation of ``count`` that jobs used."""
    points: list[tuple[datetime, int]] = []
    for began, ended in intervals:
        a, b = max(began, start), min(ended or end, end)
        if a < b:
            points += [(a, 1), (b, -1)]
    points.sort()
    used, level, last = 0.0, 0, start
    for when, step in points:
        used += min(level, count) * (when - last).total_seconds()
        level += step
        last = when
    return used


def held_intervals(
    reservation: Reservation, *, start: datetime, end: datetime
) -> list[tuple[datetime, datetime | None]]:
    """(began, ended) of every device the reserving team's jobs held on the reserved hardware at some time in
    [start, end) (ended None: still held)."""
    held = Allocation.objects.filter(
        job__team_id=reservation.team_id,
        job__cluster_id=reservation.cluster_id,
        device__node__flavor_id=reservation.flavor_id,
        device__resource_name=reservation.resource_name,
        started_at__lt=end,
    ).filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start))
    return list(held.values_list("started_at", "ended_at"))


def window_use(reservation: Reservation, *, now: datetime | None = None) -> WindowUse | None:
    """How much of the window (to ``now`` when it is still open) the team's jobs used on the reserved hardware."""
    window = charged_window(reservation)
    if window is None:
        return None
    start, end = window[0], min(window[1], now or timezone.now())
    if end <= start:
        return WindowUse(0.0, 0.0)
    intervals = held_intervals(reservation, start=start, end=end)
    used = capped_use(intervals, count=reservation.count, start=start, end=end)
    return WindowUse(reserved_seconds=reservation.count * (end - start).total_seconds(), used_seconds=used)


# --------------------------------------------------------------------------- the week calendar


@dataclass
class CalendarEntry:
    """A reservation placed on a day of the week view: its part of that day, in hours from midnight."""

    reservation: Reservation
    day: date
    top: float
    height: float
    purpose_shown: bool
    use: WindowUse | None = None

    @property
    def hours_text(self) -> str:
        """ "09:00 – 17:00" of that day (24:00 for a window going on past midnight)."""

        def clock(hours: float) -> str:
            minutes = round(hours * 60)
            return f"{minutes // 60:02d}:{minutes % 60:02d}"

        return f"{clock(self.top)} – {clock(self.top + self.height)}"


@dataclass
class CalendarSlot:
    """One hour of one day: capacity that can run jobs, reserved, free."""

    start: datetime
    capacity: int
    reserved: int

    @property
    def free(self) -> int:
        """Capacity not reserved."""
        return max(self.capacity - self.reserved, 0)

    @property
    def over(self) -> bool:
        """Reserved beyond what can run now (devices went unhealthy since the approval)."""
        return self.reserved > self.capacity


@dataclass
class WeekCalendar:
    """A class's week: the days, each hour's capacity and reservations, and the reservations placed on the days."""

    resource_class: ResourceClass
    cluster: Cluster | None
    week_start: datetime
    days: list[date]
    capacity: int
    rows: list[list[CalendarSlot]] = field(default_factory=list)  # per hour of the day, one slot per day
    entries: dict[date, list[CalendarEntry]] = field(default_factory=dict)
    waiting: list[Reservation] = field(default_factory=list)

    @property
    def by_day(self) -> list[tuple[date, list[CalendarEntry]]]:
        """The days with reservations, in order, with theirs."""
        return [(day, self.entries[day]) for day in self.days if self.entries.get(day)]

    @property
    def previous_week(self) -> date:
        """The Monday before."""
        return (self.week_start - timedelta(days=7)).date()

    @property
    def next_week(self) -> date:
        """The Monday after."""
        return (self.week_start + timedelta(days=7)).date()


def week_start_of(day: date | None = None) -> datetime:
    """Monday 00:00 (local time) of the week holding ``day`` (default: today)."""
    day = day or timezone.localdate()
    monday = day - timedelta(days=day.weekday())
    return datetime(monday.year, monday.month, monday.day, tzinfo=timezone.get_current_timezone())


def week_calendar(
    *, resource_class: ResourceClass, cluster: Cluster | None, week: date | None, user: AbstractBaseUser, now=None
) -> WeekCalendar:
    """The week view of a class on a cluster: per hour its healthy capacity (as it is now), what approved reservations
    hold and what is free; every reservation of the week placed on its days (requested ones listed apart)."""
    now = now or timezone.now()
    start = week_start_of(week)
    end = start + timedelta(days=7)
    flavors = [link.flavor for link in resource_class.flavor_links.select_related("flavor").order_by("order", "pk")]
    capacity = 0
    if cluster is not None:
        capacity = sum(
            healthy_capacity(cluster=cluster, flavor=f, resource_name=resource_class.resource_name) for f in flavors
        )
    rows = Reservation.objects.filter(
        flavor__in=flavors,
        resource_name=resource_class.resource_name,
        state__in=(Reservation.State.APPROVED, Reservation.State.REQUESTED, Reservation.State.CANCELLED),
        starts_at__lt=end,
        ends_at__gt=start,
    ).select_related("team", "flavor", "requested_by")
    if cluster is not None:
        rows = rows.filter(cluster=cluster)
    reservations = list(rows.order_by("starts_at", "pk"))
    approved = [
        r
        for r in reservations
        if r.state != Reservation.State.REQUESTED and charged_window(r) is not None and r.window_end > r.starts_at
    ]
    days = [(start + timedelta(days=i)).date() for i in range(7)]
    calendar = WeekCalendar(
        resource_class=resource_class, cluster=cluster, week_start=start, days=days, capacity=capacity
    )
    for hour in range(24):
        row = []
        for i in range(7):
            slot_start = start + timedelta(days=i, hours=hour)
            slot_end = slot_start + timedelta(hours=1)
            reserved = sum(r.count for r in approved if r.starts_at < slot_end and r.window_end > slot_start)
            row.append(CalendarSlot(start=slot_start, capacity=capacity, reserved=reserved))
        calendar.rows.append(row)
    teams_of_user = set(Membership.objects.filter(user_id=user.pk).values_list("team_id", flat=True))
    every = sees_every_team(user)
    for r in approved:
        use = window_use(r, now=now) if r.starts_at <= now else None
        for i, day in enumerate(days):
            day_start = start + timedelta(days=i)
            a, b = max(r.starts_at, day_start), min(r.window_end, day_start + timedelta(days=1))
            if a >= b:
                continue
            calendar.entries.setdefault(day, []).append(
                CalendarEntry(
                    reservation=r,
                    day=day,
                    top=(a - day_start).total_seconds() / 3600,
                    height=(b - a).total_seconds() / 3600,
                    purpose_shown=every or r.team_id in teams_of_user,
                    use=use,
                )
            )
    calendar.waiting = [r for r in reservations if r.state == Reservation.State.REQUESTED]
    return calendar


# --------------------------------------------------------------------------- the catalogue


@dataclass(frozen=True)
class ReservedSoon:
    """A reservation on a class's hardware, in force now or starting soon, as the catalogue card says it."""

    reservation: Reservation
    starts_in: timedelta  # zero when in force
    own: bool

    @property
    def in_force(self) -> bool:
        """Whether it holds capacity now."""
        return self.starts_in <= timedelta(0)


def reserved_soon_by_class(
    *, cluster: Cluster | None, classes: list[ResourceClass], team: Team | None, now: datetime | None = None
) -> dict[int, list[ReservedSoon]]:
    """Per class (by pk): the approved reservations of its hardware in force now or starting within ``SOON``,
    soonest first — one query for every class (their flavor links are read through ``flavor_links``)."""
    out: dict[int, list[ReservedSoon]] = {rc.pk: [] for rc in classes}
    if cluster is None or not classes:
        return out
    now = now or timezone.now()
    flavors = {rc.pk: {link.flavor_id for link in rc.flavor_links.all()} for rc in classes}
    rows = Reservation.objects.filter(
        cluster=cluster,
        flavor_id__in=set().union(*flavors.values()),
        state=Reservation.State.APPROVED,
        starts_at__lt=now + SOON,
        ends_at__gt=now,
    ).select_related("team", "flavor")
    for r in rows.order_by("starts_at", "pk"):
        for rc in classes:
            if r.flavor_id in flavors[rc.pk] and r.resource_name == rc.resource_name:
                own = team is not None and r.team_id == team.pk
                out[rc.pk].append(ReservedSoon(reservation=r, starts_in=max(r.starts_at - now, timedelta(0)), own=own))
    return out


def reserved_soon(
    *, cluster: Cluster | None, resource_class: ResourceClass, team: Team | None, now: datetime | None = None
) -> list[ReservedSoon]:
    """Approved reservations of the class's hardware in force now or starting within ``SOON``, soonest first."""
    return reserved_soon_by_class(cluster=cluster, classes=[resource_class], team=team, now=now)[resource_class.pk]


def span_text(span: timedelta) -> str:
    """ "2 h 10 min", "45 min", "3 d 4 h"."""
    return duration_short(span.total_seconds())


__all__ = [
    "SOON",
    "CalendarEntry",
    "CalendarSlot",
    "ReservedSoon",
    "WeekCalendar",
    "WindowUse",
    "capped_use",
    "catalogue_notes",
    "held_intervals",
    "lead_teams",
    "purpose_visible",
    "reservations_visible_to",
    "reserved_soon",
    "reserved_soon_by_class",
    "span_text",
    "week_calendar",
    "week_start_of",
    "window_use",
]


def catalogue_notes(*, available: int, reserved: list[ReservedSoon], now: datetime | None = None) -> list[str]:
    """What a catalogue card says of the reservations on its hardware: capacity held now, and capacity free now but
    reserved soon ("4 free now, for the next 2 h 10 min: reservation #12 holds 8 for Speech from 14:00 UTC")."""
    now = now or timezone.now()
    notes = []
    for soon in reserved:
        r = soon.reservation
        until = until_text(r.ends_at, now=now)
        starts = until_text(r.starts_at, now=now)
        if soon.in_force:
            whose = "your team" if soon.own else r.team.name
            notes.append(f"{r.count} reserved for {whose} until {until} (reservation #{r.pk}).")
        elif soon.own:
            notes.append(
                f"Your team's reservation #{r.pk} of {r.count} starts in {span_text(soon.starts_in)} ({starts})."
            )
        elif available > 0:
            notes.append(
                f"{available} free now, for the next {span_text(soon.starts_in)}: reservation #{r.pk} holds {r.count} "
                f"for {r.team.name} from {starts} to {until}."
            )
        else:
            notes.append(f"Reservation #{r.pk} holds {r.count} for {r.team.name} from {starts} to {until}.")
    return notes
