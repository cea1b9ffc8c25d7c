"""The engine's compiled build: its hot modules compiled with mypyc, used only while it matches the sources.

``scripts/build_engine.py`` (run by ``scripts/bootstrap``) compiles ``MODULES`` into ``build/engine-native/`` and
writes there the ``source_digest`` it compiled. When ``queues.engine`` is imported, ``activate`` puts that build
ahead of the sources on the package's search path, but only when the digest still matches the engine's sources,
this Python and this machine; an edited engine, a missing build or ``PORTAL_ENGINE_PURE=1`` runs the same code as
plain Python. Both give the same decisions (docs/engine.md, "Compiled build").
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import platform
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

#: The modules compiled: the replay's hot path (cycles, queues, quota, placement, preemption, fair sharing and the
#: engine's working records).
MODULES = (
    "capacity_view",
    "cycle",
    "fair_share",
    "fair_sharing",
    "flavor_assignment",
    "placement",
    "pod_placement",
    "preemption",
    "protection",
    "queueing",
    "quota",
    "records",
    "scheduler",
    "simulation",
    "victims",
)
#: Name of the build's shared runtime module (``<GROUP>__mypyc``).
GROUP = "queues_engine_native"
ENGINE_DIR = Path(__file__).resolve().parent
BUILD_DIR = ENGINE_DIR.parents[1] / "build" / "engine-native"
STAMP = BUILD_DIR / "SOURCE_DIGEST"
#: Set (to anything but "" or "0") to run the engine as plain Python even when a current build exists.
PURE_ENV = "PORTAL_ENGINE_PURE"

logger = logging.getLogger(__name__)


def source_digest() -> str:
    """What a build must have been compiled from: every engine source, the module list, Python's ABI and machine."""
    digest = hashlib.sha256()
    digest.update(f"{sys.implementation.cache_tag} {platform.machine()} {' '.join(MODULES)}\n".encode())
    for path in sorted(ENGINE_DIR.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def built_digest() -> str | None:
    """The digest the build in ``BUILD_DIR`` was compiled from (None: no build)."""
    try:
        return STAMP.read_text().strip()
    except OSError:
        return None


def wanted() -> bool:
    """Whether the compiled build should be used (``PORTAL_ENGINE_PURE`` not set)."""
    return os.environ.get(PURE_ENV, "") in ("", "0")


def activate(package_path: list[str]) -> bool:
    """Put a current build ahead of the sources in ``queues.engine``'s ``__path__``; whether it did."""
    if not wanted():
        return False
    built = built_digest()
    if built is None:
        return False
    if built != source_digest():
        logger.warning("the compiled engine in %s is stale: running plain Python (scripts/build_engine.py)", BUILD_DIR)
        return False
    compiled = str(BUILD_DIR / "queues" / "engine")
    if compiled not in package_path:
        package_path.insert(0, compiled)
    if str(BUILD_DIR) not in sys.path:
        sys.path.append(str(BUILD_DIR))  # the build's runtime module, ``<GROUP>__mypyc``
    return True


def compiled() -> bool:
    """Whether the engine running in this process is the compiled build."""
    module = importlib.import_module(f"{__package__}.scheduler")
    return str(module.__file__).endswith(tuple(EXTENSION_SUFFIXES))


def describe() -> str:
    """One line for benchmarks and checks: which engine runs."""
    return "engine: compiled (mypyc)" if compiled() else "engine: plain Python"
