"""The notification preferences form."""

from __future__ import annotations

from django import forms

from notify.kinds import CHOOSABLE
from notify.services import webhook_url_errors


class PreferenceForm(forms.Form):
    """Email on/off, an incoming webhook URL, and the kinds wanted."""

    email = forms.BooleanField(required=False, label="Email me (to the address of my account)")
    webhook_url = forms.CharField(
        required=False,
        max_length=500,
        label="Incoming webhook URL",
        help_text='Slack, Microsoft Teams or Mattermost incoming webhook; it receives {"text": …}. Empty: none.',
    )
    kinds = forms.MultipleChoiceField(
        required=False, choices=CHOOSABLE, widget=forms.CheckboxSelectMultiple, label="Tell me when"
    )

    def clean_webhook_url(self) -> str:
        """An http(s) URL on an allowed host, or nothing."""
        url = self.cleaned_data["webhook_url"].strip()
        if errors := webhook_url_errors(url):
            raise forms.ValidationError(errors)
        return url
