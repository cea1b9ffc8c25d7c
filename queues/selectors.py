"""Reads of job scheduling for researchers: teams, visible jobs, the class catalogue, timelines, queue facts.

``jobs_visible_to`` is the one visibility rule (queues.visibility, re-exported here with the teams and roles):
the pages, the REST API and anything else that lists or opens a job go through it.
"""

from __future__ import annotations

import base64
import binascii
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from kernel.quantity import parse_quantity
from pools.models import (
    USABLE_HEALTH,
    Allocation,
    Cluster,
    Device,
    DeviceHealthTransition,
    Node,
    ResourceClass,
    ResourceFlavor,
    Topology,
)
from pools.selectors import SHARING_KIND, ClassCapacity, class_capacity, class_matches_software
from pools.workload_kinds import KINDS, kind_spec
from queues.models import Job, JobEvent, PriorityClass, QuotaLine, Team, TeamQuota, WaitReason
from queues.reservations.selectors import catalogue_notes, reserved_soon_by_class
from queues.visibility import (  # noqa: F401  (re-exported: the callers read them as queues.selectors.*)
    OPERATOR_GROUP,
    OPERATOR_PERMISSION,
    OPERATOR_PERMISSIONS,
    is_platform_admin,
    jobs_visible_to,
    may_act_on_job,
    sees_every_team,
    team_for,
    teams_of,
)

HOSTNAME_LABEL = "kubernetes.io/hostname"

# --------------------------------------------------------------------------- teams and visibility (queues.visibility)


def priority_classes_for(team: Team) -> QuerySet[PriorityClass]:
    """The priority classes the team may submit with: those allowed to it, or every one when none is chosen."""
    allowed = PriorityClass.objects.filter(teams=team)
    if not allowed.exists():
        allowed = PriorityClass.objects.all()
    return allowed.order_by("-value", "name")


def team_quota(team: Team, cluster: Cluster | None = None) -> TeamQuota | None:
    """The team's ClusterQueue in ``cluster``, or the one job submission uses by default."""
    quotas = team.quotas.select_related("cluster", "cohort")
    if cluster is not None:
        quotas = quotas.filter(cluster=cluster)
    return quotas.first()


def team_cluster(team: Team) -> Cluster | None:
    """The cluster a new job of the team goes to (the same rule as ``job_submit``)."""
    quota = team_quota(team)
    return quota.cluster if quota else None


def declared_resources(team: Team, cluster: Cluster) -> set[str]:
    """Resources the team's ClusterQueue declares (the engine manages only those)."""
    return set(
        QuotaLine.objects.filter(team_quota__team=team, team_quota__cluster=cluster).values_list(
            "resource_name", flat=True
        )
    )


# --------------------------------------------------------------------------- hardware behind a class


def level_label(level: str) -> str:
    """A topology level for people: ``cloud.provider.com/topology-rack`` → ``rack``, hostname → ``node``."""
    if level == HOSTNAME_LABEL:
        return "node"
    name = level.rsplit("/", 1)[-1]
    return name.removeprefix("topology-").replace("-", " ") or level


def unit_noun(resource_name: str, n: int) -> str:
    """``8 GPUs``, ``1 MIG slice``, ``3 time-shared GPUs``, ``2 devices`` — the unit a class hands out."""
    plural = n != 1
    if "/mig-" in resource_name:
        word = "MIG slices" if plural else "MIG slice"
    elif resource_name.endswith(".shared"):
        word = "time-shared GPUs" if plural else "time-shared GPU"
    elif resource_name.endswith("/gpu"):
        word = "GPUs" if plural else "GPU"
    elif "neuron" in resource_name:
        word = "Neuron devices" if plural else "Neuron device"
    elif "tpu" in resource_name:
        word = "TPU chips" if plural else "TPU chip"
    else:
        word = "devices" if plural else "device"
    return f"{n} {word}"


@dataclass
class Product:
    """One kind of hardware behind a class: product name, memory per unit, how many."""

    product: str
    memory_bytes: int | None
    count: int


