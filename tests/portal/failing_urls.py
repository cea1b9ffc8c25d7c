"""A URLconf with one view that fails, for the 500 page test."""

from django.urls import path


def boom(request):
    """Always fails."""
    raise RuntimeError("boom")


urlpatterns = [path("boom/", boom)]
