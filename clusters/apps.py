from django.apps import AppConfig


class ClustersConfig(AppConfig):
    """The cluster integration layer (see docs/architecture.md)."""

    name = "clusters"
    verbose_name = "Clusters"

    def ready(self) -> None:
        """Register the implementations of the ports the lower layers declare."""
        from clusters.port import CeleryClusterPort
        from queues.ports import cluster_port_register

        cluster_port_register(CeleryClusterPort())
