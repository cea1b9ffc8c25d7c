"""The isolation matrix: every URL of the portal × every role × GET, POST and an htmx GET, with the answer expected.

The routes are read from the URL resolver (``get_resolver()``, recursively), not listed by hand: a new endpoint
without an entry in ``MATRIX`` fails ``test_isolation_matrix`` (its cases say "no matrix entry"), and an entry
whose route is gone fails ``test_matrix_has_no_stale_entry``. The Django admin site is one group: its index and
the changelist of every registered model (``admin.site._registry``), GET by every role.

Roles (``World``): anonymous; ``outsider`` (bob, a researcher of another team, speech); ``member`` (alice, of team
vision, who owns the job and the token); ``lead`` (carol, lead of vision); ``staff`` (is_staff, no permission, no
team); ``operator`` (the read-only ``operator`` group); ``admin`` (superuser). The objects in the URLs belong to
team vision. How to add an entry for a new endpoint: docs/operations.md, "Security model".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from django.contrib import admin
from django.core import mail
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone

from notify.models import Digest
from tests.notify.receiver import Receiver
from tests.portal.isolation import (
    ADMIN_LOGIN,
    HX_LOGIN,
    LOGIN,
    METHODS,
    ROLES,
    World,
    build_world,
    describe,
    fresh,
    notify_across_teams,
)
from tests.shared_db import shared_rows


def who(default, **overrides) -> dict:
    """An expected answer per role: ``default`` for every role not named."""
    unknown = set(overrides) - set(ROLES)
    assert not unknown, unknown
    return {role: overrides.get(role, default) for role in ROLES}


@dataclass(frozen=True)
class Row:
    """One route: its URL in the world, the POST body, and the expected answer per role for each method."""

    url: Callable[[World], str]
    get: dict
    post: dict
    hx: dict
    body: Callable[[World], dict] = field(default=lambda w: {})
    json: bool = False  # the API: POST the body as JSON


def fixed(path: str) -> Callable[[World], str]:
    """A URL without objects in it."""
    return lambda w: path


JOB_BODY = {"name": "resnet", "image": "registry.example.org/vision/train:1.2", "resource_class": "h100"}


#: The submit form's fields (the form also wants the counts).
JOB_FORM = {**JOB_BODY, "devices_per_pod": 1, "pod_count": 1}


def reservation_body(w: World) -> dict:
    """A valid request of 1 H100 for vision, the day after its waiting one (the page's form: local times)."""
    start = timezone.localtime(w.reservation.starts_at + timedelta(days=1))
    return {
        "team": "vision",
        "resource_class": "h100",
        "count": 1,
        "starts_at": f"{start:%Y-%m-%dT%H:%M}",
        "ends_at": f"{start + timedelta(hours=2):%Y-%m-%dT%H:%M}",
        "purpose": "matrix",
    }


def api_reservation_body(w: World) -> dict:
    """The same request through the API (aware ISO times)."""
    start = w.reservation.starts_at + timedelta(days=1)
    return {
        **reservation_body(w),
        "starts_at": start.isoformat(),
        "ends_at": (start + timedelta(hours=2)).isoformat(),
    }


def api_job_body(w: World) -> dict:
    """A valid submission in team vision."""
    return {**JOB_BODY, "team": "vision"}


#: Route (as the resolver writes it) → expectations. Keep it in the resolver's order.

# Shorthands. Roles not named get the first argument.
ANY = who(200)
NO_POST = who(405)
SIGNED_IN = who(200, anonymous=LOGIN)
SIGNED_IN_HX = who(200, anonymous=HX_LOGIN)
GET_ONLY_PAGE = {"get": SIGNED_IN, "post": NO_POST, "hx": SIGNED_IN_HX}
#: The pool's health pages: staff and the operators (who read the pool), 403 to the others.
HEALTH_PAGE = {
    "get": who(403, anonymous=LOGIN, staff=200, operator=200, admin=200),
    "post": NO_POST,
    "hx": who(403, anonymous=HX_LOGIN, staff=200, operator=200, admin=200),
}
#: The admin site's guard: not staff → its sign-in page; staff without the permission → 403.
ADMIN_PERM = who(ADMIN_LOGIN, staff=403, admin=200)
#: A job of vision: another team's researcher does not find it; staff, operators and admins see every team's.
JOB_SEEN = who(200, anonymous=LOGIN, outsider=404)
JOB_SEEN_HX = who(200, anonymous=HX_LOGIN, outsider=404)
#: The API without credentials: 401 (it offers ``Token``), a method it lacks 405 once signed in.
API_SIGNED_IN = who(200, anonymous=401)
API_NO_POST = who(405, anonymous=401)
API_JOB = who(200, anonymous=401, outsider=404)
#: Acting in team vision through the API: its members only (admins and operators read every team, act in none).
API_IN_VISION = who(403, anonymous=401, member=200, lead=200)
#: The API of the team leads' reports (waiting, borrowing statements): the team's leads and staff.
API_LEADS = who(403, anonymous=401, lead=200, staff=200, admin=200)
#: Costs: a team's leads and staff (staff see every team); another team's, or a plain member, get 404.
COST = who(404, anonymous=LOGIN, lead=200, staff=200, admin=200)
COST_HX = who(404, anonymous=HX_LOGIN, lead=200, staff=200, admin=200)
#: A reservation of vision: like its job; deciding (and previews) is for platform admins (staff and superusers).
RESERVATION_SEEN = JOB_SEEN
RESERVATION_SEEN_HX = JOB_SEEN_HX
DECIDE = who(403, anonymous=LOGIN, outsider=404, staff=302, admin=302)
DECIDE_READ = who(403, anonymous=LOGIN, outsider=404, staff=200, admin=200)
DECIDE_READ_HX = who(403, anonymous=HX_LOGIN, outsider=404, staff=200, admin=200)
#: Through the API an allowed request or approval gets the rules' answer: 409 here, as vision's queue is in no cohort
#: (no quota can move to it); the others are refused before the rules (403, or 404 for another team's).
API_DECIDE = who(403, anonymous=401, outsider=404, staff=409, admin=409)
#: The submit pages need a team: staff, operators and admins outside any team get 403 ("no team").
SUBMIT = who(200, anonymous=LOGIN, staff=403, operator=403, admin=403)

MATRIX: dict[str, Row] = {
    "": Row(fixed("/"), who(302, anonymous=LOGIN), who(302, anonymous=LOGIN), who(302, anonymous=LOGIN)),
    "favicon.ico": Row(fixed("/favicon.ico"), who(301), NO_POST, who(301)),
    "healthz": Row(fixed("/healthz"), ANY, ANY, ANY),
    # Liveness: the JSON for anyone signed in (it holds no team data), the page for admins, staff and operators.
    "status.json": Row(fixed("/status.json"), API_SIGNED_IN, NO_POST, API_SIGNED_IN),
    "status/": Row(
        fixed("/status/"),
        who(403, anonymous=LOGIN, staff=200, operator=200, admin=200),
        NO_POST,
        who(403, anonymous=HX_LOGIN, staff=200, operator=200, admin=200),
    ),
    # Open while METRICS_TOKEN is unset (the tests' settings); tests/portal/test_metrics.py covers the token.
    "metrics": Row(fixed("/metrics"), ANY, NO_POST, ANY),
    "accounts/login/": Row(
        fixed("/accounts/login/"), ANY, ANY, ANY, body=lambda w: {"username": "alice", "password": "wrong"}
    ),
    "accounts/logout/": Row(fixed("/accounts/logout/"), NO_POST, who(302), NO_POST),
    # Single sign-on is off in the tests' settings: its routes answer 404 to everyone (tests/portal/test_sso.py
    # covers them with a provider configured).
    "oidc/authenticate/": Row(fixed("/oidc/authenticate/"), who(404), who(404), who(404)),
    "oidc/callback/": Row(fixed("/oidc/callback/"), who(404), who(404), who(404)),
    "admin/policy/dashboard/": Row(fixed("/admin/policy/dashboard/"), ADMIN_PERM, ADMIN_PERM, ADMIN_PERM),
    "admin/policy/audit/": Row(fixed("/admin/policy/audit/"), ADMIN_PERM, ADMIN_PERM, ADMIN_PERM),
    "admin/policy/guarantees/": Row(fixed("/admin/policy/guarantees/"), ADMIN_PERM, ADMIN_PERM, ADMIN_PERM),
    "admin/policy/previews/": Row(
        fixed("/admin/policy/previews/"), ADMIN_PERM, who(ADMIN_LOGIN, staff=405, admin=405), ADMIN_PERM
    ),
    "admin/policy/previews/<int:pk>/": Row(
        lambda w: f"/admin/policy/previews/{w.preview.pk}/",
        ADMIN_PERM,
        who(ADMIN_LOGIN, staff=405, admin=405),
        ADMIN_PERM,
    ),
    "admin/policy/previews/<int:pk>/discard/": Row(
        lambda w: f"/admin/policy/previews/{w.preview.pk}/discard/",
        who(ADMIN_LOGIN, staff=405, admin=405),
        who(ADMIN_LOGIN, staff=403, admin=302),
        who(ADMIN_LOGIN, staff=405, admin=405),
    ),
    # The pool: every signed-in user; other teams' jobs appear as their team only (checked below: no job name).
    "pool/": Row(fixed("/pool/"), **GET_ONLY_PAGE),
    "health/": Row(fixed("/health/"), **HEALTH_PAGE),
    "health/tickets/": Row(fixed("/health/tickets/"), **HEALTH_PAGE),
    # A ticket's summary is for everyone signed in (a health_blocked wait links it); its evidence for staff.
    "health/tickets/<int:pk>/": Row(lambda w: f"/health/tickets/{w.ticket.pk}/", **GET_ONLY_PAGE),
    "health/capacity/": Row(fixed("/health/capacity/"), **HEALTH_PAGE),
    "cost/": Row(fixed("/cost/?team=vision"), COST, NO_POST, COST_HX),
    "cost/export.csv": Row(fixed("/cost/export.csv?team=vision"), COST, NO_POST, COST_HX),
    "cost/mine/": Row(fixed("/cost/mine/"), **GET_ONLY_PAGE),
    "cost/ledger/": Row(fixed("/cost/ledger/?team=vision"), COST, NO_POST, COST_HX),
    "cost/ledger/export.csv": Row(fixed("/cost/ledger/export.csv?team=vision"), COST, NO_POST, COST_HX),
    # Borrowing statements through the API: the team's leads and staff (a plain member leads nothing: 403).
    "api/billing/statement/": Row(fixed("/api/billing/statement/?team=vision"), API_LEADS, API_NO_POST, API_LEADS),
    "api/billing/ledger/": Row(fixed("/api/billing/ledger/?team=vision"), API_LEADS, API_NO_POST, API_LEADS),
    "api/schema/": Row(fixed("/api/schema/"), ANY, NO_POST, ANY),
    "api/feasibility/": Row(
        fixed("/api/feasibility/"), API_NO_POST, API_IN_VISION, API_NO_POST, body=api_job_body, json=True
    ),
    "api/waiting/": Row(fixed("/api/waiting/?team=vision"), API_LEADS, API_NO_POST, API_LEADS),
    # Without the week and cause it asks for: 400 to those who may read it.
    "api/waiting/jobs/": Row(
        fixed("/api/waiting/jobs/?team=vision"),
        who(403, anonymous=401, lead=400, staff=400, admin=400),
        API_NO_POST,
        who(403, anonymous=401, lead=400, staff=400, admin=400),
    ),
    "api/jobs/": Row(
        fixed("/api/jobs/?team=vision"),
        who(200, anonymous=401, outsider=403),
        who(403, anonymous=401, member=201, lead=201),
        who(200, anonymous=401, outsider=403),
        body=api_job_body,
        json=True,
    ),
    "api/jobs/<int:pk>/": Row(lambda w: f"/api/jobs/{w.job.pk}/", API_JOB, API_NO_POST, API_JOB),
    "api/jobs/<int:pk>/cancel/": Row(
        lambda w: f"/api/jobs/{w.job.pk}/cancel/",
        API_NO_POST,
        who(200, anonymous=401, outsider=404, operator=403),
        API_NO_POST,
    ),
    # Only the owner snoozes (a pending job has no warning: 409); others 400, operators 403 (read-only).
    "api/jobs/<int:pk>/idle-snooze/": Row(
        lambda w: f"/api/jobs/{w.job.pk}/idle-snooze/",
        API_NO_POST,
        who(400, anonymous=401, outsider=404, operator=403, member=409),
        API_NO_POST,
    ),
    "api/jobs/<int:pk>/logs/": Row(lambda w: f"/api/jobs/{w.job.pk}/logs/", API_JOB, API_NO_POST, API_JOB),
    "api/jobs/<int:pk>/timeline/": Row(lambda w: f"/api/jobs/{w.job.pk}/timeline/", API_JOB, API_NO_POST, API_JOB),
    "api/jobs/<int:pk>/wait-reason/": Row(
        lambda w: f"/api/jobs/{w.job.pk}/wait-reason/", API_JOB, API_NO_POST, API_JOB
    ),
    "api/classes/": Row(fixed("/api/classes/?team=vision"), API_IN_VISION, API_NO_POST, API_IN_VISION),
    "api/classes/<slug:slug>/": Row(fixed("/api/classes/h100/?team=vision"), API_IN_VISION, API_NO_POST, API_IN_VISION),
    "api/teams/": Row(fixed("/api/teams/"), API_SIGNED_IN, API_NO_POST, API_SIGNED_IN),
    # Tokens: the browser session only (no Token scheme offered, so 403 without a session, not 401); one's own.
    "api/tokens/": Row(
        fixed("/api/tokens/"),
        who(200, anonymous=403),
        who(403, member=201, lead=201),
        who(200, anonymous=403),
        body=lambda w: {"team": "vision", "name": "ci-2"},
        json=True,
    ),
    "api/tokens/<int:pk>/revoke/": Row(
        lambda w: f"/api/tokens/{w.token.pk}/revoke/",
        who(405, anonymous=403),
        who(404, anonymous=403, member=200),
        who(405, anonymous=403),
    ),
    "classes/": Row(fixed("/classes/"), **GET_ONLY_PAGE),
    "jobs/": Row(fixed("/jobs/"), **GET_ONLY_PAGE),
    # Outsiders submit in their own team (the session's team must be one of theirs); see the explicit test below.
    "submit/": Row(
        fixed("/submit/"),
        SUBMIT,
        who(302, anonymous=LOGIN, staff=403, operator=403, admin=403),  # submitted: to the new job's page
        who(200, anonymous=HX_LOGIN, staff=403, operator=403, admin=403),
        body=lambda w: JOB_FORM,
    ),
    "submit/check/": Row(fixed("/submit/check/"), NO_POST, SUBMIT, NO_POST, body=lambda w: JOB_FORM),
    "jobs/<int:pk>/": Row(lambda w: f"/jobs/{w.job.pk}/", JOB_SEEN, NO_POST, JOB_SEEN_HX),
    "jobs/<int:pk>/cancel/": Row(
        lambda w: f"/jobs/{w.job.pk}/cancel/",
        who(200, anonymous=LOGIN, outsider=404, operator=403),
        who(302, anonymous=LOGIN, outsider=404, operator=403),
        who(200, anonymous=HX_LOGIN, outsider=404, operator=403),
    ),
    "jobs/<int:pk>/idle-snooze/": Row(
        lambda w: f"/jobs/{w.job.pk}/idle-snooze/",
        NO_POST,
        who(302, anonymous=LOGIN, outsider=404, operator=403),  # refused or not: back to the job page
        NO_POST,
    ),
    "jobs/<int:pk>/run/": Row(lambda w: f"/jobs/{w.job.pk}/run/", JOB_SEEN, NO_POST, JOB_SEEN_HX),
    "jobs/<int:pk>/sent/": Row(lambda w: f"/jobs/{w.job.pk}/sent/", JOB_SEEN, NO_POST, JOB_SEEN_HX),
    # Switching to a team one is not in is refused with a message, back to ``next`` (see the explicit test).
    "team/": Row(
        fixed("/team/"),
        NO_POST,
        who(302, anonymous=LOGIN),
        NO_POST,
        body=lambda w: {"team": "vision", "next": "/jobs/"},
    ),
    # Anyone signed in: their own digests and preferences (tests/notify covers that no one sees another's).
    "notifications/": Row(
        fixed("/notifications/"),
        SIGNED_IN,
        who(302, anonymous=LOGIN),
        SIGNED_IN_HX,
        body=lambda w: {"email": "on", "webhook_url": ""},
    ),
    "tokens/": Row(
        fixed("/tokens/"),
        SIGNED_IN,
        who(400, anonymous=LOGIN, member=200, lead=200),
        SIGNED_IN,
        body=lambda w: {"team": "vision", "name": "ci-2"},
    ),
    "tokens/<int:pk>/revoke/": Row(
        lambda w: f"/tokens/{w.token.pk}/revoke/",
        who(405, anonymous=LOGIN),
        who(404, anonymous=LOGIN, member=302),
        who(405, anonymous=LOGIN),
    ),
    # Where the waiting went: like the costs (a team's leads and staff).
    "waiting/": Row(fixed("/waiting/?team=vision"), COST, NO_POST, COST_HX),
    "waiting/export.csv": Row(fixed("/waiting/export.csv?team=vision"), COST, NO_POST, COST_HX),
    "waiting/jobs/": Row(fixed("/waiting/jobs/?team=vision"), COST, NO_POST, COST_HX),
    # The admins' what-if studies: staff only (others do not find it); the status stops polling (286) when idle.
    "waiting/study/": Row(
        fixed("/waiting/study/"),
        NO_POST,
        who(404, anonymous=LOGIN, staff=200, admin=200),
        NO_POST,
        body=lambda w: {"cluster": w.pool.cluster.pk, "days": "1"},
    ),
    "waiting/study/status/": Row(
        fixed("/waiting/study/status/"),
        who(404, anonymous=LOGIN, staff=286, admin=286),
        NO_POST,
        who(404, anonymous=HX_LOGIN, staff=286, admin=286),
    ),
    # Reservations: everyone signed in sees the list (their teams') and the calendars (every team's windows, the
    # purpose only to the team and who sees every team); team leads and platform admins request, on to the new one.
    "reservations/": Row(
        fixed("/reservations/"),
        SIGNED_IN,
        who(403, anonymous=LOGIN, lead=302, staff=302, admin=302),
        SIGNED_IN_HX,
        body=reservation_body,
    ),
    "reservations/<int:pk>/": Row(
        lambda w: f"/reservations/{w.reservation.pk}/", RESERVATION_SEEN, NO_POST, RESERVATION_SEEN_HX
    ),
    "reservations/<int:pk>/approve/": Row(
        lambda w: f"/reservations/{w.reservation.pk}/approve/", NO_POST, DECIDE, NO_POST
    ),
    "reservations/<int:pk>/refuse/": Row(
        lambda w: f"/reservations/{w.reservation.pk}/refuse/", NO_POST, DECIDE, NO_POST, body=lambda w: {"note": "no"}
    ),
    # Who asked (carol, vision's lead), the team's leads and platform admins cancel.
    "reservations/<int:pk>/cancel/": Row(
        lambda w: f"/reservations/{w.reservation.pk}/cancel/",
        NO_POST,
        who(403, anonymous=LOGIN, outsider=404, lead=302, staff=302, admin=302),
        NO_POST,
    ),
    "reservations/<int:pk>/preview/": Row(
        lambda w: f"/reservations/{w.reservation.pk}/preview/", NO_POST, DECIDE, NO_POST
    ),
    "reservations/<int:pk>/preview/<int:preview_pk>/": Row(
        lambda w: f"/reservations/{w.reservation.pk}/preview/{w.reservation_preview.pk}/",
        DECIDE_READ,
        NO_POST,
        DECIDE_READ_HX,
    ),
    "reservations/calendar/<slug:slug>/": Row(
        lambda w: f"/reservations/calendar/h100/?week={timezone.localtime(w.reservation.starts_at):%Y-%m-%d}",
        **GET_ONLY_PAGE,
    ),
    # The API: a token (or a session) acts in its own team only, so platform admins request through the pages.
    "api/reservations/": Row(
        fixed("/api/reservations/"),
        API_SIGNED_IN,
        who(403, anonymous=401, lead=409),  # allowed, then refused by the rules (see API_DECIDE)
        API_SIGNED_IN,
        body=api_reservation_body,
        json=True,
    ),
    "api/reservations/<int:pk>/": Row(
        lambda w: f"/api/reservations/{w.reservation.pk}/", API_JOB, API_NO_POST, API_JOB
    ),
    "api/reservations/<int:pk>/approve/": Row(
        lambda w: f"/api/reservations/{w.reservation.pk}/approve/", API_NO_POST, API_DECIDE, API_NO_POST, json=True
    ),
    "api/reservations/<int:pk>/cancel/": Row(
        lambda w: f"/api/reservations/{w.reservation.pk}/cancel/",
        API_NO_POST,
        who(403, anonymous=401, outsider=404, lead=200, staff=200, admin=200),
        API_NO_POST,
    ),
    "api/reservations/<int:pk>/refuse/": Row(
        lambda w: f"/api/reservations/{w.reservation.pk}/refuse/",
        API_NO_POST,
        who(403, anonymous=401, outsider=404, staff=200, admin=200),
        API_NO_POST,
        body=lambda w: {"note": "no"},
        json=True,
    ),
}


# --------------------------------------------------------------------------- the test


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker) -> Iterator[World]:
    """One world for the module's ~1,300 cases, built once: each case's changes (a POST that cancels, revokes or
    submits) roll back to it (tests/shared_db.py)."""
    with shared_rows(django_db_blocker, build_world) as world:
        yield world


