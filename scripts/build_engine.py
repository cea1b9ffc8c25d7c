"""Compile the engine's hot modules with mypyc into build/engine-native/ (see queues/engine/native.py).

Does nothing when the build there matches the sources; ``--force`` rebuilds anyway. Exits non-zero when the build
fails (no C compiler, a type error mypyc refuses): the engine then runs as plain Python.

    .venv/bin/python scripts/build_engine.py [--force]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from mypyc.build import mypycify
from setuptools import Distribution

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["PORTAL_ENGINE_PURE"] = "1"  # importing the package must not load the build being replaced

from queues.engine import native  # noqa: E402


def build() -> None:
    """Compile ``native.MODULES`` in a scratch directory, then move the result into place with its digest."""
    digest = native.source_digest()  # before compiling: an edit made meanwhile leaves the build stale, not wrong
    sources = [str(native.ENGINE_DIR / f"{name}.py") for name in native.MODULES]
    with tempfile.TemporaryDirectory(prefix="engine-native-") as scratch:
        out = Path(scratch) / "out"
        cwd = os.getcwd()
        os.chdir(scratch)  # mypy reads no project configuration; its cache and the C sources stay in scratch
        try:
            extensions = mypycify(
                ["--ignore-missing-imports", "--follow-imports=silent", *sources],
                opt_level="3",
                group_name=native.GROUP,
                target_dir=str(Path(scratch) / "c"),
            )
            dist = Distribution({"name": native.GROUP, "ext_modules": extensions, "py_modules": [], "packages": []})
            dist.script_name = "build_engine.py"
            dist.script_args = ["-q", "build_ext", "--build-lib", str(out), "--build-temp", str(Path(scratch) / "t")]
            dist.parse_command_line()
            dist.run_commands()
        finally:
            os.chdir(cwd)
        (out / native.STAMP.name).write_text(digest + "\n")
        shutil.rmtree(native.BUILD_DIR, ignore_errors=True)
        native.BUILD_DIR.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(out), native.BUILD_DIR)


def main() -> int:
    """Build unless current; print what happened."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild even when the build is current")
    args = parser.parse_args()
    if not args.force and native.built_digest() == native.source_digest():
        print(f"compiled engine is current ({native.BUILD_DIR.relative_to(ROOT)})")
        return 0
    began = time.monotonic()
    try:
        build()
    except (SystemExit, Exception) as exc:  # setuptools reports a failed compile as SystemExit
        print(f"compiled engine NOT built ({exc}); the engine runs as plain Python", file=sys.stderr)
        return 1
    print(f"compiled engine built in {time.monotonic() - began:.0f} s ({native.BUILD_DIR.relative_to(ROOT)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
