"""The project's domain errors: services raise them, the API maps them to 400/409, pages to form errors."""

from __future__ import annotations


class DomainError(Exception):
    """A rule of the domain was broken; ``field`` names the offending input where there is one."""

    def __init__(self, message: str, *, field: str | None = None, code: str = "invalid") -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.code = code

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class ValidationFailed(DomainError):
    """Input that cannot be accepted; carries every problem found, keyed by field."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        self.errors = errors
        summary = "; ".join(f"{field}: {msg}" for field, msgs in errors.items() for msg in msgs)
        super().__init__(summary, code="invalid")


class Conflict(DomainError):
    """The change conflicts with the current state (maps to HTTP 409)."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message, field=field, code="conflict")
