"""The portal's REST API over HTTP (``Authorization: Token <key>``), its refusals turned into plain sentences."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin

import requests

#: Seconds to wait for the portal to connect and to answer.
TIMEOUT = (10, 60)


@dataclass
class ApiError(Exception):
    """A request the portal refused or could not answer: what to tell the user, and the problems by field."""

    message: str
    status: int | None = None
    fields: dict[str, list[str]] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.message

    def lines(self) -> list[str]:
        """The message, then one line per field problem (``field: problem``)."""
        return [
            self.message,
            *(f"  {name}: {problem}" for name, problems in self.fields.items() for problem in problems),
        ]


def flatten_errors(body: Any, prefix: str = "") -> dict[str, list[str]]:
    """A 400 body (``{field: [problems]}``, nested for lists and maps) as ``{"field[0]": [problems]}``."""
    out: dict[str, list[str]] = {}
    if isinstance(body, dict):
        for key, value in body.items():
            name = f"{prefix}[{key}]" if prefix else str(key)
            for sub, problems in flatten_errors(value, name).items():
                out.setdefault(sub, []).extend(problems)
    elif isinstance(body, list) and all(isinstance(v, str) for v in body):
        out[prefix or "request"] = list(body)
    elif isinstance(body, list):
        for index, value in enumerate(body):
            for sub, problems in flatten_errors(value, f"{prefix}[{index}]").items():
                out.setdefault(sub, []).extend(problems)
    elif body not in (None, ""):
        out[prefix or "request"] = [str(body)]
    return out


def _detail(body: Any) -> str:
    """The answer's ``detail``, without a final full stop (the sentence it goes in ends itself)."""
    return str(body.get("detail", "")).rstrip(".") if isinstance(body, dict) else ""


def refusal(status: int, body: Any, *, url: str, retry_after: str | None = None) -> ApiError:
    """The ApiError for an HTTP error answer: 400 by field, 401/403 explained, 404, 409, 429, 503, 5xx."""
    detail = _detail(body)
    if status == 400:
        if isinstance(body, dict) and set(body) <= {"detail", "field"} and detail:
            if body.get("field"):  # a domain error about one field
                return ApiError("the portal refused the request:", status, {str(body["field"]): [detail]})
            return ApiError(f"the portal refused the request: {detail}", status)
        return ApiError("the portal refused the request:", status, flatten_errors(body))
    if status == 401:
        return ApiError(
            f"the token was refused ({detail or 'no valid token'}). A token stops working when it is revoked or "
            f"expires, or when its user leaves its team: create a new one at {urljoin(url, '/tokens/')} "
            "and set GPUPOOL_TOKEN.",
            status,
        )
    if status == 403:
        hint = " A token acts only in its own team: leave out --team, or use a token of that team."
        return ApiError(f"not allowed: {detail or 'forbidden'}.{hint if 'scoped to team' in detail else ''}", status)
    if status == 404:
        return ApiError(f"not found: {detail or 'no such object'} (another team's job is not found either)", status)
    if status == 409:
        return ApiError(f"conflict: {detail or 'the request conflicts with the current state'}", status)
    if status == 429:
        wait = f" Try again in {retry_after} s." if retry_after else ""
        return ApiError(f"too many requests: {detail or 'throttled'}.{wait}", status)
    if status == 503:  # a service the portal needs is down (its database, cache or broker); nothing was changed
        wait = f" Try again in {retry_after} s." if retry_after else ""
        return ApiError(
            f"the portal is temporarily unavailable: {detail or 'a service it needs is down'}.{wait}", status
        )
    return ApiError(f"the portal answered HTTP {status}{': ' + detail if detail else ''}", status)


