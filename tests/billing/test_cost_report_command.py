"""manage.py cost_report: table, CSV and JSON with per user / class totals; bad input exits 2 naming the argument."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import ManagementUtility, call_command
from django.core.management.base import CommandError

from billing import services
from tests.billing.conftest import T0, H, run_job

pytestmark = pytest.mark.django_db

ARGS = ["--team", "vision", "--from", "2026-03-01", "--to", "2026-03-31"]


@pytest.fixture
def usage(world):
    run_job(world, devices=2, start=T0, end=T0 + 3 * H)
    run_job(world, owner=world.bob, devices=1, start=T0 + H, end=T0 + 2 * H)
    services.metering_sync(now=T0 + timedelta(days=1))
    services.usage_rollup(day=T0.date(), now=T0 + timedelta(days=1))
    return world


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("cost_report", *args, stdout=out)
    return out.getvalue()


def test_cost_report_table_has_users_classes_and_grand_total(usage):
    text = run(*ARGS)
    assert "Per user" in text
    assert "Per class" in text
    assert "GRAND TOTAL" in text
    assert usage.alice.get_full_name()[:32] in text
    assert "H100 training" in text
    assert "14.00 EUR" in text  # 7 device-hours at 2.00


def test_cost_report_csv(usage):
    rows = list(csv.DictReader(io.StringIO(run(*ARGS, "--format", "csv"))))
    total = next(r for r in rows if r["section"] == "total")
    assert Decimal(total["used_hours"]) == 7
    assert Decimal(total["cost_EUR"]) == Decimal("14.00")
    assert {r["section"] for r in rows} >= {"user", "class", "flavor", "day", "total"}


def test_cost_report_json(usage):
    data = json.loads(run(*ARGS, "--format", "json"))
    assert data["teams"] == ["vision"]
    assert data["total"]["usedHours"] == "7.000"
    assert data["total"]["cost"] == {"EUR": "14.00"}
    assert sum(Decimal(u["usedHours"]) for u in data["byUser"]) == 7


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--team", "nope", "--from", "2026-03-01", "--to", "2026-03-02"], "--team"),
        (["--team", "vision", "--from", "March", "--to", "2026-03-02"], "--from"),
        (["--team", "vision", "--from", "2026-03-01", "--to", "2026-02-30"], "--to"),
        (["--team", "vision", "--from", "2026-03-05", "--to", "2026-03-01"], "--to"),
        ([*ARGS, "--format", "xml"], "--format"),
    ],
)
def test_cost_report_bad_input_names_the_argument_with_status_2(world, args, named):
    with pytest.raises(CommandError) as exc:
        run(*args)
    assert exc.value.returncode == 2
    assert str(exc.value).startswith(named)


def test_cost_report_exits_2_from_the_command_line(world, capsys):
    with pytest.raises(SystemExit) as exc:
        ManagementUtility(
            ["manage.py", "cost_report", "--team", "vision", "--from", "x", "--to", "2026-03-01"]
        ).execute()
    assert exc.value.code == 2
    assert "--from" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        ManagementUtility(["manage.py", "cost_report", "--from", "2026-03-01"]).execute()
    assert exc.value.code == 2
    assert "--team" in capsys.readouterr().err
