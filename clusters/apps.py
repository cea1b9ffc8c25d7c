from django.apps import AppConfig


class ClustersConfig(AppConfig):
    """The cluster integration layer (see docs/architecture.md)."""

    name = "clusters"
    verbose_name = "Clusters"