class Client:
    """A session on the portal's ``/api/`` with one team token."""

    def __init__(self, url: str, token: str, *, session: requests.Session | None = None) -> None:
        self.url = url.rstrip("/") + "/"
        self.session = session or requests.Session()
        self.session.headers.update({"Authorization": f"Token {token}", "Accept": "application/json"})

    def page_url(self, path: str) -> str:
        """An absolute link to a page of the portal (``jobs/12/``)."""
        return urljoin(self.url, path.lstrip("/"))

    def request(self, method: str, path: str, *, params: dict | None = None, body: dict | None = None) -> Any:
        """Call ``/api/<path>`` (or an absolute URL the API gave) and return the decoded JSON answer."""
        url = path if path.startswith(("http://", "https://")) else urljoin(self.url, "api/" + path.lstrip("/"))
        try:
            response = self.session.request(method, url, params=params, json=body, timeout=TIMEOUT)
        except requests.RequestException as exc:
            raise ApiError(f"cannot reach the portal at {self.url}: {exc}") from exc
        try:
            data = response.json() if response.content else None
        except ValueError as exc:  # an HTML error page, or not the portal at all
            code = response.status_code
            if code >= 500:
                raise ApiError(f"the portal failed (HTTP {code}): try again later, or tell its admins", code) from exc
            raise ApiError(
                f"{url} answered HTTP {code} without JSON: is GPUPOOL_URL the portal's address ({self.url})?", code
            ) from exc
        if not response.ok:
            raise refusal(response.status_code, data, url=self.url, retry_after=response.headers.get("Retry-After"))
        return data

    def jobs(self, *, params: dict, pages: int = 1) -> list[dict]:
        """Jobs, newest first: ``pages`` pages of the list (0: all of them)."""
        found: list[dict] = []
        page = self.request("GET", "jobs/", params=params)
        taken = 1
        found.extend(page["results"])
        while page.get("next") and (pages == 0 or taken < pages):
            page = self.request("GET", page["next"])
            taken += 1
            found.extend(page["results"])
        return found

    def job(self, job_id: int) -> dict:
        """One job."""
        return self.request("GET", f"jobs/{job_id}/")

    def wait_reason(self, job_id: int) -> dict:
        """Why the job waits: reason, since, position, ETA, suggestions."""
        return self.request("GET", f"jobs/{job_id}/wait-reason/")

    def logs(self, job_id: int, *, tail: int | None = None) -> dict:
        """The job's last log lines per pod, read from its cluster now."""
        return self.request("GET", f"jobs/{job_id}/logs/", params={"tail": tail} if tail else None)

    def timeline(self, job_id: int) -> list[dict]:
        """The job's timeline, oldest first."""
        return self.request("GET", f"jobs/{job_id}/timeline/")

    def submit(self, body: dict) -> dict:
        """Submit a job; the created job."""
        return self.request("POST", "jobs/", body=body)

    def feasibility(self, body: dict) -> dict:
        """Would this submission start now (nothing recorded)."""
        return self.request("POST", "feasibility/", body=body)

    def cancel(self, job_id: int) -> dict:
        """Cancel a job; the job as it is now."""
        return self.request("POST", f"jobs/{job_id}/cancel/")

    def classes(self) -> list[dict]:
        """The team's resource classes with availability, quota and expected wait."""
        return self.request("GET", "classes/")

    def teams(self) -> list[dict]:
        """The token's team (a list of one)."""
        return self.request("GET", "teams/")

    def reservations(self, *, params: dict) -> list[dict]:
        """The team's reservations (recent and upcoming), earliest first."""
        return self.request("GET", "reservations/", params=params)

    def reservation(self, reservation_id: int) -> dict:
        """One reservation."""
        return self.request("GET", f"reservations/{reservation_id}/")

    def reserve(self, body: dict) -> dict:
        """Request a reservation; the reservation as the rules answered (a refusal is an ``ApiError`` of 409)."""
        return self.request("POST", "reservations/", body=body)

    def reservation_cancel(self, reservation_id: int) -> dict:
        """Cancel a reservation; the reservation as it is now."""
        return self.request("POST", f"reservations/{reservation_id}/cancel/")
