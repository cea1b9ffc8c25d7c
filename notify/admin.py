"""Admin of notify: read the outbox, digests and deliveries (written only by the services)."""

from django import forms
from django.contrib import admin

from notify.models import Delivery, Digest, Event, Preference
from notify.services import webhook_url_errors


class PreferenceAdminForm(forms.ModelForm):
    """The admin's form of a preference: the webhook URL passes the same egress check as the user's page."""

    webhook_url = forms.CharField(required=False, max_length=500, label="Webhook URL")

    class Meta:
        model = Preference
        fields = "__all__"  # noqa: DJ007 (the admin shows every field of this small model)

    def clean_webhook_url(self) -> str:
        """An http(s) URL the egress guard accepts (kernel.egress), or nothing."""
        url = self.cleaned_data["webhook_url"].strip()
        if errors := webhook_url_errors(url):
            raise forms.ValidationError(errors)
        return url


@admin.register(Preference)
class PreferenceAdmin(admin.ModelAdmin):
    """Users' notification preferences."""

    form = PreferenceAdminForm
    list_display = ("user", "email", "webhook_url")
    search_fields = ("user__username", "user__email")
    raw_id_fields = ("user",)


class ReadOnly(admin.ModelAdmin):
    """Rows the delivery writes: shown, never edited here."""

    def has_add_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False


@admin.register(Event)
class EventAdmin(ReadOnly):
    """The outbox."""

    list_display = ("recorded_at", "recipient", "kind", "title", "state", "digest")
    list_filter = ("state", "kind")
    search_fields = ("key", "title", "recipient__username")


@admin.register(Digest)
class DigestAdmin(ReadOnly):
    """Digests made from the outbox."""

    list_display = ("created_at", "recipient", "subject", "event_count", "key")
    search_fields = ("key", "recipient__username")


@admin.register(Delivery)
class DeliveryAdmin(ReadOnly):
    """Each digest on each channel."""

    list_display = ("digest", "channel", "target", "state", "attempts", "attempted_at", "sent_at")
    list_filter = ("state", "channel")
