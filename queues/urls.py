"""URLs of the researcher pages, and of the team leads' waiting page."""

from django.urls import path

from queues import token_views, views
from queues.reservations import views as reservation_views
from queues.waiting import views as waiting_views

app_name = "queues"
urlpatterns = [
    path("classes/", views.class_catalogue, name="classes"),
    path("jobs/", views.job_list, name="jobs"),
    path("submit/", views.job_submit, name="job_submit"),
    path("submit/check/", views.job_feasibility, name="job_feasibility"),
    path("jobs/<int:pk>/", views.job_detail, name="job_detail"),
    path("jobs/<int:pk>/cancel/", views.job_cancel, name="job_cancel"),
    path("jobs/<int:pk>/idle-snooze/", views.job_idle_snooze, name="job_idle_snooze"),
    path("jobs/<int:pk>/run/", views.job_run, name="job_run"),
    path("jobs/<int:pk>/sent/", views.job_sent, name="job_sent"),
    path("team/", views.team_switch, name="team_switch"),
    path("tokens/", token_views.api_tokens, name="api_tokens"),
    path("tokens/<int:pk>/revoke/", token_views.api_token_revoke_view, name="api_token_revoke"),
    path("waiting/", waiting_views.waiting, name="waiting"),
    path("waiting/export.csv", waiting_views.waiting_csv, name="waiting_csv"),
    path("waiting/jobs/", waiting_views.waiting_jobs, name="waiting_jobs"),
    path("waiting/study/", waiting_views.waiting_study, name="waiting_study"),
    path("waiting/study/status/", waiting_views.waiting_study_status, name="waiting_study_status"),
    path("reservations/", reservation_views.reservation_list, name="reservations"),
    path("reservations/<int:pk>/", reservation_views.reservation_detail, name="reservation_detail"),
    path("reservations/<int:pk>/approve/", reservation_views.reservation_approve_view, name="reservation_approve"),
    path("reservations/<int:pk>/refuse/", reservation_views.reservation_refuse_view, name="reservation_refuse"),
    path("reservations/<int:pk>/cancel/", reservation_views.reservation_cancel_view, name="reservation_cancel"),
    path("reservations/<int:pk>/preview/", reservation_views.reservation_preview_view, name="reservation_preview"),
    path(
        "reservations/<int:pk>/preview/<int:preview_pk>/",
        reservation_views.reservation_preview_part,
        name="reservation_preview_part",
    ),
    path("reservations/calendar/<slug:slug>/", reservation_views.reservation_calendar, name="reservation_calendar"),
]
