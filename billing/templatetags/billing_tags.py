"""Template filters of the cost pages: money per currency and device-hours for people."""

from __future__ import annotations

from decimal import Decimal

from django import template

register = template.Library()


@register.filter
def money(amounts: dict | None) -> str:
    """``{"EUR": Decimal("1234.5")}`` → "1,234.50 EUR"; several currencies are joined, none is "–"."""
    if not amounts:
        return "–"
    parts = [f"{Decimal(v):,.2f} {c}" for c, v in sorted(amounts.items()) if v]
    return " · ".join(parts) or "0.00"


@register.filter
def hrs(value: Decimal | float | int | None) -> str:
    """Device-hours with one decimal and thousands separators: 1234.56 → "1,234.6"."""
    return f"{Decimal(value or 0):,.1f}"


@register.filter
def of_currency(amounts: dict | None, currency: str) -> Decimal:
    """One currency's amount of a per-currency dict (0 when absent)."""
    return Decimal((amounts or {}).get(currency, 0))
