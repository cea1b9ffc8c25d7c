"""App config for billing."""

from django.apps import AppConfig


class BillingConfig(AppConfig):
    """Metering and cost."""

    name = "billing"
    verbose_name = "Billing"

    def ready(self) -> None:
        """Add billing's checks to the cluster reconciler and its job cost to the job page (both below billing)."""
        from billing.my_usage import BillingJobCost
        from billing.reconcile_checks import usage_open_after_end
        from clusters.kube_sync.checks import reconcile_check_register
        from queues.ports import job_cost_port_register

        reconcile_check_register("usage_open_after_end", usage_open_after_end)
        job_cost_port_register(BillingJobCost())