@pytest.fixture
def w(world, db) -> World:
    """The module's world, its objects as the database has them now."""
    return fresh(world)


def _routes(resolver: URLResolver, prefix: str = ""):
    """Every route of the URLconf, the admin site as one entry ``admin/``."""
    for pattern in resolver.url_patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            if pattern.namespace == "admin":
                yield route
                continue
            yield from _routes(pattern, route)
        else:
            assert isinstance(pattern, URLPattern)
            yield route


ROUTES = [r for r in _routes(get_resolver()) if r != "admin/"]


def _ask(w: World, row: Row, role: str, method: str):
    client = Client()
    user = w.users[role]
    if user is not None:
        client.force_login(user)
    url = row.url(w)
    if method == "GET":
        return client.get(url)
    if method == "HX":
        return client.get(url, headers={"HX-Request": "true"})
    body = row.body(w)
    if row.json:
        return client.post(url, data=json.dumps(body), content_type="application/json")
    return client.post(url, data=body)


#: Who may see a job of team vision (its name, anywhere): everyone but anonymous and the other team's researcher.
SEES_VISION_JOBS = {"member", "lead", "staff", "operator", "admin"}


def _leaks(w: World, role: str, response) -> list[str]:
    """What the answer shows that the role may not see: vision's job name, alice's token."""
    return _text_leaks(w, role, response.content.decode(errors="replace"))


