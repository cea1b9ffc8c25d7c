"""A tour of every page for each demo role: signed in through the login page, every same-origin GET link of the
navigation and of each page visited is followed, breadth-first.

For each role (researcher alice, team lead carol, operator oscar, platform admin admin) on two days of the demo
(``ROLE_TOUR_DAYS`` more): no page or request answers 5xx, no console error or uncaught script error, and no link
shown to the role leads to a page that refuses it (403, 404, or a bounce to the login page). The GET forms (the
filters) are followed like links, with each option of their selects. Pages are visited once per kind (ids and
query values left out: one job page per job state, one ticket, one filter of each name), but every distinct link
is checked. The admin site is toured at its index, app indexes and changelists, not the change pages behind them
(tests/admin/test_every_admin_page.py opens those). Playwright driving Debian's /usr/bin/chromium headless.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlsplit

import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page

from portal.demo import DEMO_PASSWORD
from queues.models import Job
from tests.browsing import DB_LOCK
from tests.demo_db import demo_each_test, demo_load

# Each role's tour starts from the same demo (tests/demo_db.py: DAYS days, ``ROLE_TOUR_DAYS=30`` for the full
# demo), seeded once and loaded before each test.
pytestmark = pytest.mark.django_db(transaction=True)
#: At most this many pages visited per role: far more than the page kinds there are, so hitting it is a failure.
MAX_PAGES = 120
#: At most this many links checked per role: more than the demo shows, so hitting it is a failure.
MAX_LINKS = 600
#: Where a page that refuses a signed-out visitor sends them.
LOGIN = re.compile(r"/(accounts|admin)/login/")
#: Paths never followed: signing out, and the admin's deep pages (a row's change, history and delete pages).
SKIP = re.compile(r"logout|^/admin/(?!policy/)[^/]+/[^/]+/.+")

#: role → (username, page kinds the tour must reach: ids written as <id>)
ROLES = {
    "researcher": ("alice", {"/classes/", "/jobs/", "/jobs/<id>/", "/submit/", "/pool/", "/cost/mine/"}),
    "lead": ("carol", {"/classes/", "/jobs/", "/jobs/<id>/", "/submit/", "/pool/", "/cost/"}),
    "operator": ("oscar", {"/classes/", "/jobs/", "/jobs/<id>/", "/pool/"}),
    "admin": (
        "admin",
        {
            "/pool/",
            "/jobs/",
            "/jobs/<id>/",
            "/classes/",
            "/health/",
            "/health/tickets/",
            "/health/tickets/<id>/",
            "/health/capacity/",
            "/admin/",
            "/admin/queues/job/",
            "/admin/policy/dashboard/",
        },
    ),
}


def kind(url: str, job_states: dict[int, str] | None = None) -> str:
    """A page's kind: its path with numeric ids as ``<id>`` and the names (not values) of its query parameters;
    a job's page is one kind per job state (a failed job shows its log, a pending one why it waits)."""
    parts = urlsplit(url)
    path = re.sub(r"/\d+(?=/|$)", "/<id>", parts.path)
    if parts.path.startswith("/admin/"):
        return path  # the changelists' filters and sort orders are one page each
    job = re.fullmatch(r"/jobs/(\d+)/", parts.path)
    if job and job_states and not parts.query:
        return f"{path} ({job_states.get(int(job.group(1)), 'unknown')})"
    keys = sorted({k for k, _ in parse_qsl(parts.query, keep_blank_values=True)})
    return f"{path}?{'&'.join(keys)}" if keys else path


def link_key(url: str) -> str:
    """Links checked once per key: every portal link, but the admin's filter and sort links once per parameter."""
    parts = urlsplit(url)
    if parts.path.startswith("/admin/"):
        keys = sorted({k for k, _ in parse_qsl(parts.query, keep_blank_values=True)})
        return f"{parts.path}?{'&'.join(keys)}"
    return url


