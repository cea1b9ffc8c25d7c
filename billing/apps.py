"""App config for billing."""

from django.apps import AppConfig


class BillingConfig(AppConfig):
    """Metering and cost."""

    name = "billing"
    verbose_name = "Billing"
