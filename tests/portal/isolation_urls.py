"""The portal's URLconf plus one endpoint the isolation matrix has no entry for (its enumeration must notice)."""

from django.http import JsonResponse
from django.urls import include, path

from portal.urls import urlpatterns as portal_urlpatterns


def unlisted(request):
    """A new API endpoint nobody added to the matrix."""
    return JsonResponse({})


urlpatterns = [*portal_urlpatterns, path("api/v2/", include([path("reports/<int:pk>/", unlisted)]))]
