"""The cost page's filters: team, date range, grouping, user and class; one form for the page, CSV and charts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser

from billing.selectors import BUCKETS
from kernel.dates import date_range_problem
from kernel.widgets import FastSelect
from pools.models import ResourceClass
from queues.models import Team

ALL_TEAMS = "all"
MAX_RANGE_DAYS = 3 * 366
#: The report's range when none is given: the last 30 days, today included.
DEFAULT_DAYS = 30


@dataclass
class CostQuery:
    """Validated filters of a cost report."""

    teams: list[Team]
    start: date
    end: date
    bucket: str
    user: AbstractBaseUser | None
    resource_class: ResourceClass | None
    every_team: bool = False

    @property
    def scope(self) -> list[Team] | None:
        """The teams for the selectors; None stands for every team (staff), which needs no team filter."""
        return None if self.every_team else self.teams


class CostFilterForm(forms.Form):
    """Filters over the teams the viewer may see; unknown values are form errors, never other teams' data."""

    team = forms.ChoiceField(required=False, widget=FastSelect)
    start = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}))
    end = forms.DateField(required=False, label="To", widget=forms.DateInput(attrs={"type": "date"}))
    bucket = forms.ChoiceField(
        required=False, label="Per", choices=[(b, b.title()) for b in BUCKETS], initial="day", widget=FastSelect
    )
    user = forms.ChoiceField(required=False, label="User", widget=FastSelect)
    resource_class = forms.ChoiceField(required=False, label="Class", widget=FastSelect)

    def __init__(self, data, *, teams: list[Team], today: date, staff: bool = False) -> None:
        super().__init__(data)
        self.visible = {t.slug: t for t in teams}
        self.today = today
        self.staff = staff
        choices = [(t.slug, t.name) for t in teams]
        if len(teams) > 1:
            choices.insert(0, (ALL_TEAMS, "All teams" if staff else "All my teams"))
        self.fields["team"].choices = choices
        # The user filter offers the members of the teams in scope (all visible teams only for "all").
        slug = (data or {}).get("team") or ""
        in_scope = teams if slug == ALL_TEAMS else [self.visible.get(slug) or (teams[0] if teams else None)]
        members = (
            get_user_model()
            .objects.filter(memberships__team__in=[t for t in in_scope if t is not None])
            .distinct()
            .order_by("username")
            .only("pk", "username", "first_name", "last_name")
        )
        self._users = {str(u.pk): u for u in members}
        self.fields["user"].choices = [
            ("", "All users"),
            *((k, u.get_full_name() or u.get_username()) for k, u in self._users.items()),
        ]
        classes = ResourceClass.objects.order_by("display_order", "name").only("pk", "slug", "name")
        self._classes = {c.slug: c for c in classes}
        self.fields["resource_class"].choices = [("", "All classes"), *((c.slug, c.name) for c in classes)]

    def clean(self):
        data = super().clean()
        start = data.get("start") or self.today - timedelta(days=DEFAULT_DAYS - 1)
        end = data.get("end") or self.today
        out_of_range = [
            (name, problem)
            for name, day in (("start", start), ("end", end))
            if (problem := date_range_problem(day, today=self.today))
        ]
        for name, problem in out_of_range:
            self.add_error(name, problem)
        if out_of_range:
            start, end = self.today - timedelta(days=DEFAULT_DAYS - 1), self.today
        elif end < start:
            self.add_error("end", "“To” must not be before “From”.")
        elif (end - start).days > MAX_RANGE_DAYS:
            self.add_error("start", f"Choose at most {MAX_RANGE_DAYS} days.")
        data["start"], data["end"] = start, end
        return data

    def query(self) -> CostQuery | None:
        """The validated query, or None when the form has errors."""
        if not self.is_valid() or not self.visible:
            return None
        slug = self.cleaned_data.get("team") or ""
        if slug == ALL_TEAMS:
            teams = list(self.visible.values())
        elif slug:
            teams = [self.visible[slug]]
        else:
            teams = [next(iter(self.visible.values()))]
        return CostQuery(
            teams=teams,
            start=self.cleaned_data["start"],
            end=self.cleaned_data["end"],
            bucket=self.cleaned_data.get("bucket") or "day",
            user=self._users.get(self.cleaned_data.get("user") or ""),
            resource_class=self._classes.get(self.cleaned_data.get("resource_class") or ""),
            every_team=slug == ALL_TEAMS and self.staff,
        )


class LedgerFilterForm(forms.Form):
    """The borrowing statements' filters: a team the viewer may see (staff: or every team) and a month."""

    team = forms.ChoiceField(required=False, widget=FastSelect)
    month = forms.CharField(required=False, label="Month", widget=forms.DateInput(attrs={"type": "month"}))

    def __init__(self, data, *, teams: list[Team], today: date, staff: bool = False) -> None:
        super().__init__(data)
        self.visible = {t.slug: t for t in teams}
        self.today = today
        self.staff = staff
        choices = [(t.slug, t.name) for t in teams]
        if staff and len(teams) > 1:
            choices.insert(0, (ALL_TEAMS, "All teams (the cohort ledger)"))
        self.fields["team"].choices = choices

    def clean_month(self) -> date:
        raw = (self.cleaned_data.get("month") or "").strip()
        if not raw:
            return self.today.replace(day=1)
        try:
            month = date.fromisoformat(f"{raw}-01")
        except ValueError as exc:
            raise forms.ValidationError(f"{raw!r} is not a month; use YYYY-MM (e.g. 2026-03).") from exc
        problem = date_range_problem(month, today=self.today)
        if problem:
            raise forms.ValidationError(problem)
        return month

    def query(self) -> tuple[list[Team] | None, Team | None, date] | None:
        """(scope of teams — None: every team —, the one team of a statement or None, the month), or None on errors."""
        if not self.is_valid() or not self.visible:
            return None
        slug = self.cleaned_data.get("team") or ""
        month = self.cleaned_data["month"]
        if slug == ALL_TEAMS and self.staff:
            return None, None, month
        team = self.visible.get(slug) or next(iter(self.visible.values()))
        return [team], team, month
