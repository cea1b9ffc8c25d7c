"""Response headers: a strict Content-Security-Policy (no inline script anywhere), Cache-Control private when signed in,
and nginx setting X-Forwarded-Proto itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.browser.scenarios import research_pool
from tests.factories import JobFactory, UserFactory

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]
#: A <script> element the browser would run inline: no src, and not a JSON data block (json_script).
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*type=\"application/json\")[^>]*>", re.I)
INLINE_HANDLER = re.compile(r"<[^>]+\son[a-z]+\s*=", re.I)


def _policy(response) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    return {d.split()[0]: d.split()[1:] for d in (p.strip() for p in header.split(";")) if d}


def test_the_policy_allows_only_the_portals_own_scripts(client):
    policy = _policy(client.get("/accounts/login/"))
    assert policy["script-src"] == ["'self'"]
    assert policy["default-src"] == ["'self'"]
    assert policy["object-src"] == ["'none'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert "'unsafe-eval'" not in policy["script-src"]


@pytest.fixture
def pages(client):
    pool = research_pool()
    job = JobFactory(team=pool.team, owner=pool.user, cluster=pool.cluster, resource_class=pool.rc)
    admin = UserFactory(username="root", is_staff=True, is_superuser=True)
    researcher = ["/classes/", "/submit/", "/jobs/", f"/jobs/{job.pk}/", "/pool/", "/cost/"]
    staff = [
        "/admin/",
        "/admin/policy/dashboard/",
        "/pool/",
        "/health/",
        "/cost/",
        f"/admin/queues/job/{job.pk}/change/",
    ]
    return [(pool.user, researcher), (admin, staff)]


def test_no_page_has_an_inline_script_or_event_handler(client, pages):
    for user, urls in pages:
        client.force_login(user)
        for url in urls:
            response = client.get(url, follow=True)
            assert response.status_code == 200, url
            html = response.content.decode()
            assert not INLINE_SCRIPT.findall(html), (url, INLINE_SCRIPT.findall(html))
            assert not INLINE_HANDLER.findall(html), (url, INLINE_HANDLER.findall(html)[:3])
            assert "Content-Security-Policy" in response.headers, url


def test_signed_in_pages_are_private_to_caches(client, pages):
    user, urls = pages[0]
    client.force_login(user)
    for url in [*urls, "/api/teams/"]:
        response = client.get(url)
        assert "private" in response["Cache-Control"], url
    htmx = client.get("/jobs/", headers={"HX-Request": "true"})
    assert "private" in htmx["Cache-Control"]


def test_nginx_sets_x_forwarded_proto_from_its_own_scheme():
    doc = yaml.safe_load((ROOT / "deploy/base/nginx-configmap.yaml").read_text())
    conf = doc["data"]["default.conf"]
    proto = re.findall(r"proxy_set_header\s+X-Forwarded-Proto\s+(\S+);", conf)
    assert proto
    assert set(proto) == {"$portal_forwarded_proto"}  # every location, /metrics included
    assert "proxy_set_header X-Forwarded-Proto $http_x_forwarded_proto" not in conf
    # what it sends: its own $scheme, unless the connection comes from the TLS-terminating proxy in front
    assert re.search(
        r"map \$from_edge_proxy\$http_x_forwarded_proto \$portal_forwarded_proto \{[^}]*default\s+\$scheme;", conf
    )