@dataclass
class Tour:
    """What the tour of one role saw."""

    origin: str
    job_states: dict[int, str] = field(default_factory=dict)  # job id → state, when the tour began
    visited: dict[str, str] = field(default_factory=dict)  # kind → the URL visited for it
    problems: list[str] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)  # link → final status
    found_on: dict[str, str] = field(default_factory=dict)  # link → the page it was first seen on

    def local(self, href: str) -> str | None:
        """The link as a path and query on the portal, or ``None`` if it goes elsewhere or is never followed."""
        parts = urlsplit(href)
        if f"{parts.scheme}://{parts.netloc}" != self.origin or SKIP.search(parts.path):
            return None
        return parts.path + (f"?{parts.query}" if parts.query else "")


def sign_in(page: Page, username: str) -> None:
    """Sign in through the portal's login page."""
    page.goto("/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", DEMO_PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_load_state("load")
    assert "/accounts/login/" not in page.url, f"{username} could not sign in"


def settle(page: Page) -> None:
    """Let the page's htmx loads finish (the polls leave gaps long enough for the network to go idle)."""
    try:
        page.wait_for_load_state("networkidle", timeout=5_000)
    except PlaywrightError:
        pass


def links_of(page: Page) -> list[str]:
    """Every link on the page (``a[href]``), absolute, without its fragment."""
    hrefs = page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
    return [h.split("#", 1)[0] for h in hrefs if h.split("#", 1)[0]]


FORM_URLS = """forms => forms
  .filter(f => (f.getAttribute("method") || "get").toLowerCase() === "get")
  .flatMap(f => {
    const action = f.action.split("#")[0].split("?")[0];
    const at = params => action + (params.toString() ? "?" + params.toString() : "");
    const out = [at(new URLSearchParams(new FormData(f)))];
    for (const select of f.querySelectorAll("select[name]")) {
      for (const option of select.options) {
        const params = new URLSearchParams(new FormData(f));
        params.set(select.name, option.value);
        out.push(at(params));
      }
    }
    return out;
  })"""


def form_urls_of(page: Page) -> list[str]:
    """What the page's GET forms (the filters) ask for: as they stand, and with each option of each of their
    selects in turn."""
    if urlsplit(page.url).path.startswith("/admin/") and not urlsplit(page.url).path.startswith("/admin/policy/"):
        return []  # the admin's own search and action forms
    return page.eval_on_selector_all("form", FORM_URLS)


def check_link(page: Page, tour: Tour, url: str) -> None:
    """Follow a link outside the browser tab (same cookies): it must not refuse the role, nor fail."""
    response = page.request.get(url)
    tour.checked[url] = response.status
    final = urlsplit(response.url).path
    where = f"link {url} (on {tour.found_on.get(url, '?')})"
    if response.status >= 500:
        tour.problems.append(f"{where}: HTTP {response.status}")
    elif response.status in (403, 404):
        tour.problems.append(f"{where}: refuses the role (HTTP {response.status})")
    elif LOGIN.match(final) and not LOGIN.match(url):
        tour.problems.append(f"{where}: sends the role to the login page")


def tour_of(page: Page, origin: str, job_states: dict[int, str]) -> Tour:
    """Breadth-first from the home page: visit one page of each kind, check every link seen."""
    tour = Tour(origin=origin, job_states=job_states)
    current = {"url": "/"}
    page.on(
        "console",
        lambda m: tour.problems.append(f"{current['url']}: console {m.type}: {m.text}") if m.type == "error" else None,
    )
    page.on("pageerror", lambda exc: tour.problems.append(f"{current['url']}: script error: {exc}"))

    def on_response(response) -> None:
        if response.status >= 500 or (response.status in (403, 404) and response.url.startswith(origin)):
            tour.problems.append(f"{current['url']}: request {response.url} answered HTTP {response.status}")

    page.on("response", on_response)
    queue: deque[str] = deque(["/"])
    seen_links: set[str] = {"/"}
    checked_keys: set[str] = set()
    while queue:
        url = queue.popleft()
        if kind(url, job_states) in tour.visited:
            if url not in tour.checked and link_key(url) not in checked_keys:
                assert len(tour.checked) < MAX_LINKS, f"more than {MAX_LINKS} links: {sorted(tour.checked)}"
                checked_keys.add(link_key(url))
                check_link(page, tour, url)
            continue
        assert len(tour.visited) < MAX_PAGES, f"more than {MAX_PAGES} page kinds: {sorted(tour.visited)}"
        current["url"] = url
        try:
            response = page.goto(url)
        except PlaywrightError as exc:  # a download (the cost CSV) is not a page: check it as a link
            if "Download is starting" not in str(exc) and "ERR_ABORTED" not in str(exc):
                raise
            tour.visited[kind(url, job_states)] = url
            check_link(page, tour, url)
            continue
        tour.visited[kind(url, job_states)] = url
        status = response.status if response else 0
        tour.checked[url] = status
        final = urlsplit(page.url)
        if status >= 500 or status in (403, 404) or (LOGIN.match(final.path) and not LOGIN.match(url)):
            tour.problems.append(
                f"page {url} (from {tour.found_on.get(url, 'the start')}): HTTP {status} at {page.url}"
            )
            continue
        settle(page)
        for href, how in [(h, "") for h in links_of(page)] + [(h, " (a filter)") for h in form_urls_of(page)]:
            link = tour.local(href)
            if link is None or link in seen_links:
                continue
            seen_links.add(link)
            tour.found_on[link] = url + how
            queue.append(link)
    return tour


@pytest.fixture(scope="module", autouse=True)
def _demo(demo_snapshot, django_db_blocker):
    """Once the module is done, the database as it was before it (the demo is seeded once per session)."""
    with demo_each_test(demo_snapshot, django_db_blocker):
        yield


@pytest.fixture(autouse=True)
def _demo_loaded(_demo, transactional_db, demo_snapshot):
    """Each test starts from the demo."""
    demo_load(demo_snapshot)


@pytest.mark.parametrize("role", list(ROLES))
def test_every_page_for_the_role_opens_without_errors_or_dead_links(page, live_server, role):
    username, must_reach = ROLES[role]
    with DB_LOCK:
        job_states = dict(Job.objects.values_list("pk", "state"))
    sign_in(page, username)
    tour = tour_of(page, live_server.url, job_states)

    assert not tour.problems, "\n".join(tour.problems)
    reached = {re.sub(r" \(.*\)$", "", k) for k in tour.visited}
    missing = must_reach - reached
    assert not missing, f"the tour never reached {sorted(missing)}; it visited {sorted(tour.visited)}"


#: A lead's and an operator's pages with the demo's figures, at a phone's width: wide tables scroll in their panel,
#: the cost's and the statement's tiles keep their amounts inside them; the page itself is never wider.
PHONE_PAGES = {
    "erin": ("/cost/", "/cost/?bucket=day", "/cost/ledger/", "/waiting/", "/waiting/jobs/", "/reservations/"),
    "oscar": ("/health/", "/health/tickets/", "/health/capacity/", "/status/", "/jobs/?team=", "/waiting/"),
}


@pytest.mark.parametrize("username", list(PHONE_PAGES))
def test_the_pages_with_the_demos_figures_fit_a_phone(page, username):
    page.set_viewport_size({"width": 390, "height": 800})
    sign_in(page, username)
    wide = {}
    for path in PHONE_PAGES[username]:
        page.goto(path)
        settle(page)
        width = page.evaluate("() => document.documentElement.scrollWidth")
        if width > 390:
            wide[path] = (
                width,
                page.evaluate(
                    "() => [...document.querySelectorAll('body *')].filter(e => e.scrollWidth > e.clientWidth + 1"
                    " && getComputedStyle(e).overflowX === 'visible').slice(0, 6).map(e => e.tagName + '#' + e.id"
                    " + '.' + e.className + ' ' + e.scrollWidth + '>' + e.clientWidth)"
                ),
            )
    assert not wide, wide
