"""State names in words: what a person reads instead of an internal value such as ``in_repair``."""

from __future__ import annotations

from django.db import models


def state_words(choices: type[models.TextChoices], value: str) -> str:
    """A choice's label for a sentence: ``in_repair`` → "in repair", ``unhealthy`` → "unhealthy" (the label's
    parenthesised gloss dropped, an acronym kept: "RMA"); an unknown value with its underscores as spaces."""
    try:
        label = str(choices(value).label)
    except ValueError:
        return str(value).replace("_", " ")
    label = label.split(" (")[0]
    return label[:1].lower() + label[1:] if label[1:2].islower() else label


def states_words(choices: type[models.TextChoices], values) -> str:
    """Several states in words, joined by commas (in the given order)."""
    return ", ".join(state_words(choices, v) for v in values)


def plural(n: int, word: str, words: str | None = None) -> str:
    """``1 pod``, ``3 pods``; ``words`` for an irregular plural (``plural(2, "child", "children")``)."""
    return f"{n} {word if n == 1 else (words or word + 's')}"


def duration_words(seconds: float) -> str:
    """A length of time in words, to its two largest units: "45 seconds", "1 minute", "3 hours 5 minutes"."""
    seconds = round(max(seconds, 0))
    if seconds < 60:
        return plural(seconds, "second")
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return plural(minutes, "minute") + (f" {plural(secs, 'second')}" if secs and minutes < 10 else "")
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return plural(hours, "hour") + (f" {plural(minutes, 'minute')}" if minutes else "")
    days, hours = divmod(hours, 24)
    return plural(days, "day") + (f" {plural(hours, 'hour')}" if hours else "")


def duration_short(seconds: float) -> str:
    """A length of time in short units, to its two largest: "42 s", "25 min", "2 h 10 min", "3 d 4 h"."""
    seconds = round(max(seconds, 0))
    if seconds < 60:
        return f"{seconds} s"
    minutes, _ = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"
