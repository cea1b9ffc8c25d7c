"""Template tags of the site shell."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from django.template import Context, Template
from django.test import RequestFactory

from portal.templatetags.portal_tags import gib, plotly_script


def _render(source: str, path: str = "/pool/") -> str:
    return Template("{% load portal_tags %}" + source).render(Context({"request": RequestFactory().get(path)}))


def test_nav_link_marks_the_current_section():
    assert _render('{% nav_link "pools:overview" "Pool" %}') == '<li><a href="/pool/" aria-current="page">Pool</a></li>'
    assert _render('{% nav_link "pools:overview" "Pool" %}', "/healthz") == '<li><a href="/pool/">Pool</a></li>'


def test_nav_link_renders_nothing_for_a_route_that_does_not_exist_yet():
    assert _render('{% nav_link "billing:nowhere" "Cost" %}') == ""


def test_plotly_script_is_served_locally():
    assert plotly_script() == '<script src="/static/vendor/plotly/plotly.min.js" defer></script>'
    assert plotly_script("basic") == '<script src="/static/vendor/plotly-basic/plotly-basic.min.js" defer></script>'
    with pytest.raises(ValueError, match="bundle must be one of full, basic"):
        plotly_script("gl3d")


def test_the_basic_plotly_bundle_is_the_version_of_the_full_one():
    def version(path: str) -> str:
        head = Path(finders.find(path)).read_text(encoding="utf-8")[:200]
        return re.search(r"plotly\.js .*?v(\d+\.\d+\.\d+)", head).group(1)

    assert version("vendor/plotly-basic/plotly-basic.min.js") == version("vendor/plotly/plotly.min.js")


def test_gib():
    assert gib(80 * 1024**3) == "80 GiB"
    assert gib(1536 * 1024**2) == "1.5 GiB"
    assert gib(None) == ""
