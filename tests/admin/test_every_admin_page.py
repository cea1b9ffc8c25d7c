"""Every admin changelist, add page and change page of the project's models opens: HTTP 200, no console error.

Playwright drives Debian's chromium against a live server holding one day of the demo, signed in as the demo's
admin. The pages are found from the admin site's registry, so a model registered later is covered too.
"""

from __future__ import annotations

import re

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.test import RequestFactory
from django.urls import reverse

from portal.demo import DEMO_PASSWORD
from queues.models import Cohort
from tests.browsing import DB_LOCK
from tests.demo_db import demo_each_test, demo_load

# Both tests read the demo: seeded once per session, loaded before each (tests/demo_db.py).
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module", autouse=True)
def _demo(demo_snapshot, django_db_blocker):
    """Once the module is done, the database as it was before it."""
    with demo_each_test(demo_snapshot, django_db_blocker):
        yield


@pytest.fixture(autouse=True)
def _demo_loaded(_demo, transactional_db, demo_snapshot):
    """Each test starts from the demo."""
    demo_load(demo_snapshot)


PROJECT_APPS = {"pools", "queues", "clusters", "billing", "portal"}


def _admin_pages() -> list[str]:
    """Changelist, add and (for the first row) change page of each registered model of the project's apps."""
    request = RequestFactory().get("/admin/")
    request.user = get_user_model().objects.get(username="admin")
    urls = []
    for model, model_admin in sorted(admin.site._registry.items(), key=lambda item: item[0]._meta.label):
        meta = model._meta
        if meta.app_label not in PROJECT_APPS:
            continue
        prefix = f"admin:{meta.app_label}_{meta.model_name}"
        urls.append(reverse(f"{prefix}_changelist"))
        if model_admin.has_add_permission(request):
            urls.append(reverse(f"{prefix}_add"))
        first = model._default_manager.order_by("pk").first()
        if first is not None:
            urls.append(reverse(f"{prefix}_change", args=[first.pk]))
    return urls


def test_every_admin_page_of_the_project_opens_without_error(page):
    with DB_LOCK:
        urls = _admin_pages()
    assert len(urls) > 40, urls  # the registry really was walked (clusters, nodes, teams, quotas, jobs...)
    assert reverse("admin:queues_cohort_changelist") in urls

    errors: list[str] = []
    page.on("console", lambda msg: errors.append(f"{page.url}: {msg.text}") if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(f"{page.url}: {exc}"))
    page.goto("/admin/login/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", DEMO_PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(re.compile(r"/admin/$"))

    failed = []
    for url in urls:
        response = page.goto(url)
        if response is None or response.status != 200:
            failed.append(f"{url}: HTTP {response.status if response else 'none'}")
    assert not failed, failed
    assert not errors, errors


def test_a_cohort_page_lists_its_member_queues_and_child_cohorts(page):
    with DB_LOCK:
        cohort = Cohort.objects.filter(team_quotas__isnull=False).order_by("pk").first()
        members = [f"{q.cluster.name}/{q.cluster_queue_name}" for q in cohort.team_quotas.select_related("cluster")]
    page.goto("/admin/login/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", DEMO_PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(re.compile(r"/admin/$"))
    page.goto(reverse("admin:queues_cohort_change", args=[cohort.pk]))
    text = page.locator(".field-members").inner_text()
    for name in members:
        assert name in text
    page.goto(reverse("admin:queues_cohort_changelist"))
    assert page.locator("#cohort-tree").is_visible()
