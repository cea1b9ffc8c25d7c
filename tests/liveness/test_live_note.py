"""The pages' live note: every polling template has it; it says "refreshes every …" while the data is live and
that the live data is paused (since when, why) when it is not."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.template import Context, Template
from django.test import RequestFactory
from django.utils import timezone

from liveness import services
from tests.liveness.test_selectors import clock_text

ROOT = Path(__file__).resolve().parents[2]
#: A template that polls but shows no live cluster data says so with this comment.
EXEMPT = "live-note: not needed"


def _templates() -> list[Path]:
    found = list(ROOT.glob("templates/**/*.html"))
    found += [p for p in ROOT.glob("*/templates/**/*.html") if ".venv" not in p.parts]
    return sorted(found)


def test_every_template_that_polls_has_the_live_note():
    polling = [p for p in _templates() if re.search(r'hx-trigger="[^"]*every ', p.read_text())]
    assert len(polling) >= 6, polling  # job, job list, classes, pool nodes, health map, preview, status
    missing = []
    for path in polling:
        text = path.read_text()
        if "live_note" in text or EXEMPT in text:
            continue
        # a page whose poller swaps in a fragment: the fragment it includes carries the note
        included = re.findall(r'{% include "([^"]+)"', text)
        if any("live_note" in (p.read_text()) for p in _templates() if any(str(p).endswith(i) for i in included)):
            continue
        missing.append(str(path.relative_to(ROOT)))
    assert missing == []


def test_no_template_promises_a_refresh_by_itself():
    promising = [
        str(p.relative_to(ROOT))
        for p in _templates()
        if "refreshes every" in p.read_text() and p.name != "live_note.html"
    ]
    assert promising == []


def _render(**context) -> str:
    request = RequestFactory().get("/")
    template = Template('{% load liveness_tags %}{% live_note rendered_at "5 s" %}')
    return template.render(Context({"request": request, **context}))


@pytest.mark.django_db
def test_the_note_says_when_it_refreshes_while_the_data_is_live(settings):
    settings.CELERY_BEAT_SCHEDULE = {}
    now = timezone.now()
    for kind in ("worker", "beat"):
        services.heartbeat_record(kind=kind, hostname="h", pid=1, started_at=now, now=now)
    html = _render(rendered_at=now)
    assert "refreshes every 5 s." in html
    assert "paused" not in html


@pytest.mark.django_db
def test_the_note_says_the_live_data_is_paused_since_the_worker_was_last_seen(settings):
    settings.CELERY_BEAT_SCHEDULE = {}
    settings.HEARTBEAT_STALE_SECONDS = 60
    now = timezone.now()
    last = now - timedelta(minutes=3)
    services.heartbeat_record(kind="worker", hostname="h", pid=1, started_at=last, now=last)
    services.heartbeat_record(kind="beat", hostname="h", pid=2, started_at=now, now=now)
    html = _render(rendered_at=now, CAN_SEE_STATUS=True)
    assert f"Live data paused since {clock_text(last)}: the background worker is not running." in html
    assert "Job states are as of then." in html
    assert "refreshes every" not in html
    assert 'href="/status/"' in html


@pytest.mark.django_db
def test_the_status_link_is_only_for_those_who_may_open_it(settings):
    settings.CELERY_BEAT_SCHEDULE = {}
    assert 'href="/status/"' not in _render(rendered_at=timezone.now(), CAN_SEE_STATUS=False)
