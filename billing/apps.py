"""App config for billing."""

from django.apps import AppConfig


class BillingConfig(AppConfig):
    """Metering and cost."""

    name = "billing"
    verbose_name = "Billing"

    def ready(self) -> None:
        """Add billing's checks to the cluster reconciler (clusters, below billing, cannot import them)."""
        from billing.reconcile_checks import usage_open_after_end
        from clusters.kube_sync.checks import reconcile_check_register

        reconcile_check_register("usage_open_after_end", usage_open_after_end)
