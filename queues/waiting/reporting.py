"""Flat views of a wait report shared by the waiting page, its CSV export and the API: tables of GPU-hours per week,
class and team by cause, and the CSV's long rows (week × team × class × cause)."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from queues.models import Team
from queues.waiting.causes import cause_label
from queues.waiting.selectors import WaitReport, hours


def _row(label: str, key: str, causes: Mapping[str, int], order: list[str]) -> dict:
    total = sum(causes.values())
    return {
        "label": label,
        "key": key,
        "cells": [(c, hours(causes.get(c, 0))) for c in order],
        "total": hours(total),
    }


def report_tables(report: WaitReport, *, teams: Mapping[int, Team]) -> dict:
    """Per week (newest first), per class and per team: GPU-hours of each cause with waiting in the range."""
    order = report.causes
    weeks = [
        {**_row(f"{w:%d %b %Y}", w.isoformat(), report.by_week.get(w, {}), order), "week": w}
        for w in reversed(report.weeks)
    ]
    classes = sorted(
        (_row(report.class_names.get(k, "?"), str(k), v, order) for k, v in report.by_class.items()),
        key=lambda r: (-r["total"], r["label"]),
    )
    team_rows = sorted(
        (_row(teams[k].name if k in teams else str(k), str(k), v, order) for k, v in report.by_team.items()),
        key=lambda r: (-r["total"], r["label"]),
    )
    return {
        "causes": [(c, cause_label(c)) for c in order],
        "weeks": weeks,
        "classes": classes,
        "teams": team_rows,
        "totals": _row("Total", "", report.total, order),
    }


def report_csv_rows(report: WaitReport, *, teams: Mapping[int, Team]) -> list[dict]:
    """One row per week × team × class × cause with waiting, in GPU-hours, with the cause's share of its week."""
    rows = []
    for (week, team_id, class_id, cause), us in sorted(report.cells.items()):
        week_total = report.week_total(week)
        rows.append(
            {
                "week": week.isoformat(),
                "team": teams[team_id].slug if team_id in teams else str(team_id),
                "class": report.class_names.get(class_id, str(class_id)),
                "cause": cause,
                "cause_label": cause_label(cause),
                "gpu_hours": str(hours(us)),
                "share_of_week": str((Decimal(us) / week_total).quantize(Decimal("0.0001"))) if week_total else "0",
            }
        )
    return rows
