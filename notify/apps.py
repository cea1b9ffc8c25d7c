"""App config for notify."""

from django.apps import AppConfig


class NotifyConfig(AppConfig):
    """Lifecycle notifications: an outbox of events, delivered in digests by email and webhook."""

    name = "notify"
    verbose_name = "Notifications"

    def ready(self) -> None:
        """See every job timeline event and every quota shortfall queues writes, in its transaction."""
        from notify.record import JobEventRecorder, ShortfallRecorder
        from queues.ports import job_event_listener_register, shortfall_listener_register

        job_event_listener_register(JobEventRecorder())
        shortfall_listener_register(ShortfallRecorder())