@dataclass
class ClassHardware:
    """What physically stands behind a class: products, node sizes and topology domains (any health)."""

    resource_class: ResourceClass
    products: list[Product] = field(default_factory=list)
    total_units: int = 0
    largest_node: int = 0
    topology_levels: list[str] = field(default_factory=list)
    largest_domain: dict[str, int] = field(default_factory=dict)


def classes_hardware(classes: Sequence[ResourceClass], *, cluster: Cluster | None = None) -> dict[int, ClassHardware]:
    """Hardware behind each class (in ``cluster``, else in all clusters), in three queries for any number of classes."""
    out = {rc.pk: ClassHardware(resource_class=rc) for rc in classes}
    if not classes:
        return out
    links = {rc.pk: [link.flavor for link in rc.flavor_links.all()] for rc in classes}
    flavor_ids = {f.pk for flavors in links.values() for f in flavors}
    resources = {rc.resource_name for rc in classes}
    devices = Device.objects.filter(
        gone_at__isnull=True,
        node__gone_at__isnull=True,
        node__flavor_id__in=flavor_ids,
        resource_name__in=resources,
    )
    if cluster is not None:
        devices = devices.filter(node__cluster=cluster)
    rows = list(
        devices.values("node_id", "node__flavor_id", "resource_name", "kind", "product", "memory_bytes")
        .annotate(n=Count("id"))
        .order_by()
    )
    software = list(
        devices.values("node_id", "resource_name", "kind", "driver_version", "cuda_version")
        .annotate(n=Count("id"))
        .order_by()
    )
    node_ids = {r["node_id"] for r in rows}
    node_labels = dict(Node.objects.filter(pk__in=node_ids).values_list("pk", "labels"))
    for rc in classes:
        hw = out[rc.pk]
        ids = {f.pk for f in links[rc.pk]}
        kind = SHARING_KIND[rc.sharing]
        per_node: dict[int, int] = defaultdict(int)
        for row in software:
            if row["resource_name"] != rc.resource_name or row["kind"] != kind:
                continue
            if class_matches_software(rc, driver_version=row["driver_version"], cuda_version=row["cuda_version"]):
                per_node[row["node_id"]] += row["n"]
        products: dict[tuple[str, int | None], int] = defaultdict(int)
        for row in rows:
            if row["node__flavor_id"] in ids and row["resource_name"] == rc.resource_name and row["kind"] == kind:
                if row["node_id"] in per_node:
                    products[(row["product"], row["memory_bytes"])] += row["n"]
        per_node = {k: v for k, v in per_node.items() if k in node_labels}
        hw.products = [Product(p, mem, n) for (p, mem), n in sorted(products.items(), key=lambda kv: -kv[1])]
        hw.total_units = sum(per_node.values())
        hw.largest_node = max(per_node.values(), default=0)
        levels: list[str] = []
        for flavor in links[rc.pk]:
            if flavor.topology_id:
                for level in flavor.topology.levels:
                    if level not in levels:
                        levels.append(level)
        hw.topology_levels = levels
        for level in levels:
            domains: dict[str, int] = defaultdict(int)
            for node_id, n in per_node.items():
                labels = node_labels.get(node_id) or {}
                value = labels.get(level) if level != HOSTNAME_LABEL else labels.get(level, str(node_id))
                if value is not None:
                    domains[value] += n
            hw.largest_domain[level] = max(domains.values(), default=0)
    return out


def class_hardware(rc: ResourceClass, *, cluster: Cluster | None = None) -> ClassHardware:
    """Hardware behind one class (in ``cluster``, else in every cluster)."""
    return classes_hardware([rc], cluster=cluster)[rc.pk]


def allowed_topology_levels(rc: ResourceClass, hardware: ClassHardware | None = None) -> list[str]:
    """Topology levels a job of the class may name: its flavors' levels, not wider than a required class rule."""
    levels = (hardware or class_hardware(rc)).topology_levels
    if rc.topology_mode == ResourceClass.TopologyMode.REQUIRED and rc.topology_level in levels:
        return levels[levels.index(rc.topology_level) :]
    return levels


def active_classes() -> QuerySet[ResourceClass]:
    """Every active class, with its flavors and topologies prefetched."""
    return ResourceClass.objects.filter(active=True).prefetch_related("flavor_links__flavor__topology")


