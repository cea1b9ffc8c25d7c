"""Template tags of the site shell: navigation links that appear once their route exists, local script tags."""

from __future__ import annotations

from django import template
from django.http import HttpRequest
from django.templatetags.static import static
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from kernel.quantity import gib

register = template.Library()

#: Where plotly.js is served from: the file shipped in the ``plotly`` package (see settings.STATICFILES_DIRS).
PLOTLY_STATIC_PATH = "vendor/plotly/plotly.min.js"
#: plotly.js's basic partial bundle (scatter, bar and pie traces only; 1.2 MB instead of 4.8), vendored in
#: static/ from the ``plotly.js-basic-dist-min`` package of the same version as the ``plotly`` package's.
PLOTLY_BASIC_STATIC_PATH = "vendor/plotly-basic/plotly-basic.min.js"
PLOTLY_BUNDLES = {"full": PLOTLY_STATIC_PATH, "basic": PLOTLY_BASIC_STATIC_PATH}


@register.simple_tag(takes_context=True)
def nav_link(context: template.Context, route: str, label: str, exact: bool = False) -> SafeString:
    """An ``<li>`` link to a named route, marked current under its path (only on it with ``exact``); nothing while
    the route does not exist."""
    try:
        url = reverse(route)
    except NoReverseMatch:
        return mark_safe("")
    request: HttpRequest | None = context.get("request")
    under = not exact and url != "/" and request is not None and request.path.startswith(url)
    current = request is not None and (request.path == url or under)
    if current:
        return format_html('<li><a href="{}" aria-current="page">{}</a></li>', url, label)
    return format_html('<li><a href="{}">{}</a></li>', url, label)


@register.simple_tag
def plotly_script(bundle: str = "full") -> SafeString:
    """The ``<script>`` tag of the locally served plotly.js; put it only on pages that draw charts.

    ``bundle="basic"`` serves the partial bundle, enough for pages whose figures use only scatter, bar and pie
    traces; "full" (the default) every trace type (the policy dashboard's icicle needs it).
    """
    if bundle not in PLOTLY_BUNDLES:
        raise ValueError(f"plotly_script: bundle must be one of {', '.join(PLOTLY_BUNDLES)}, not {bundle!r}")
    return format_html('<script src="{}" defer></script>', static(PLOTLY_BUNDLES[bundle]))


register.filter("gib", gib)
