"""Dates people type into filters: bounded, so that a day added to the last one cannot overflow (9999-12-31)."""

from __future__ import annotations

from datetime import date, timedelta

#: No report or filter needs a date before the portal's time or more than a year ahead.
EARLIEST_DATE = date(2000, 1, 1)
MAX_FUTURE_DAYS = 366


def date_range_problem(day: date, *, today: date) -> str:
    """Why ``day`` is not a date a filter accepts, or "" when it is one."""
    latest = today + timedelta(days=MAX_FUTURE_DAYS)
    if EARLIEST_DATE <= day <= latest:
        return ""
    return f"Choose a date between {EARLIEST_DATE:%Y-%m-%d} and {latest:%Y-%m-%d}."
