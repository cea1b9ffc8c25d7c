"""A URLconf whose views meet a dependency that is down, for the outage answers test (the portal's handler500)."""

from django.db import OperationalError
from django.urls import path
from kombu.exceptions import OperationalError as BrokerError
from rest_framework.views import APIView

from queues.api.views import PortalAPIMixin


def database_down(request):
    """A page whose query meets a restarting database."""
    raise OperationalError("terminating connection due to administrator command")


def broker_down(request):
    """A page whose task cannot be sent."""
    raise BrokerError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")


def bug(request):
    """A plain bug."""
    raise RuntimeError("boom")


class DatabaseDownAPI(PortalAPIMixin, APIView):
    """An API endpoint whose query meets a restarting database."""

    permission_classes = []
    authentication_classes = []
    throttle_classes = []

    def get(self, request):
        raise OperationalError("the database system is starting up")


urlpatterns = [
    path("page/db/", database_down),
    path("page/broker/", broker_down),
    path("api/db/", database_down),
    path("api/bug/", bug),
    path("api/drf-db/", DatabaseDownAPI.as_view()),
]
handler500 = "portal.views.server_error"
