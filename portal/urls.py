"""Top-level URL configuration."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from portal import status, views
from portal.metrics import views as metrics_views

urlpatterns = [
    path("", views.home, name="home"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("healthz", views.healthz, name="healthz"),
    path("status.json", status.status_json, name="status_json"),
    path("status/", status.status_page, name="status"),
    path("metrics", metrics_views.metrics, name="metrics"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("oidc/", include("portal.sso.urls")),
    path("admin/policy/", include("queues.policy.urls")),
    path("admin/", admin.site.urls),
    path("pool/", include("pools.urls")),
    path("health/", include("pools.health.urls")),
    path("cost/", include("billing.urls")),
    path("notifications/", include("notify.urls")),
    path("api/billing/", include("billing.api")),
    path("api/", include("queues.api.urls")),
    path("", include("queues.urls")),
]

handler404 = "portal.views.not_found"
handler500 = "portal.views.server_error"
