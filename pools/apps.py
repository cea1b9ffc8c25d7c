"""App config for pools."""

from django.apps import AppConfig


class PoolsConfig(AppConfig):
    """The resource truth."""

    name = "pools"
    verbose_name = "Pools"
