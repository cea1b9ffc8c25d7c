"""The waiting page's Plotly figures: pure functions from a wait report to figure dicts (no database, no browser)."""

from __future__ import annotations

from queues.waiting.causes import CAUSE_COLOURS, CAUSES, cause_label
from queues.waiting.selectors import WaitReport

CONFIG = {"displaylogo": False, "responsive": True, "modeBarButtonsToRemove": ["lasso2d", "select2d"]}
US_PER_HOUR = 3_600_000_000


def weekly_causes_figure(report: WaitReport, *, title: str = "GPU-hours of waiting per week") -> dict:
    """Stacked bars: per week, the GPU-hours of waiting of each cause (the causes with any waiting in the range)."""
    x = [w.isoformat() for w in report.weeks]
    causes = report.causes
    data = [
        {
            "type": "bar",
            "name": cause_label(cause),
            "meta": cause,
            "x": x,
            "y": [round(report.by_week.get(w, {}).get(cause, 0) / US_PER_HOUR, 3) for w in report.weeks],
            "marker": {"color": CAUSE_COLOURS[cause]},
            "hovertemplate": "%{y:.1f} GPU-h<extra>%{fullData.name}</extra>",
        }
        for cause in CAUSES
        if cause in causes
    ]
    return {
        "data": data,
        "layout": {
            "title": {"text": title, "x": 0, "xanchor": "left"},
            "barmode": "stack",
            "margin": {"l": 60, "r": 20, "t": 50, "b": 70},
            "legend": {"orientation": "h", "y": -0.25},
            "hovermode": "x unified",
            "xaxis": {"type": "category"},
            "yaxis": {"title": {"text": "GPU-hours"}},
            "paper_bgcolor": "rgba(0,0,0,0)",
            "plot_bgcolor": "rgba(0,0,0,0)",
        },
        "config": CONFIG,
    }