def classes_for_team(team: Team | None, cluster: Cluster | None = None) -> QuerySet[ResourceClass]:
    """The active classes a team may submit to: its ClusterQueue (in ``cluster``, else the team's) has a quota
    line for one of the class's flavors and its resource (nominal 0 counts: the team may borrow).

    The one rule behind the catalogue, the submit form's choices, the API and the "another class" suggestions.
    """
    if team is None:
        return ResourceClass.objects.none()
    cluster = cluster or team_cluster(team)
    if cluster is None:
        return ResourceClass.objects.none()
    lines = QuotaLine.objects.filter(
        team_quota__team=team,
        team_quota__cluster=cluster,
        resource_name=OuterRef("resource_name"),
        flavor__class_links__resource_class=OuterRef("pk"),
    )
    return active_classes().filter(Exists(lines))


def filter_classes(user: AbstractBaseUser | AnonymousUser, team: Team | None) -> QuerySet[ResourceClass]:
    """The classes the job list's filter offers, by name: every class for those who see every team; else the
    classes the team may submit to and those any of its jobs used (a class retired since is still findable)."""
    if sees_every_team(user):
        return ResourceClass.objects.order_by("name", "pk")
    if team is None:
        return ResourceClass.objects.none()
    used = Job.objects.filter(team=team, resource_class=OuterRef("pk"))
    offered = classes_for_team(team).values("pk")
    return ResourceClass.objects.filter(Q(pk__in=offered) | Q(Exists(used))).order_by("name", "pk")


def class_choice_error(team: Team | None, rc: ResourceClass | None = None) -> str:
    """Why a class is not one the team may pick (for the form's and the API's field error)."""
    if team is None:
        return "you are not a member of any team, so no class is available to you"
    if team_cluster(team) is None:
        return f"team {team.slug} has no quota in any cluster: ask an admin to set one up"
    if rc is not None and not rc.active:
        return f"class {rc.slug} is not offered any more: pick one of your team's classes"
    which = f"class {rc.slug}" if rc is not None else "that class"
    return f"{which} is not available to team {team.slug} (its queue has no quota for it): pick one of its classes"


def class_offer_errors(team: Team, rc: ResourceClass) -> dict[str, list[str]]:
    """A field error when ``rc`` is not one of the team's classes (inactive or without quota); else nothing."""
    if classes_for_team(team).filter(pk=rc.pk).exists():
        return {}
    return {"resource_class": [class_choice_error(team, rc)]}


# --------------------------------------------------------------------------- catalogue


@dataclass
class QuotaUse:
    """The team's quota on one flavor of a class and what its running jobs hold there now."""

    flavor: ResourceFlavor
    nominal: int
    borrowing_limit: int | None
    used: int

    @property
    def borrowed(self) -> int:
        """Units held above the nominal quota (borrowed from the cohort)."""
        return max(self.used - self.nominal, 0)


@dataclass
class ClassCard:
    """One card of the catalogue."""

    resource_class: ResourceClass
    capacity: ClassCapacity
    hardware: ClassHardware
    quota: list[QuotaUse]
    smallest_count: int
    in_cohort: bool = False
    eta: object | None = None  # a diagnosis.Eta, filled in by the diagnosis service
    #: What reservations of the class's hardware do now or soon ("free for the next 2 h 10 min: …").
    reservation_notes: list[str] = field(default_factory=list)
    #: The team's guarantees on the class's flavors that repairs leave unbacked (queues.guarantees; view fills in).
    guarantees: list = field(default_factory=list)

    @property
    def nominal(self) -> int:
        """The team's nominal quota over the class's flavors."""
        return sum(q.nominal for q in self.quota)

    @property
    def used(self) -> int:
        """Units of the class the team holds now."""
        return sum(q.used for q in self.quota)

    @property
    def borrowing_limit(self) -> int | None:
        """The most the team may borrow over the class's flavors (None: no limit set)."""
        limits = [q.borrowing_limit for q in self.quota]
        if not limits or any(v is None for v in limits):
            return None
        return sum(v for v in limits if v is not None)

    @property
    def borrowed(self) -> int:
        """Units the team holds above its nominal quota, over the class's flavors."""
        return sum(q.borrowed for q in self.quota)

    @property
    def borrow_left(self) -> int | None:
        """How much more the team may borrow under its borrowing limits (None: no limit set)."""
        if self.borrowing_limit is None:
            return None
        return sum(max((q.borrowing_limit or 0) - q.borrowed, 0) for q in self.quota)


