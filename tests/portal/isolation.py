"""The world of the isolation tests (tests/portal/test_isolation_*.py): two teams, a job, a token, the roles."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth.models import Group
from django.urls import reverse
from django.utils import timezone

from notify.delivery import delivery_send, digest_claim
from notify.models import Delivery, Preference
from pools.models import RepairTicket
from queues import selectors as sel
from queues import services
from queues.api.tokens import api_token_create
from queues.models import ApiToken, Job, Membership, PolicyPreview, Reservation, ReservationPreview
from tests.browser.scenarios import Pool, occupy, research_pool
from tests.factories import JobFactory, MembershipFactory, UserFactory

ROLES = ("anonymous", "outsider", "member", "lead", "staff", "operator", "admin")
METHODS = ("GET", "POST", "HX")

#: 302 to the portal's sign-in page, ``next`` = the URL asked for.
LOGIN = "login"
#: An htmx request without a session: 200 with ``HX-Redirect`` to the sign-in page (the whole page goes there).
HX_LOGIN = "hx-login"
#: 302 to the admin's sign-in page (the admin site's own guard: signed in but not staff is sent there too).
ADMIN_LOGIN = "admin-login"


@dataclass
class World:
    """What the matrix's URLs point at (all of team vision) and who asks."""

    pool: Pool
    users: dict
    job: Job
    token: ApiToken
    ticket: RepairTicket
    preview: PolicyPreview
    #: Vision's reservation (carol asked; waiting for an admin) and a queued what-if of it.
    reservation: Reservation | None = None
    reservation_preview: ReservationPreview | None = None


def build_world() -> World:
    """Two teams on one small simulated pool, a pending job and a token of alice (vision), a ticket, a preview, a
    reservation of vision waiting for an admin and its queued preview."""
    pool = research_pool(racks={"rack-a": [2]})
    carol = UserFactory(username="carol")
    MembershipFactory(team=pool.team, user=carol, role=Membership.Role.LEAD)
    staff = UserFactory(username="staffer", is_staff=True)
    operator = UserFactory(username="watcher")
    operator.groups.add(Group.objects.get(name=sel.OPERATOR_GROUP))
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    job = JobFactory(team=pool.team, owner=pool.user, cluster=pool.cluster, resource_class=pool.rc, name="secret-run")
    token = api_token_create(user=pool.user, team=pool.team, name="ci").token
    now = timezone.now()
    node = pool.nodes[0]
    ticket = RepairTicket.objects.create(node=node, reason="XID 79", opened_at=now, state_changed_at=now)
    preview = PolicyPreview.objects.create(
        requested_by=root,
        requested_at=now - timedelta(minutes=1),
        model_label="queues.teamquota",
        object_id=str(pool.quota.pk),
        object_repr=str(pool.quota),
        days=7,
    )
    start = (now + timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
    reservation = Reservation.objects.create(
        team=pool.team,
        cluster=pool.cluster,
        resource_class=pool.rc,
        flavor=pool.flavor,
        resource_name=pool.rc.resource_name,
        count=1,
        starts_at=start,
        ends_at=start + timedelta(hours=3),
        purpose="secret-eval",
        requested_by=carol,
        requested_at=now,
        reasons=["An admin decides reservations."],
    )
    reservation_preview = ReservationPreview.objects.create(
        reservation=reservation, requested_by=root, requested_at=now
    )
    users = {
        "anonymous": None,
        "outsider": pool.other_user,
        "member": pool.user,
        "lead": carol,
        "staff": staff,
        "operator": operator,
        "admin": root,
    }
    return World(
        pool=pool,
        users=users,
        job=job,
        token=token,
        ticket=ticket,
        preview=preview,
        reservation=reservation,
        reservation_preview=reservation_preview,
    )


def notify_across_teams(w: World, *, webhook_url: str = "") -> Job:
    """bob's (speech) running job preempted to make room for vision's job, and the notification delivered to bob
    on his channels (email, and ``webhook_url`` when given): the text that crosses teams, which his notifications
    page, digest, email and webhook must name as "a job of team vision" only."""
    bob = w.users["outsider"]
    Preference.objects.update_or_create(user=bob, defaults={"email": True, "webhook_url": webhook_url})
    runs = Job.objects.filter(team=w.pool.other_team).count()
    victim = occupy(w.pool, node=w.pool.nodes[0], count=1, team=w.pool.other_team, name=f"asr-{runs}")
    now = timezone.now()
    services.job_preempt(victim, now=now, preemptor=w.job, reason="InClusterQueue", message="Preempted")
    later = now + timedelta(minutes=1)  # past the gathering window
    digest_claim(recipient_id=bob.pk, now=later)
    for delivery in Delivery.objects.filter(digest__recipient=bob, state=Delivery.State.SENDING):
        delivery_send(delivery_id=delivery.pk, now=later)
    return victim


def fresh(w: World) -> World:
    """``w`` with its job, token, ticket and preview read again: a shared world's objects as its database has them
    now (an earlier test's changes were rolled back, not its Python objects)."""
    for obj in (w.job, w.token, w.ticket, w.preview, w.reservation, w.reservation_preview):
        if obj is not None:
            obj.refresh_from_db()
    return w


def describe(response) -> object:
    """The answer as the matrix writes it: a status, or LOGIN / HX_LOGIN / ADMIN_LOGIN."""
    status = response.status_code
    location = response.headers.get("Location", "")
    if status == 302 and location.startswith(reverse("login") + "?next="):
        return LOGIN
    if status == 302 and location.startswith(reverse("admin:login") + "?next="):
        return ADMIN_LOGIN
    if status == 200 and response.headers.get("HX-Redirect", "").startswith(reverse("login") + "?next="):
        return HX_LOGIN
    return status
