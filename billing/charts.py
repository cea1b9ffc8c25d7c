"""Plotly figures of the cost pages: pure functions from report rows to figure dicts (no database, no browser).

The dicts are what ``Plotly.newPlot(el, fig.data, fig.layout, fig.config)`` takes; numbers are floats,
dates ISO strings, so ``json.dumps`` works on them as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date
from decimal import Decimal

#: Colours of the usage categories (colour-blind safe, Okabe–Ito).
COLOURS = {
    "owned": "#0072B2",
    "borrowed": "#E69F00",
    "idle": "#BBBBBB",
    "lent": "#009E73",
    "lost": "#D55E00",
}
CONFIG = {"displaylogo": False, "responsive": True, "modeBarButtonsToRemove": ["lasso2d", "select2d"]}


def _num(value: Decimal | float | int | None) -> float:
    return round(float(value or 0), 4)


def _layout(title: str, **extra) -> dict:
    layout = {
        "title": {"text": title, "x": 0, "xanchor": "left"},
        "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
        "legend": {"orientation": "h", "y": -0.2},
        "hovermode": "x unified",
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
    }
    layout.update(extra)
    return layout


def usage_area_figure(rows: Sequence[Mapping], *, title: str = "GPU-hours") -> dict:
    """Stacked area over time: owned, borrowed, idle reserved and lost device-hours per period.

    ``rows``: mappings with ``period`` (date), ``owned``, ``borrowed``, ``idle``, ``lost`` (hours).
    """
    x = [r["period"].isoformat() if isinstance(r["period"], date) else str(r["period"]) for r in rows]
    series = [
        ("owned", "Owned (within quota)"),
        ("borrowed", "Borrowed"),
        ("idle", "Idle reserved"),
        ("lost", "Lost (preemption, hardware)"),
    ]
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": label,
            "x": x,
            "y": [_num(r.get(key)) for r in rows],
            "stackgroup": "hours",
            "meta": key,
            "line": {"width": 0.5, "color": COLOURS[key]},
            "hovertemplate": "%{y:.2f} h<extra>" + label + "</extra>",
        }
        for key, label in series
    ]
    layout = _layout(title, yaxis={"title": {"text": "device-hours"}, "rangemode": "tozero"}, xaxis={"type": "date"})
    return {"data": data, "layout": layout, "config": CONFIG}


def cost_area_figure(rows: Sequence[Mapping], *, currency: str, title: str = "Cost") -> dict:
    """Stacked area over time of cost: owned usage, borrowed usage, net idle reservation.

    ``rows``: mappings with ``period``, ``owned_cost``, ``borrowed_cost``, ``idle_cost`` (in ``currency``).
    """
    x = [r["period"].isoformat() if isinstance(r["period"], date) else str(r["period"]) for r in rows]
    series = [
        ("owned_cost", "Owned", "owned"),
        ("borrowed_cost", "Borrowed", "borrowed"),
        ("idle_cost", "Idle reserved", "idle"),
    ]
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": label,
            "x": x,
            "y": [_num(r.get(key)) for r in rows],
            "stackgroup": "cost",
            "meta": colour,
            "line": {"width": 0.5, "color": COLOURS[colour]},
            "hovertemplate": "%{y:,.2f} " + currency + "<extra>" + label + "</extra>",
        }
        for key, label, colour in series
    ]
    layout = _layout(
        f"{title} ({currency})", yaxis={"title": {"text": currency}, "rangemode": "tozero"}, xaxis={"type": "date"}
    )
    return {"data": data, "layout": layout, "config": CONFIG}


def breakdown_bar_figure(rows: Sequence[Mapping], *, title: str, currency: str = "") -> dict:
    """Horizontal stacked bars per user / class / flavor: owned and borrowed device-hours, cost in the hover.

    ``rows``: mappings with ``label``, ``owned``, ``borrowed`` (hours) and optionally ``cost``.
    """
    labels = [str(r["label"]) for r in rows]
    costs = [f"{_num(r.get('cost')):,.2f} {currency}".strip() for r in rows]
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "name": name,
            "y": labels,
            "x": [_num(r.get(key)) for r in rows],
            "marker": {"color": COLOURS[key]},
            "customdata": costs,
            "hovertemplate": "%{x:.2f} h · cost %{customdata}<extra>" + name + "</extra>",
        }
        for key, name in (("owned", "Owned"), ("borrowed", "Borrowed"))
    ]
    height = max(220, 60 + 28 * len(rows))
    layout = _layout(
        f"{title} (device-hours)",
        barmode="stack",
        height=height,
        hovermode="closest",
        # The unit goes in the title: an axis title under the bars collides with the legend.
        xaxis={"rangemode": "tozero"},
        yaxis={"automargin": True, "autorange": "reversed"},
    )
    return {"data": data, "layout": layout, "config": CONFIG}