def _text_leaks(w: World, role: str, body: str) -> list[str]:
    """What a text written for ``role`` (a page, a digest, an email, a webhook payload) shows that it may not."""
    found = []
    if role not in SEES_VISION_JOBS and w.job.name in body:
        found.append(f"the name of vision's job {w.job.name!r}")
    if role not in SEES_VISION_JOBS and w.reservation is not None and w.reservation.purpose in body:
        found.append(f"the purpose of vision's reservation {w.reservation.purpose!r}")
    if role != "member" and w.token.prefix in body:
        found.append(f"alice's token {w.token.prefix!r}")
    return found


CASES = [(route, role, method) for route in ROUTES for role in ROLES for method in METHODS]
#: Routes that show what notifications said: their world also holds bob's notification of a cross-team preemption.
NOTIFIED_ROUTES = {"notifications/"}


@pytest.mark.django_db
@pytest.mark.parametrize(("route", "role", "method"), CASES, ids=[f"{r or '/'}|{who}|{m}" for r, who, m in CASES])
def test_isolation_matrix(w, route, role, method):
    """Every route × role × method answers as its MATRIX entry says, and shows no other team's job or token."""
    row = MATRIX.get(route)
    assert row is not None, f"no matrix entry for route {route!r}: add one to MATRIX (docs/operations.md)"
    if route in NOTIFIED_ROUTES:
        notify_across_teams(w)  # bob's notification names vision's job: his page must show it as the team only
    expected = {"GET": row.get, "POST": row.post, "HX": row.hx}[method][role]
    response = _ask(w, row, role, method)
    got = describe(response)
    assert got == expected, f"{method} {row.url(w)} as {role}: {got}, expected {expected}"
    assert not _leaks(w, role, response), f"{method} {row.url(w)} as {role} shows {_leaks(w, role, response)}"


