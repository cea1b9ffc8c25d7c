"""The waiting page's filters: team, class, and a range of weeks; one form for the page, the CSV and the API."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

from django import forms

from kernel.dates import date_range_problem
from kernel.widgets import FastSelect
from pools.models import ResourceClass
from queues.models import Team
from queues.waiting.causes import CAUSE_LABELS

ALL_TEAMS = "all"
#: Weeks shown when no range is given (this week included).
DEFAULT_WEEKS = 12
#: The longest range of weeks one report covers.
MAX_WEEKS = 104


@dataclass
class WaitQuery:
    """Validated filters of a wait report."""

    teams: list[Team]
    first_week: date
    last_week: date
    resource_class: ResourceClass | None
    every_team: bool = False

    @property
    def scope(self) -> list[Team] | None:
        """The teams for the selectors; None stands for every team (staff)."""
        return None if self.every_team else self.teams


def monday(day: date) -> date:
    """The Monday of ``day``'s week."""
    return day - timedelta(days=day.weekday())


class WaitFilterForm(forms.Form):
    """Filters over the teams the viewer may see; unknown values are form errors, never other teams' data."""

    team = forms.ChoiceField(required=False, widget=FastSelect)
    start = forms.DateField(required=False, label="From week of", widget=forms.DateInput(attrs={"type": "date"}))
    end = forms.DateField(required=False, label="To week of", widget=forms.DateInput(attrs={"type": "date"}))
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
        classes = ResourceClass.objects.order_by("display_order", "name").only("pk", "slug", "name")
        self._classes = {c.slug: c for c in classes}
        self.fields["resource_class"].choices = [("", "All classes"), *((c.slug, c.name) for c in classes)]

    def default_range(self) -> tuple[date, date]:
        """The last ``DEFAULT_WEEKS`` weeks, this one included."""
        last = monday(self.today)
        return last - timedelta(weeks=DEFAULT_WEEKS - 1), last

    def clean(self):
        data = super().clean()
        first_default, last_default = self.default_range()
        start = data.get("start") or first_default
        end = data.get("end") or last_default
        problems = [
            (name, problem)
            for name, day in (("start", start), ("end", end))
            if (problem := date_range_problem(day, today=self.today))
        ]
        for name, problem in problems:
            self.add_error(name, problem)
        if problems:
            start, end = first_default, last_default
        elif end < start:
            self.add_error("end", "“To week of” must not be before “From week of”.")
        elif (monday(end) - monday(start)).days // 7 + 1 > MAX_WEEKS:
            self.add_error("start", f"Choose at most {MAX_WEEKS} weeks.")
        data["start"], data["end"] = monday(start), monday(end)
        return data

    def query(self) -> WaitQuery | None:
        """The validated query, or None when the form has errors or the viewer sees no team."""
        if not self.is_valid() or not self.visible:
            return None
        slug = self.cleaned_data.get("team") or ""
        if slug == ALL_TEAMS:
            teams = list(self.visible.values())
        elif slug:
            teams = [self.visible[slug]]
        else:
            teams = [next(iter(self.visible.values()))]
        return WaitQuery(
            teams=teams,
            first_week=self.cleaned_data["start"],
            last_week=self.cleaned_data["end"],
            resource_class=self._classes.get(self.cleaned_data.get("resource_class") or ""),
            every_team=slug == ALL_TEAMS and self.staff,
        )


class WaitJobsForm(WaitFilterForm):
    """The drill-down: the report's filters plus one week and one cause."""

    week = forms.DateField(label="Week of")
    cause = forms.ChoiceField(choices=list(CAUSE_LABELS.items()))

    def clean_week(self) -> date:
        week = self.cleaned_data["week"]
        problem = date_range_problem(week, today=self.today)
        if problem:
            raise forms.ValidationError(problem)
        return monday(week)
