"""URLs of the policy admin pages (mounted under /admin/policy/, wrapped by the admin site's login)."""

from django.contrib import admin
from django.urls import path

from queues.policy import views

app_name = "policy"
urlpatterns = [
    path("dashboard/", admin.site.admin_view(views.dashboard), name="dashboard"),
    path("audit/", admin.site.admin_view(views.audit), name="audit"),
    path("previews/", admin.site.admin_view(views.previews), name="previews"),
    path("guarantees/", admin.site.admin_view(views.guarantees), name="guarantees"),
    path("previews/<int:pk>/", admin.site.admin_view(views.preview), name="preview"),
    path("previews/<int:pk>/discard/", admin.site.admin_view(views.preview_discard), name="preview_discard"),
]