def team_usage_by_flavor(team: Team) -> dict[tuple[int | None, str], int]:
    """Units the team's jobs hold now (open allocations) per (flavor id, resource name); one query."""
    rows = (
        Allocation.objects.filter(ended_at__isnull=True, job__team=team)
        .values("device__node__flavor_id", "device__resource_name")
        .annotate(n=Count("id"))
        .order_by()
    )
    return {(r["device__node__flavor_id"], r["device__resource_name"]): r["n"] for r in rows}


def class_catalogue(*, team: Team | None, cluster: Cluster | None = None, every_class: bool = False) -> list[ClassCard]:
    """A card per class of the team (``classes_for_team``; every active class with ``every_class``, for a platform
    admin outside any team): capacity now, hardware, the team's quota and use."""
    classes = list(active_classes() if every_class and team is None else classes_for_team(team, cluster))
    capacities = {c.resource_class.pk: c for c in class_capacity(cluster=cluster, classes=classes)}
    hardware = classes_hardware(classes, cluster=cluster)
    lines: list[QuotaLine] = []
    usage: dict[tuple[int | None, str], int] = {}
    in_cohort = False
    if team is not None:
        quota_row = team_quota(team, cluster)
        in_cohort = bool(quota_row and quota_row.cohort_id)
        lines_qs = QuotaLine.objects.filter(team_quota__team=team).select_related("flavor")
        if cluster is not None:
            lines_qs = lines_qs.filter(team_quota__cluster=cluster)
        lines = list(lines_qs)
        usage = team_usage_by_flavor(team)
    soon = reserved_soon_by_class(cluster=cluster or (team_cluster(team) if team else None), classes=classes, team=team)
    cards = []
    for rc in classes:
        flavors = [link.flavor for link in rc.flavor_links.all()]
        quota = []
        for flavor in flavors:
            for line in lines:
                if line.flavor_id == flavor.pk and line.resource_name == rc.resource_name:
                    quota.append(
                        QuotaUse(
                            flavor=flavor,
                            nominal=parse_quantity(line.nominal, rc.resource_name),
                            borrowing_limit=(
                                parse_quantity(line.borrowing_limit, rc.resource_name) if line.borrowing_limit else None
                            ),
                            used=usage.get((flavor.pk, rc.resource_name), 0),
                        )
                    )
        cards.append(
            ClassCard(
                resource_class=rc,
                capacity=capacities[rc.pk],
                hardware=hardware[rc.pk],
                quota=quota,
                smallest_count=min(rc.allowed_counts or [1]),
                in_cohort=in_cohort,
                reservation_notes=catalogue_notes(available=capacities[rc.pk].available, reserved=soon[rc.pk]),
            )
        )
    return cards


# --------------------------------------------------------------------------- job list (keyset pagination)


@dataclass
class JobFilters:
    """Filters of a job list; every field optional."""

    mine: bool = False
    state: str = ""
    resource_class: ResourceClass | None = None
    owner: AbstractBaseUser | None = None
    owner_username: str = ""
    submitted_from: date | None = None
    submitted_to: date | None = None


@dataclass
class Cursor:
    """A position in the list: the (submitted_at, id) of a row and which way to read from it."""

    submitted_at: datetime
    pk: int
    direction: str  # "older" (next page) or "newer" (previous page)

    def encode(self) -> str:
        """An opaque URL-safe token."""
        raw = f"{self.direction[0]}|{self.submitted_at.isoformat()}|{self.pk}"
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, token: str | None) -> Cursor | None:
        """The cursor in ``token``; ``None`` for an empty or malformed token (the first page is shown)."""
        if not token:
            return None
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
            direction, when, pk = raw.split("|")
            at = parse_datetime(when)
            if at is None or direction not in ("o", "n"):
                return None
            return cls(submitted_at=at, pk=int(pk), direction="older" if direction == "o" else "newer")
        except (ValueError, UnicodeDecodeError, binascii.Error):
            return None


