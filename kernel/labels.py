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
