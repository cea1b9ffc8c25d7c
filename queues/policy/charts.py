"""Plotly figure dicts for the policy pages (what-if preview, admin dashboard): pure functions, rows in, dict out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

CURRENT = "#8a8f98"
PROPOSED = "#2f6fdf"
BASE_LAYOUT = {
    "margin": {"l": 50, "r": 20, "t": 40, "b": 60},
    "paper_bgcolor": "rgba(0,0,0,0)",
    "plot_bgcolor": "rgba(0,0,0,0)",
    "font": {"size": 12},
    "barmode": "group",
}
CONFIG = {"displaylogo": False, "responsive": True}

#: (attribute, title, scale) of the what-if panels.
WHATIF_METRICS = (
    ("wait_p50_seconds", "Wait p50 (hours)", 1 / 3600),
    ("wait_p90_seconds", "Wait p90 (hours)", 1 / 3600),
    ("utilisation", "Utilisation of nominal quota (%)", 100),
    ("borrowed_device_hours", "Borrowed GPU-hours", 1),
    ("preemptions", "Preemptions", 1),
    ("still_waiting", "Jobs still waiting at the end", 1),
)


def _value(outcome, attr: str, scale: float) -> float | None:
    if outcome is None:
        return None
    value = getattr(outcome, attr)
    return None if value is None else round(value * scale, 2)


def _all_zero(rows: Sequence[Mapping], attr: str, scale: float) -> bool:
    """Whether a metric is zero (or unknown) for every team under both policies, at the chart's precision."""
    return all(not _value(row[key], attr, scale) for row in rows for key in ("current", "proposed"))


def whatif_zero_metrics(rows: Sequence[Mapping]) -> list[str]:
    """Titles of the what-if panels left out of the chart: zero for every team under both policies."""
    return [title for attr, title, scale in WHATIF_METRICS if _all_zero(rows, attr, scale)]


def whatif_figure(rows: Sequence[Mapping]) -> dict:
    """Grouped bars, current vs proposed, per team, one panel per metric (rows from ``WhatIf.rows()``).

    A metric that is zero for every team under both policies (often the wait p50: most jobs start at once) has
    no panel: a flat panel says nothing and takes the space of one that does (``whatif_zero_metrics`` names
    them for the page). Panels are laid out three to a row.
    """
    teams = [row["team"] for row in rows]
    data = []
    annotations = []
    metrics = [m for m in WHATIF_METRICS if not _all_zero(rows, m[0], m[2])]
    for i, (attr, title, scale) in enumerate(metrics, start=1):
        axis = "" if i == 1 else str(i)
        for label, key, color in (("current policy", "current", CURRENT), ("proposed policy", "proposed", PROPOSED)):
            data.append(
                {
                    "type": "bar",
                    "name": label,
                    "legendgroup": key,
                    "showlegend": i == 1,
                    "x": teams,
                    "y": [_value(row[key], attr, scale) for row in rows],
                    "marker": {"color": color},
                    "xaxis": f"x{axis}",
                    "yaxis": f"y{axis}",
                    "hovertemplate": f"%{{x}}<br>{title}: %{{y}}<extra>{label}</extra>",
                }
            )
        annotations.append(
            {
                "text": f"<b>{title}</b>",
                "xref": f"x{axis} domain",
                "yref": f"y{axis} domain",
                "x": 0,
                "y": 1.12,
                "xanchor": "left",
                "showarrow": False,
            }
        )
    grid_rows = max(1, -(-len(metrics) // 3))
    gaps = {"ygap": 0.35 if grid_rows > 1 else 0.2, "xgap": 0.12}
    layout = {
        **BASE_LAYOUT,
        "grid": {"rows": grid_rows, "columns": min(3, len(metrics)) or 1, "pattern": "independent", **gaps},
        "annotations": annotations,
        "height": 100 + 230 * grid_rows,
        "legend": {"orientation": "h", "y": -0.15},
    }
    return {"data": data, "layout": layout, "config": CONFIG}


def class_utilisation_figure(series: Mapping[str, Sequence[tuple[datetime, float]]]) -> dict:
    """Lines: share of each class's devices in use over time."""
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": name,
            "x": [t.isoformat() for t, _ in points],
            "y": [round(v * 100, 1) for _, v in points],
            "hovertemplate": "%{x}<br>%{y}% in use<extra>" + name + "</extra>",
        }
        for name, points in series.items()
    ]
    layout = {
        **BASE_LAYOUT,
        "title": {"text": "Pool utilisation per class"},
        "yaxis": {"title": {"text": "% of the class's devices in use"}, "rangemode": "tozero"},
        "height": 340,
        "legend": {"orientation": "h", "y": -0.2},
    }
    return {"data": data, "layout": layout, "config": CONFIG}


