"""The reservation request form (the page's); the service checks every rule, the form only the field types."""

from __future__ import annotations

from django import forms

from pools.models import ResourceClass
from queues.models import Team

DATETIME_FORMATS = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S"]


class ReservationRequestForm(forms.Form):
    """A lead asks for devices of a class for a window (times in the portal's time zone)."""

    team = forms.ModelChoiceField(queryset=Team.objects.none(), to_field_name="slug", empty_label=None)
    resource_class = forms.ModelChoiceField(
        queryset=ResourceClass.objects.filter(active=True).order_by("display_order", "name"),
        to_field_name="slug",
        empty_label=None,
        label="Class",
    )
    count = forms.IntegerField(min_value=1, max_value=4096, label="Devices", initial=8)
    starts_at = forms.DateTimeField(
        input_formats=DATETIME_FORMATS,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        label="From",
    )
    ends_at = forms.DateTimeField(
        input_formats=DATETIME_FORMATS,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        label="To",
    )
    purpose = forms.CharField(
        max_length=200, widget=forms.TextInput(attrs={"placeholder": "evaluation run before the release"})
    )

    def __init__(self, *args, teams, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = teams


class ReservationDecisionForm(forms.Form):
    """An admin's words with a decision (required to refuse)."""

    note = forms.CharField(max_length=300, required=False)
