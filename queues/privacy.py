"""Tenant privacy: other teams' usage is shown as *team and amount*, never their jobs' names, owners, ids or commands.

What a job page, the API or the pool page shows of *other* jobs goes through a :class:`Redactor` made for the
viewer: a reference to another team's job (``speech/bert``, ``team-speech/bert-12``) reads "a job of team speech",
Kueue's workload UIDs and cohort paths are dropped, and the ids of other jobs leave the details. Platform admins and
operators (``sees_every_team``) see everything; a member of several teams sees each of their teams' names.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from queues.models import Membership, Team
from queues.visibility import sees_every_team, teams_of, users_seeing_every_team

#: Detail keys that identify another job (ids, Kueue UIDs, cohort paths): dropped for viewers who may not see them.
PRIVATE_DETAIL_KEYS = frozenset(
    {"preemptor", "victim", "preemptorJobUid", "preemptor_path", "preemptee_path", "workloadUid"}
)
#: Kueue's "(UID: …, JobUID: …)" after "a workload", and the "; preemptor path: …" tail of its preemption messages.
_UIDS = re.compile(r"\s*\((?:UID|JobUID): [^)]*\)")
_PATHS = re.compile(r";\s*preemptor path:[^\n]*")


def may_need_redaction(text: str) -> bool:
    """Whether ``text`` could name another team's job or carry Kueue UIDs or a cohort path (every one of those has a
    ``/`` or ``UID: ``); when not, no redactor changes it, and none need be built."""
    return bool(text) and ("/" in text or "UID: " in text)


def other_job_phrase(team_slug: str) -> str:
    """How another team's job is named to someone outside that team."""
    return f"a job of team {team_slug}"


class Redactor:
    """Rewrites what a viewer reads so that other teams' jobs appear only as their team."""

    def __init__(self, *, sees_all: bool, own_slugs: Iterable[str] = (), others: Iterable[tuple[str, str]] = ()):
        self.sees_all = sees_all
        self.own_slugs = frozenset(own_slugs)
        prefixes: dict[str, str] = {}
        for slug, namespace in others:
            prefixes[slug] = slug
            if namespace:
                prefixes[namespace] = slug
        self._slug_of = prefixes
        self._refs = (
            re.compile(
                r"(?<![\w./-])(" + "|".join(re.escape(p) for p in sorted(prefixes, key=len, reverse=True)) + r")/"
                r"[A-Za-z0-9](?:[\w.-]*[A-Za-z0-9])?"
            )
            if prefixes
            else None
        )

    def sees_team(self, slug: str) -> bool:
        """Whether the viewer may see the names of this team's jobs."""
        return self.sees_all or slug in self.own_slugs

    def text(self, text: str) -> str:
        """``text`` with other teams' jobs named by their team only, and no Kueue UIDs or cohort paths."""
        if self.sees_all or not text:
            return text
        if self._refs is not None:
            text = self._refs.sub(lambda m: other_job_phrase(self._slug_of[m.group(1)]), text)
        return _PATHS.sub("", _UIDS.sub("", text))

    def value(self, value: Any) -> Any:
        """A detail value, redacted all the way down."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return self.details(value)
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value

    def details(self, details: dict | None) -> dict:
        """Details without other jobs' ids, texts redacted."""
        if self.sees_all:
            return dict(details or {})
        return {k: self.value(v) for k, v in (details or {}).items() if k not in PRIVATE_DETAIL_KEYS}

    def fields(self, obj, names: Iterable[str] = ("message", "kueue_message", "details")):
        """A copy of a dataclass (a diagnosis, a verdict, a timeline entry) with those fields redacted."""
        if self.sees_all or obj is None:
            return obj
        changes = {n: self.value(getattr(obj, n)) for n in names if hasattr(obj, n)}
        return dataclasses.replace(obj, **changes)


def redactor_for(user: AbstractBaseUser | AnonymousUser, *, teams: Iterable[Team] | None = None) -> Redactor:
    """The redactor of what ``user`` reads (``teams``: the user's teams, when the caller has them already)."""
    if sees_every_team(user):
        return Redactor(sees_all=True)
    own = {t.slug for t in teams} if teams is not None else set(teams_of(user).values_list("slug", flat=True))
    others = Team.objects.exclude(slug__in=own).values_list("slug", "namespace")
    return Redactor(sees_all=False, own_slugs=own, others=list(others))


def redactors_for(user_ids: Iterable[int]) -> dict[int, Redactor]:
    """The redactors of several readers at once (notifications of a burst), in three queries whatever their number;
    an id of no active user gets the strictest (it sees no team's jobs)."""
    ids = set(user_ids)
    if not ids:
        return {}
    everyone = users_seeing_every_team(ids)
    own: dict[int, set[str]] = defaultdict(set)
    for user_id, slug in Membership.objects.filter(user_id__in=ids - everyone).values_list("user_id", "team__slug"):
        own[user_id].add(slug)
    teams = list(Team.objects.values_list("slug", "namespace")) if ids - everyone else []
    return {
        user_id: Redactor(sees_all=True)
        if user_id in everyone
        else Redactor(sees_all=False, own_slugs=own[user_id], others=[t for t in teams if t[0] not in own[user_id]])
        for user_id in ids
    }


class QueuesJobVisibility:
    """Implements :class:`pools.ports.JobVisibility`: whose job names a viewer of the pool page may read."""

    def job_teams_seen_by(self, user) -> frozenset[str] | None:
        """Slugs of the user's teams; ``None`` (every team) for admins and operators."""
        if sees_every_team(user):
            return None
        return frozenset(teams_of(user).values_list("slug", flat=True))
