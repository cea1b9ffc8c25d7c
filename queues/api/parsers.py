"""Request body parsers of the REST API."""

from __future__ import annotations

from rest_framework import parsers
from rest_framework.exceptions import ParseError

#: Nesting a submission never needs (its deepest field, env, is two levels); deeper bodies are refused.
MAX_JSON_DEPTH = 32


def json_depth_exceeds(data, limit: int) -> bool:
    """Whether parsed JSON nests deeper than ``limit`` (iterative: no recursion on hostile input)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > limit:
                return True
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return False


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser; a body nested past the interpreter's recursion limit or ``MAX_JSON_DEPTH`` is a 400."""

    def parse(self, stream, media_type=None, parser_context=None):
        """Parse, refusing deep nesting with a ParseError (400) instead of a RecursionError (500)."""
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels") from None
        if json_depth_exceeds(data, MAX_JSON_DEPTH):
            raise ParseError(f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels")
        return data