@dataclass
class JobPage:
    """One page of jobs and the cursors around it (no total count: counting a million rows costs too much)."""

    jobs: list[Job]
    next_cursor: str | None
    prev_cursor: str | None

    @property
    def is_first(self) -> bool:
        """Whether this is the newest page."""
        return self.prev_cursor is None


def filter_jobs(qs: QuerySet[Job], filters: JobFilters, *, user: AbstractBaseUser | None = None) -> QuerySet[Job]:
    """Apply list filters; each maps onto an index that starts with team or owner."""
    if filters.mine and user is not None:
        qs = qs.filter(owner=user)
    if filters.owner is not None:
        qs = qs.filter(owner=filters.owner)
    elif filters.owner_username:
        qs = qs.filter(owner__username=filters.owner_username)
    if filters.state:
        qs = qs.filter(state=filters.state)
    if filters.resource_class is not None:
        qs = qs.filter(resource_class=filters.resource_class)
    tz = timezone.get_current_timezone()
    if filters.submitted_from:
        qs = qs.filter(submitted_at__gte=datetime.combine(filters.submitted_from, datetime.min.time(), tzinfo=tz))
    if filters.submitted_to:
        end = datetime.combine(filters.submitted_to + timedelta(days=1), datetime.min.time(), tzinfo=tz)
        qs = qs.filter(submitted_at__lt=end)
    return qs


#: What a row of a job list (page or API) reads; the rest of a job (command, env, assignment…) is left behind.
LIST_COLUMNS = (
    "id",
    "name",
    "team__slug",
    "team__name",
    "owner__username",
    "resource_class__slug",
    "resource_class__name",
    "state",
    "kind",
    "devices_per_pod",
    "pod_count",
    "companion_pod_sets",
    "priority",
    "submitted_at",
    "started_at",
    "finished_at",
    "wait_reason",
    "wait_since",
)


def job_list_page(qs: QuerySet[Job], *, cursor: Cursor | None, per_page: int = 50) -> JobPage:
    """A page of ``qs`` newest first, keyset-paginated on (submitted_at, id): cost independent of depth.

    The range condition ``submitted_at <= t`` comes first so the (team|owner, -submitted_at, -id) indexes
    bound the scan; the tie on equal timestamps is broken by id. One query per page.
    """
    qs = qs.select_related("owner", "resource_class", "team").only(*LIST_COLUMNS)
    if cursor is None:
        rows = list(qs.order_by("-submitted_at", "-id")[: per_page + 1])
        more = len(rows) > per_page
        rows = rows[:per_page]
        return JobPage(jobs=rows, next_cursor=_cursor(rows[-1], "older") if more else None, prev_cursor=None)
    t, pk = cursor.submitted_at, cursor.pk
    if cursor.direction == "older":
        page_qs = qs.filter(submitted_at__lte=t).filter(Q(submitted_at__lt=t) | Q(id__lt=pk))
        rows = list(page_qs.order_by("-submitted_at", "-id")[: per_page + 1])
        more = len(rows) > per_page
        rows = rows[:per_page]
        return JobPage(
            jobs=rows,
            next_cursor=_cursor(rows[-1], "older") if more else None,
            prev_cursor=_cursor(rows[0], "newer") if rows else None,
        )
    page_qs = qs.filter(submitted_at__gte=t).filter(Q(submitted_at__gt=t) | Q(id__gt=pk))
    rows = list(page_qs.order_by("submitted_at", "id")[: per_page + 1])
    more = len(rows) > per_page
    rows = list(reversed(rows[:per_page]))
    if not more:  # reached the newest rows: show the first page as it is now
        return job_list_page(qs, cursor=None, per_page=per_page)
    return JobPage(
        jobs=rows,
        next_cursor=_cursor(rows[-1], "older") if rows else None,
        prev_cursor=_cursor(rows[0], "newer") if rows else None,
    )


