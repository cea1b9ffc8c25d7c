"""The compiled engine build (queues/engine/native.py): used only while current, and it decides as plain Python."""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from queues.engine import native
from queues.engine.scheduler import CycleOutcome, Engine
from queues.engine.simulation import Replay

from .test_cycle_shortcuts import _cluster

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def build_dir(tmp_path, monkeypatch):
    """A stand-in build directory (nothing is compiled into it: only where and whether it is used)."""
    monkeypatch.setattr(native, "BUILD_DIR", tmp_path)
    monkeypatch.setattr(native, "STAMP", tmp_path / "SOURCE_DIGEST")
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    return tmp_path


def test_a_current_build_goes_ahead_of_the_sources(build_dir):
    native.STAMP.write_text(native.source_digest() + "\n")
    path = [str(native.ENGINE_DIR)]
    assert native.activate(path) is True
    assert path == [str(build_dir / "queues" / "engine"), str(native.ENGINE_DIR)]
    assert str(build_dir) in sys.path  # where the build's runtime module lies


def test_no_build_leaves_the_sources(build_dir):
    path = [str(native.ENGINE_DIR)]
    assert native.activate(path) is False
    assert path == [str(native.ENGINE_DIR)]


def test_a_stale_build_is_not_used_and_says_so(build_dir, caplog):
    native.STAMP.write_text("0" * 64 + "\n")  # compiled from other sources
    path = [str(native.ENGINE_DIR)]
    with caplog.at_level(logging.WARNING, logger=native.__name__):
        assert native.activate(path) is False
    assert path == [str(native.ENGINE_DIR)]
    assert "stale" in caplog.text
    assert "scripts/build_engine.py" in caplog.text


def test_plain_python_when_asked(build_dir, monkeypatch):
    native.STAMP.write_text(native.source_digest() + "\n")
    monkeypatch.setenv(native.PURE_ENV, "1")
    path = [str(native.ENGINE_DIR)]
    assert native.activate(path) is False
    assert path == [str(native.ENGINE_DIR)]


def test_any_engine_source_changes_the_digest(tmp_path, monkeypatch):
    for source in native.ENGINE_DIR.glob("*.py"):
        (tmp_path / source.name).write_bytes(source.read_bytes())
    monkeypatch.setattr(native, "ENGINE_DIR", tmp_path)
    before = native.source_digest()
    with (tmp_path / "model.py").open("a") as model:  # not compiled, but the compiled modules read its classes
        model.write("\n")
    assert native.source_digest() != before


def decision_digests(seeds: tuple[int, ...] = (1, 2, 3)) -> list[str]:
    """sha256 of every cycle's admissions, preemptions and parked heads, and of the records, per seeded replay."""
    out = []
    for seed in seeds:
        state, workloads = _cluster(seed)
        replay = Replay(Engine(state, 0.0), start=0.0)
        for spec in workloads:
            replay.submit_at(spec, spec.created_at)
        stream = hashlib.sha256()

        def record(now: float, outcome: CycleOutcome, stream=stream) -> None:
            stream.update(repr((now, outcome.admitted, outcome.preemptions, sorted(outcome.parked))).encode())

        replay.on_cycle = record
        result = replay.run(until=None)
        stream.update(repr(sorted((k, repr(r)) for k, r in result.records.items())).encode())
        out.append(stream.hexdigest())
    return out


@pytest.mark.skipif(not native.compiled(), reason="no compiled engine build here (scripts/build_engine.py)")
def test_the_compiled_engine_decides_as_plain_python():
    script = (
        "from queues.engine import native; from tests.engine.test_native import decision_digests; "
        "print(native.compiled(), *decision_digests())"
    )
    env = {**os.environ, native.PURE_ENV: "1", "PYTHONPATH": str(REPO)}
    plain = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert plain[0] == "False"  # the other process ran the sources as plain Python
    assert decision_digests() == plain[1:]
