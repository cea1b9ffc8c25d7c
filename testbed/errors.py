"""The testbed's errors: each says what failed and what to do, with the component's log tail where it has one."""

from __future__ import annotations


class TestbedError(Exception):
    """The testbed cannot be built, started or reached; the message is for a person."""

    __test__ = False  # not a pytest test class despite its name


class ApiError(TestbedError):
    """The API server answered a request with an error status."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:2000]}")
        self.status = status
        self.body = body
