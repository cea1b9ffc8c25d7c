"""billing.charts: pure rows → Plotly figure dicts, valid for plotly and JSON-serialisable, without a browser."""

from __future__ import annotations

import json
from datetime import date
from decimal import Decimal

import plotly.graph_objects as go

from billing import charts

PERIODS = [
    {"period": date(2026, 3, 1), "owned": Decimal("10.5"), "borrowed": Decimal("2"), "idle": Decimal("3"), "lost": 0,
     "owned_cost": Decimal("21"), "borrowed_cost": Decimal("4"), "idle_cost": Decimal("6")},
    {"period": date(2026, 3, 2), "owned": Decimal("0"), "borrowed": None, "idle": Decimal("24"),
     "lost": Decimal("1.25"), "owned_cost": 0, "borrowed_cost": 0, "idle_cost": Decimal("48")},
]  # fmt: skip


def test_usage_area_figure_stacks_owned_borrowed_idle_lost():
    fig = charts.usage_area_figure(PERIODS)
    go.Figure(fig["data"], fig["layout"])  # plotly validates every property
    assert [t["name"] for t in fig["data"]] == [
        "Owned (within quota)",
        "Borrowed",
        "Idle reserved",
        "Lost (preemption, hardware)",
    ]
    assert {t["stackgroup"] for t in fig["data"]} == {"hours"}
    assert fig["data"][0]["x"] == ["2026-03-01", "2026-03-02"]
    assert fig["data"][0]["y"] == [10.5, 0.0]
    assert fig["data"][1]["y"] == [2.0, 0.0]
    assert fig["data"][3]["y"] == [0.0, 1.25]
    json.dumps(fig)


def test_cost_area_figure_names_the_currency():
    fig = charts.cost_area_figure(PERIODS, currency="EUR")
    go.Figure(fig["data"], fig["layout"])
    assert fig["layout"]["title"]["text"] == "Cost (EUR)"
    assert fig["data"][2]["y"] == [6.0, 48.0]
    json.dumps(fig)


def test_breakdown_bar_figure_has_owned_and_borrowed_bars_with_cost_in_hover():
    rows = [{"label": "alice", "owned": Decimal("7"), "borrowed": Decimal("1"), "cost": Decimal("16")},
            {"label": "bob", "owned": 4, "borrowed": 0, "cost": 8}]  # fmt: skip
    fig = charts.breakdown_bar_figure(rows, title="Per user", currency="EUR")
    go.Figure(fig["data"], fig["layout"])
    assert fig["layout"]["barmode"] == "stack"
    assert [t["name"] for t in fig["data"]] == ["Owned", "Borrowed"]
    assert fig["data"][0]["y"] == ["alice", "bob"]
    assert fig["data"][0]["x"] == [7.0, 4.0]
    assert fig["data"][0]["customdata"] == ["16.00 EUR", "8.00 EUR"]
    json.dumps(fig)


def test_figures_of_no_rows_are_empty_but_valid():
    for fig in (charts.usage_area_figure([]), charts.cost_area_figure([], currency="EUR"),
                charts.breakdown_bar_figure([], title="Per class")):  # fmt: skip
        go.Figure(fig["data"], fig["layout"])
        assert all(t.get("x") == [] for t in fig["data"])
