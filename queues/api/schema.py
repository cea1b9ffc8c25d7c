"""The OpenAPI document says every answer an endpoint can give (drf-spectacular postprocessing hook)."""

from __future__ import annotations

ERROR = {
    "type": "object",
    "properties": {"detail": {"type": "string"}},
    "additionalProperties": True,
    "description": "What went wrong; a 400 names each field with its problems instead.",
}
#: Answers every operation can give: bad input, no or bad credentials, not allowed, throttled.
COMMON = {
    "400": "Invalid input: the problems by field (or `detail`).",
    "401": "No credentials, or an invalid, expired or revoked token.",
    "403": "Not allowed: not a member of that team, a token of another team, or a missing CSRF token (session).",
    "429": "Throttled: too many calls (or invalid tokens) in the window; see Retry-After.",
}
NOT_FOUND = "No such object, or one of another team (another team's job is not found, never forbidden)."


def error_responses(result, generator, request, public):
    """Add the error answers (400/401/403/429 everywhere, 404 where the path names an object) to each operation."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR
    ref = {"$ref": "#/components/schemas/Error"}
    for path, operations in result.get("paths", {}).items():
        for operation in operations.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            answers = dict(COMMON)
            if "{" in path:
                answers["404"] = NOT_FOUND
            for code, description in answers.items():
                operation["responses"].setdefault(
                    code, {"description": description, "content": {"application/json": {"schema": ref}}}
                )
    return result