def _cursor(job: Job, direction: str) -> str:
    """The cursor just past ``job`` in ``direction``."""
    return Cursor(submitted_at=job.submitted_at, pk=job.pk, direction=direction).encode()


# --------------------------------------------------------------------------- one job


@dataclass
class TimelineEntry:
    """One event of a job's timeline and how long what it started lasted."""

    event: JobEvent
    duration: timedelta | None
    ongoing: bool
    message: str = ""
    details: dict = field(default_factory=dict)
    #: The ongoing wait reason's sentence when it began, when its figures moved since (``message`` is today's).
    first_message: str = ""
    #: The event's kind in words ("Stopped" for a session or service that was cancelled).
    label: str = ""

    @property
    def code(self) -> str:
        """The wait-reason code of a wait-reason change ("" for other events)."""
        return str((self.event.details or {}).get("code", "")) if self.event.kind == JobEvent.Kind.WAIT_REASON else ""


#: Events that do not end the period the previous event started (a wait reason lasts through them).
_PASSING_KINDS = {JobEvent.Kind.NOTE, JobEvent.Kind.CHECKPOINT_REQUESTED, JobEvent.Kind.PREEMPTING}


def job_timeline(job: Job, *, now: datetime | None = None, redactor=None) -> list[TimelineEntry]:
    """Every event of the job in order, each with the time until the next event that changed something; with a
    ``redactor`` (queues.privacy), other teams' jobs named as their team only."""
    now = now or timezone.now()
    events = list(job.events.order_by("at", "id"))
    levels = sorted({lv for levels in Topology.objects.values_list("levels", flat=True) for lv in levels}, key=len)
    entries = []

    stopped = "Stopped" if job.kind_spec.runs_until_stopped else ""

    def said(text: str) -> str:
        for level in reversed(levels):  # longest first
            text = text.replace(level, level_label(level))
        return redactor.text(text) if redactor is not None else text

    for i, event in enumerate(events):
        end = next((e.at for e in events[i + 1 :] if e.kind not in _PASSING_KINDS), None)
        ongoing = end is None and not job.is_final
        if end is None and ongoing:
            end = now
        message, first = said(event.message), ""
        details = dict(event.details or {})
        if redactor is not None:
            details = redactor.details(details)
        current = (
            ongoing
            and event.kind == JobEvent.Kind.WAIT_REASON
            and job.state == Job.State.PENDING
            and details.get("code") == job.wait_reason
            and job.wait_message
            and job.wait_message != event.message
        )
        if current:
            # The reason stands, its figures moved (the tick refreshes them): today's sentence, as the header says.
            message, first = said(job.wait_message), message
        entries.append(
            TimelineEntry(
                event=event,
                duration=(end - event.at) if end else None,
                ongoing=ongoing,
                message=message,
                details=details,
                first_message=first,
                label=stopped if event.kind == JobEvent.Kind.CANCELLED and stopped else event.get_kind_display(),
            )
        )
    return entries


#: The order of a team's queue on a cluster: priority, then queue time (what ``queue_position`` counts in).
QUEUE_ORDER = ("-priority", "queued_at", "id")


def queue_position(job: Job) -> tuple[int, int] | None:
    """(position, length) among the pending jobs of the job's ClusterQueue, by priority then queue time."""
    if job.state != Job.State.PENDING:
        return None
    pending = Job.objects.filter(team_id=job.team_id, cluster_id=job.cluster_id, state=Job.State.PENDING)
    ahead = pending.filter(
        Q(priority__gt=job.priority)
        | Q(priority=job.priority, queued_at__lt=job.queued_at)
        | Q(priority=job.priority, queued_at=job.queued_at, id__lt=job.pk)
    )
    return ahead.count() + 1, pending.count()


def recent_queue_waits(*, team: Team, cluster: Cluster, now: datetime, days: int = 7, limit: int = 200) -> list[float]:
    """Seconds waited by the queue's recently admitted jobs (admitted − queued), newest first.

    Reads jobs submitted in the last ``days`` through the (team, -submitted_at, -id) index.
    """
    rows = (
        Job.objects.filter(
            team=team, cluster=cluster, submitted_at__gte=now - timedelta(days=days), admitted_at__isnull=False
        )
        .order_by("-submitted_at", "-id")
        .values_list("queued_at", "admitted_at", "submitted_at")[:limit]
    )
    waits = []
    for queued, admitted, submitted in rows:
        start = queued if queued <= admitted else submitted
        waits.append(max((admitted - start).total_seconds(), 0.0))
    return waits


