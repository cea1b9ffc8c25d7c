"""URLs of the health and repair pages (staff, except a ticket's summary page)."""

from django.urls import path

from pools.health import views

app_name = "health"
urlpatterns = [
    path("", views.health_map_page, name="map"),
    path("tickets/", views.ticket_queue_page, name="tickets"),
    path("tickets/<int:pk>/", views.ticket_page, name="ticket"),
    path("capacity/", views.capacity_page, name="capacity"),
]
