"""Single sign-on URLs (the names mozilla-django-oidc expects)."""

from django.urls import path

from portal.sso import views

urlpatterns = [
    path("authenticate/", views.SsoStartView.as_view(), name="oidc_authentication_init"),
    path("callback/", views.SsoCallbackView.as_view(), name="oidc_authentication_callback"),
]
