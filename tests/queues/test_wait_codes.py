"""One closed set of wait codes: the models, the engine, the translation and the templates read the same one."""

from __future__ import annotations

import re
from typing import get_args

import pytest
from django.template.loader import render_to_string
from django.test import RequestFactory
from django.utils import timezone

from queues import kueue_messages as km
from queues.diagnosis import Diagnosis, Eta, Feasibility, Verdict
from queues.engine import WAIT_CODE_ORDER, decisions
from queues.engine.wait_codes import (
    CLUSTER_UNREACHABLE,
    NEVER_FITS,
    NEVER_FITS_ORDER,
    WAIT_CODE_LABELS,
    WAIT_CODES,
    never_fits,
)
from queues.models import Job, WaitReason
from tests.factories import JobFactory


def test_wait_codes_models_engine_and_translation_share_one_set():
    assert WaitReason.values == list(WAIT_CODES)
    assert dict(WaitReason.choices) == WAIT_CODE_LABELS
    assert dict(Job._meta.get_field("wait_reason").choices) == WAIT_CODE_LABELS
    assert set(get_args(decisions.WaitCode)) == set(WAIT_CODES)
    # the engine decides every code but the sync's "cluster unreachable", each once
    assert sorted(WAIT_CODE_ORDER) == sorted(set(WAIT_CODES) - {CLUSTER_UNREACHABLE})
    assert km.WAIT_CODES == WAIT_CODES
    assert km.UNRECOGNISED not in WAIT_CODES


def test_wait_codes_translation_yields_only_codes_of_the_set():
    produced = {code for _, _, code in km.FLAVOR_PATTERNS} | {c for _, _, c in km.WHOLE_PATTERNS if c is not None}
    produced |= set(km.REASON_HINTS.values())
    assert produced <= set(WAIT_CODES)


def test_wait_codes_never_fits_is_one_ordered_set():
    assert frozenset(NEVER_FITS_ORDER) == NEVER_FITS == km.NEVER_FITS
    assert NEVER_FITS <= set(WAIT_CODES)
    # the engine checks the never-fits codes first, most serious first
    assert WAIT_CODE_ORDER[: len(NEVER_FITS_ORDER)] == NEVER_FITS_ORDER
    assert never_fits("exceeds_maximum")
    assert not never_fits(CLUSTER_UNREACHABLE)
    assert not never_fits("")


def _verdict_class(html: str) -> str:
    found = re.findall(r'class="verdict (verdict-never|verdict-wait)"', html)
    assert len(found) == 1, html
    return found[0]


@pytest.mark.django_db
@pytest.mark.parametrize("code", WAIT_CODES)
def test_wait_codes_both_templates_use_the_never_fits_set(code):
    request = RequestFactory().get("/")
    job = JobFactory()
    now = timezone.now()
    expected = "verdict-never" if code in NEVER_FITS else "verdict-wait"

    diagnosis = Diagnosis(job=job, waiting=True, code=code, message="why", since=now)
    live = render_to_string(
        "queues/partials/job_live.html", {"job": job, "diagnosis": diagnosis, "timeline": []}, request=request
    )
    assert _verdict_class(live) == expected

    feasibility = Feasibility(verdict=Verdict(admissible=False, code=code, message="why"), eta=Eta())
    check = render_to_string(
        "queues/partials/job_feasibility.html",
        {"feasibility": feasibility, "checked": False, "suggestion_links": []},
        request=request,
    )
    assert _verdict_class(check) == expected
