"""The portal's WSGI application with its static files served by Django's handler (as ``runserver`` does).

Deployed, an nginx sidecar serves ``/static/`` and gunicorn the rest (deploy/); the system tests run gunicorn alone,
so this wraps the same application for them: the pages' scripts (htmx) and styles load as in production.
"""

from django.contrib.staticfiles.handlers import StaticFilesHandler

from portal.wsgi import application as portal_application

application = StaticFilesHandler(portal_application)
