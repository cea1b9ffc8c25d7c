"""Admin of notify: read the outbox, digests and deliveries (written only by the services)."""

from django.contrib import admin

from notify.models import Delivery, Digest, Event, Preference


@admin.register(Preference)
class PreferenceAdmin(admin.ModelAdmin):
    """Users' notification preferences."""

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