def recent_class_runtimes(*, resource_class: ResourceClass, limit: int = 200) -> list[float]:
    """Seconds run by the class's most recent successful jobs (started → finished)."""
    rows = (
        Job.objects.filter(
            resource_class=resource_class,
            state=Job.State.SUCCEEDED,
            started_at__isnull=False,
            finished_at__isnull=False,
        )
        .order_by("-id")
        .values_list("started_at", "finished_at")[:limit]
    )
    return [max((end - start).total_seconds(), 0.0) for start, end in rows]


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0–100) of ``values``, or None when there are none."""
    data = sorted(values)
    if not data:
        return None
    if len(data) == 1:
        return data[0]
    return statistics.quantiles(data, n=100, method="inclusive")[max(min(int(q), 99), 1) - 1]


def lent_out_details(*, cluster: Cluster, details: dict) -> dict:
    """A ``quota_lent_out`` reason's details with each holding queue's team name, and whether reclaim is on."""
    holders = details.get("lentTo") or []
    names = dict(
        TeamQuota.objects.filter(
            cluster=cluster, cluster_queue_name__in=[h.get("clusterQueue") for h in holders]
        ).values_list("cluster_queue_name", "team__name")
    )
    return {
        **details,
        "lentTo": [{**h, "team": names.get(h.get("clusterQueue"), h.get("clusterQueue"))} for h in holders],
        "reclaimOn": bool(details.get("reclaim")) and details.get("reclaim") != "Never",
    }


def eta_change(job: Job, *, before: dict | None, code: str) -> dict | None:
    """What the job page says when its estimate moved much since ``before`` (a stored earlier estimate): that
    estimate, when it was made, and what happened in the cluster since, in words (three aggregate queries).

    The causes are what can take the room a waiting job was to get: jobs admitted meanwhile (those that run
    until stopped never give it back), jobs that joined its queue ahead of it, devices that left the pool for
    health, and its own reason changing.
    """
    if not before:
        return None
    since = parse_datetime(before["at"])
    if since is None:
        return None
    causes = []
    if before.get("code") and before["code"] != code:
        causes.append(f"the reason changed ({_code_label(before['code'])} → {_code_label(code)})")
    admitted = (
        JobEvent.objects.filter(kind=JobEvent.Kind.ADMITTED, at__gt=since, job__cluster_id=job.cluster_id)
        .exclude(job=job)
        .values_list("job__kind", flat=True)
    )
    kinds = list(admitted)
    if kinds:
        forever = sum(1 for k in kinds if k in KINDS and kind_spec(k).runs_until_stopped)
        text = f"{len(kinds)} job{'s' if len(kinds) != 1 else ''} took capacity since"
        causes.append(text + (f" ({forever} of them run until stopped and give nothing back)" if forever else ""))
    ahead = (
        Job.objects.filter(team_id=job.team_id, cluster_id=job.cluster_id, state=Job.State.PENDING, queued_at__gt=since)
        .filter(priority__gt=job.priority)
        .count()
    )
    if ahead:
        causes.append(f"{ahead} job{'s' if ahead != 1 else ''} of higher priority joined its queue ahead of it")
    lost = (
        DeviceHealthTransition.objects.filter(device__node__cluster_id=job.cluster_id, at__gt=since)
        .exclude(after__in=USABLE_HEALTH)
        .count()
    )
    if lost:
        causes.append(f"{lost} device{'s' if lost != 1 else ''} left the pool for health")
    return {
        "at": since,
        "starts_now": bool(before.get("starts_now")),
        "p50": parse_datetime(before["p50"]) if before.get("p50") else None,
        "causes": causes or ["the running jobs' expected ends moved (their runtimes were re-estimated)"],
    }


def _code_label(code: str) -> str:
    return WaitReason(code).label if code in WaitReason.values else code or "none"
