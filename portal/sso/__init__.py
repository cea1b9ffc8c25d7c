"""Single sign-on with OpenID Connect (mozilla-django-oidc): provider discovery, the backend, sign-in, the mapping.

Off unless ``OIDC_ISSUER`` and ``OIDC_CLIENT_ID`` are set (docs/operations.md, "Single sign-on").
"""
