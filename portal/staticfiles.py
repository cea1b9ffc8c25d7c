"""A static-files finder for plotly.js as the ``plotly`` Python package ships it (no CDN, no copy in git)."""

from __future__ import annotations

from pathlib import Path

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

#: The URL path under STATIC_URL, and the file inside the package.
PLOTLY_PATH = "vendor/plotly/plotly.min.js"
_SOURCE = Path(plotly.__file__).resolve().parent / "package_data"


class PlotlyFinder(BaseFinder):
    """Serves only plotly.min.js from the installed plotly package (its version matches the Python side)."""

    storage = FileSystemStorage(location=str(_SOURCE))

    def find(self, path: str, find_all: bool = False, **kwargs):
        """The file's absolute path when asked for ``vendor/plotly/plotly.min.js``; else ``[]``.

        ``[]`` (not ``None``) for a miss, as Django's own finders do: ``finders.find`` collects a ``None`` into its
        list of matches, and the static view then fails on a missing file instead of answering 404.
        """
        if path != PLOTLY_PATH:
            return []
        match = str(_SOURCE / "plotly.min.js")
        return [match] if find_all else match

    def list(self, ignore_patterns):
        """The one file, for collectstatic; a storage whose prefix maps it under vendor/plotly/."""
        storage = FileSystemStorage(location=str(_SOURCE))
        storage.prefix = "vendor/plotly"
        yield "plotly.min.js", storage