def test_matrix_has_no_stale_entry():
    """Every MATRIX entry is a route the resolver still has (a removed endpoint takes its entry with it)."""
    assert sorted(set(MATRIX) - set(ROUTES)) == []


def test_a_new_endpoint_without_an_entry_is_noticed():
    """A route added under a nested include comes out of the enumeration, and MATRIX has no entry for it."""
    routes = list(_routes(get_resolver("tests.portal.isolation_urls")))
    assert [r for r in routes if r not in MATRIX and r != "admin/"] == ["api/v2/reports/<int:pk>/"]


def test_the_routes_are_really_walked():
    """The enumeration reaches the nested URLconfs (pages, API router, policy admin), not only the top level."""
    for route in ("jobs/<int:pk>/run/", "api/jobs/<int:pk>/wait-reason/", "admin/policy/previews/<int:pk>/"):
        assert route in ROUTES
    assert len(ROUTES) >= 39


# --------------------------------------------------------------------------- the admin site, as a group


def _admin_urls() -> list[str]:
    """The admin index and the changelist of every registered model."""
    urls = [reverse("admin:index")]
    for model in sorted(admin.site._registry, key=lambda m: m._meta.label):
        urls.append(reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist"))
    return urls


ADMIN_CASES = [(url, role) for url in _admin_urls() for role in ROLES]


def _admin_expected(url: str, role: str) -> object:
    """Not staff (researchers, leads, operators): the admin's sign-in page; staff without permissions: the index
    (empty) and 403 on every changelist; the superuser: 200."""
    if role in ("anonymous", "outsider", "member", "lead", "operator"):
        return ADMIN_LOGIN
    if role == "staff":
        return 200 if url == reverse("admin:index") else 403
    return 200


@pytest.mark.django_db
@pytest.mark.parametrize(("url", "role"), ADMIN_CASES, ids=[f"{u}|{r}" for u, r in ADMIN_CASES])
def test_admin_site_matrix(w, url, role):
    """The admin index and each model's changelist, GET, by every role."""
    client = Client()
    if w.users[role] is not None:
        client.force_login(w.users[role])
    response = client.get(url)
    assert describe(response) == _admin_expected(url, role), f"GET {url} as {role}: {describe(response)}"


def test_admin_group_covers_every_registered_model():
    """The group is built from the registry: the project's models are in it (a new one joins by registering)."""
    urls = _admin_urls()
    for name in ("queues_job", "queues_apitoken", "queues_teamquota", "pools_node", "billing_rate", "auth_user"):
        assert reverse(f"admin:{name}_changelist") in urls


@pytest.mark.django_db
def test_the_leak_check_finds_what_it_looks_for(w):
    """Shown to the wrong role, the member's job list and token list are reported as leaks (the check can fail)."""
    alice = Client()
    alice.force_login(w.users["member"])
    assert _leaks(w, "outsider", alice.get("/jobs/")) == [f"the name of vision's job {w.job.name!r}"]
    assert _leaks(w, "lead", alice.get("/api/tokens/")) == [f"alice's token {w.token.prefix!r}"]
    assert _leaks(w, "member", alice.get("/api/tokens/")) == []


# --------------------------------------------------------------------------- notifications, channel by channel

#: Where a notification written for one person goes: the notifications page (its digests), the digest's text, the
#: email and the incoming-webhook POST.
NOTIFICATION_CHANNELS = ("page", "digest", "email", "webhook")


@pytest.mark.django_db
@pytest.mark.parametrize("channel", NOTIFICATION_CHANNELS)
def test_isolation_notification_channels(w, channel, settings):
    """bob (another team) is preempted to make room for vision's job: each channel that carries his notification
    names it "a job of team vision" and passes the matrix's leak check for his role; the same text sent to alice,
    who may read the name, shows it (so the check is looking at the right text)."""
    settings.NOTIFY_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]  # the receiver below listens on loopback
    with Receiver() as hook:
        notify_across_teams(w, webhook_url=hook.url)
        payloads = [body["text"] for _, body in hook.posts]
    bob = w.users["outsider"]
    client = Client()
    client.force_login(bob)
    shown = {
        "page": lambda: client.get("/notifications/").content.decode(),
        "digest": lambda: "\n".join(d.subject + "\n" + d.text for d in Digest.objects.filter(recipient=bob)),
        "email": lambda: "\n".join(m.subject + "\n" + m.body for m in mail.outbox if bob.email in m.to),
        "webhook": lambda: "\n".join(payloads),
    }[channel]()
    assert "a job of team vision" in shown, channel
    assert not _text_leaks(w, "outsider", shown), f"{channel} to bob shows {_text_leaks(w, 'outsider', shown)}"
    unredacted = shown.replace("a job of team vision", f"vision/{w.job.name}")
    assert _text_leaks(w, "outsider", unredacted)  # the check would see the name
    assert not _text_leaks(w, "member", unredacted)
