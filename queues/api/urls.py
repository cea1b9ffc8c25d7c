"""URLs of the REST API (mounted at /api/) and its OpenAPI schema."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.routers import SimpleRouter

from queues.api import reservations, views, waiting

router = SimpleRouter(use_regex_path=False)
router.register("jobs", views.JobViewSet, basename="job")
router.register("classes", views.ClassViewSet, basename="class")
router.register("teams", views.TeamViewSet, basename="team")
router.register("tokens", views.TokenViewSet, basename="token")
router.register("reservations", reservations.ReservationViewSet, basename="reservation")

app_name = "api"
urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("feasibility/", views.FeasibilityView.as_view(), name="feasibility"),
    path("waiting/", waiting.WaitingView.as_view(), name="waiting"),
    path("waiting/jobs/", waiting.WaitingJobsView.as_view(), name="waiting_jobs"),
    *router.urls,
]