def team_queue_figure(rows: Sequence) -> dict:
    """Bars: pending jobs per team, and waits (oldest pending, median recent time to admission) on a second axis."""
    teams = [r.team for r in rows]
    data = [
        {
            "type": "bar",
            "name": "pending jobs",
            "x": teams,
            "y": [r.pending for r in rows],
            "marker": {"color": CURRENT},
        },
        {
            "type": "scatter",
            "mode": "markers",
            "name": "oldest pending wait (h)",
            "x": teams,
            "y": [r.oldest_wait_hours for r in rows],
            "yaxis": "y2",
            "marker": {"size": 11, "color": "#d9822b", "symbol": "diamond"},
        },
        {
            "type": "scatter",
            "mode": "markers",
            "name": "median wait, last 7 days (h)",
            "x": teams,
            "y": [r.recent_wait_p50_hours for r in rows],
            "yaxis": "y2",
            "marker": {"size": 11, "color": PROPOSED},
        },
    ]
    layout = {
        **BASE_LAYOUT,
        "title": {"text": "Queue length and wait per team"},
        "margin": {**BASE_LAYOUT["margin"], "r": 60},
        "yaxis": {"title": {"text": "pending jobs"}, "rangemode": "tozero"},
        "yaxis2": {"title": {"text": "hours"}, "overlaying": "y", "side": "right", "rangemode": "tozero"},
        "height": 340,
        "legend": {"orientation": "h", "y": -0.2},
    }
    return {"data": data, "layout": layout, "config": CONFIG}


def borrowed_lent_figure(rows: Sequence) -> dict:
    """Bars per team queue: device units borrowed from the cohort (up) and lent to it (down), now."""
    names = [f"{r.quota.team.name} ({r.quota.cluster.name})" for r in rows]
    data = [
        {
            "type": "bar",
            "name": "borrowed",
            "x": names,
            "y": [r.borrowed for r in rows],
            "marker": {"color": "#d9822b"},
        },
        {
            "type": "bar",
            "name": "lent",
            "x": names,
            "y": [-round(r.lent, 1) for r in rows],
            "marker": {"color": "#3a9a5b"},
            "customdata": [round(r.lent, 1) for r in rows],
            "hovertemplate": "%{x}<br>lent %{customdata}<extra></extra>",
        },
    ]
    layout = {
        **BASE_LAYOUT,
        "barmode": "relative",
        "title": {"text": "Borrowed / lent per team (device units, now)"},
        "yaxis": {"title": {"text": "← lent · borrowed →"}, "zeroline": True},
        "height": 340,
        "legend": {"orientation": "h", "y": -0.2},
    }
    return {"data": data, "layout": layout, "config": CONFIG}


def cohort_tree_figure(nodes: Sequence) -> dict:
    """Icicle of the cohort tree: size = nominal device units under each node, colour = share in use now."""
    ids, labels, parents, values, colors, texts = [], [], [], [], [], []
    by_name = {}
    for node in nodes:
        node_id = f"{node.kind}:{node.name}"
        by_name[(node.kind, node.name)] = node_id
        ids.append(node_id)
        labels.append(node.name)
        parents.append(by_name.get(("cohort", node.parent), "") if node.parent else "")
        values.append(node.nominal_total)
        share = node.used_total / node.nominal_total if node.nominal_total else 0
        colors.append(round(min(share, 2.0) * 100, 1))
        texts.append(f"{node.used_total} / {node.nominal_total} in use")
    data = [
        {
            "type": "icicle",
            "ids": ids,
            "labels": labels,
            "parents": parents,
            "values": values,
            "text": texts,
            "branchvalues": "total",
            "textinfo": "label+text",
            "marker": {
                "colors": colors,
                "colorscale": [[0, "#e8eef9"], [0.5, "#2f6fdf"], [1, "#d9822b"]],
                "cmin": 0,
                "cmax": 200,
                "showscale": True,
                "colorbar": {"title": {"text": "% of nominal in use"}},
            },
            "hovertemplate": "%{label}<br>%{text}<br>nominal %{value}<extra></extra>",
        }
    ]
    layout = {**BASE_LAYOUT, "title": {"text": "Cohort tree: live usage against nominal"}, "height": 380}
    return {"data": data, "layout": layout, "config": CONFIG}
