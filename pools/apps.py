"""App config for pools."""

from django.apps import AppConfig


class PoolsConfig(AppConfig):
    """The resource truth."""

    name = "pools"
    verbose_name = "Pools"

    def ready(self) -> None:
        """Count changes of what the admission engine reads (``pools.state_version``)."""
        from pools import state_version

        state_version.connect()
