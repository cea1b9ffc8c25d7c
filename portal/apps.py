"""The site shell app: base templates, navigation, login, shared domain errors."""

from django.apps import AppConfig


class PortalConfig(AppConfig):
    """Site shell."""

    name = "portal"
    verbose_name = "Portal"
