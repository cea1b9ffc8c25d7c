from django.apps import AppConfig


class ClustersConfig(AppConfig):
    """The cluster integration layer (see docs/architecture.md)."""

    name = "clusters"
    verbose_name = "Clusters"

    def ready(self) -> None:
        """Register the implementations of the ports the lower layers declare."""
        from clusters.port import CeleryClusterPort
        from clusters.repair import QueuesRepairJobs
        from pools.health.ports import repair_jobs_port_register
        from queues.ports import cluster_port_register

        cluster_port_register(CeleryClusterPort())
        repair_jobs_port_register(QueuesRepairJobs())
