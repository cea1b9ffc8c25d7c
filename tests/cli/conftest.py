"""The live server runs in this process: its request log must not reach the CLI's captured stderr.

``CliRunner`` swaps ``sys.stderr`` while a command runs; a logging handler created (or reporting its own error)
during such a run writes into the command's output, and one left holding a closed stream by an earlier test prints
"--- Logging error ---" there. Each CLI test therefore gets the root logger's stream handlers on the process's
real stderr, and its previous streams back afterwards.
"""

from __future__ import annotations

import logging
import sys

import pytest


@pytest.fixture(autouse=True)
def server_log_off_the_cli_output():
    """Point the root logger's stream handlers at the real stderr for the test (a closed stream is not restored)."""
    # exactly StreamHandler (the settings' "console"): pytest's own capture handlers are subclasses, left alone
    handlers = [h for h in logging.getLogger().handlers if type(h) is logging.StreamHandler]
    previous = []
    for handler in handlers:
        with handler.lock:  # not setStream: it flushes the old stream first, which fails when that one is closed
            previous.append(handler.stream)
            handler.stream = sys.__stderr__
    yield
    for handler, stream in zip(handlers, previous, strict=True):
        if not getattr(stream, "closed", False):
            with handler.lock:
                handler.stream = stream
