"""URLs of the notifications page (mounted at /notifications/)."""

from django.urls import path

from notify import views

app_name = "notify"
urlpatterns = [path("", views.notifications, name="notifications")]
