"""URLs of the pool pages."""

from django.urls import path

from pools import views

app_name = "pools"
urlpatterns = [
    path("", views.overview, name="overview"),
]
