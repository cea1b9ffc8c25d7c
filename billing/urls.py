"""URLs of the cost pages (mounted at /cost/)."""

from django.urls import path

from billing import views

app_name = "billing"
urlpatterns = [
    path("", views.cost, name="cost"),
    path("export.csv", views.cost_csv, name="cost_csv"),
    path("mine/", views.usage_mine, name="usage_mine"),
    path("ledger/", views.ledger, name="ledger"),
    path("ledger/export.csv", views.ledger_csv, name="ledger_csv"),
]
