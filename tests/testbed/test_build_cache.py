"""``scripts/testbed build`` twice: the second does nothing for what is up to date, and rebuilds what go.mod, go.sum,
the wrapper's sources, the Go toolchain or a missing binary make stale. ``go`` here is a stand-in executable (named
with ``$GO``, as a developer would name another toolchain) that logs each build and writes its ``-o`` file: what is
tested is the bookkeeping around Go, not Go."""

from __future__ import annotations

import json
import shutil
import stat

import pytest

from testbed import build, layout

FAKE_GO = """#!/bin/sh
# A stand-in for go: env, list -m -f {{.Dir}} MODULE, build ... -o OUT PACKAGE
case "$1" in
env) shift; for key in "$@"; do
       case $key in GOVERSION) echo "${FAKE_GOVERSION:-go1.26.8}";; GOOS) echo linux;; GOARCH) echo amd64;;
                    CGO_ENABLED) echo 1;; esac
     done;;
list) echo "$FAKE_MODULES/$5";;
build) out=; for arg in "$@"; do [ "$previous" = -o ] && out=$arg; previous=$arg; done
       package=$arg
       echo "$package" >>"$FAKE_LOG"
       [ "$package" = "$FAKE_FAIL" ] && { echo "compile error in $package" >&2; exit 1; }
       printf 'binary of %s\\n' "$package" >"$out";;
esac
"""


@pytest.fixture
def fake_go(tmp_path, monkeypatch):
    """A stand-in ``go``, a copy of the wrapper module, an empty output folder; returns the build log reader."""
    go = tmp_path / "go"
    go.write_text(FAKE_GO)
    go.chmod(go.stat().st_mode | stat.S_IEXEC)
    module = tmp_path / "module"
    module.mkdir()
    for name in ("go.mod", "go.sum"):
        shutil.copyfile(layout.MODULE_DIR / name, module / name)
    shutil.copytree(layout.MODULE_DIR / "cmd", module / "cmd")
    modules = tmp_path / "modules"
    for path in ("sigs.k8s.io/kueue", "sigs.k8s.io/jobset"):
        (modules / path / "config/components/crd/bases").mkdir(parents=True)
        (modules / path / "config/components/crd/bases/crd.yaml").write_text("kind: CustomResourceDefinition\n")
        (modules / path / "config/components/webhook").mkdir(parents=True)
        (modules / path / "config/components/webhook/manifests.yaml").write_text("kind: List\n")
    out = tmp_path / "bin"
    monkeypatch.setattr(layout, "MODULE_DIR", module)
    monkeypatch.setattr(layout, "BIN_DIR", out)
    monkeypatch.setattr(layout, "KUEUE_MANIFESTS", out / "kueue-manifests")
    monkeypatch.setattr(layout, "JOBSET_MANIFESTS", out / "jobset-manifests")
    monkeypatch.setattr(layout, "BUILD_INFO", out / "build.json")
    log = tmp_path / "builds.log"
    monkeypatch.setenv("GO", str(go))
    monkeypatch.setenv("FAKE_MODULES", str(modules))
    monkeypatch.setenv("FAKE_LOG", str(log))

    def built() -> list[str]:
        packages = log.read_text().split() if log.exists() else []
        log.unlink(missing_ok=True)
        return packages

    built.module = module
    return built


def _build(**kwargs) -> list[str]:
    lines: list[str] = []
    build.build(echo=lines.append, **kwargs)
    return lines


def test_a_second_build_builds_nothing(fake_go):
    _build()
    assert fake_go() == [c.package for c in layout.COMPONENTS]
    assert not build.missing(layout.BY_NAME)
    lines = _build()
    assert fake_go() == []
    assert lines[-1].endswith(": nothing to build; 7 up to date")
    assert all("up to date" in line for line in lines[1:-1])


def test_go_sum_or_the_wrappers_sources_make_every_binary_stale(fake_go):
    _build()
    fake_go()
    go_sum = fake_go.module / "go.sum"
    go_sum.write_text(go_sum.read_text() + "example.com/m v1.0.0 h1:x=\n")
    _build()
    assert len(fake_go()) == len(layout.COMPONENTS)
    main = fake_go.module / "cmd" / "etcd" / "main.go"
    main.write_text(main.read_text() + "\n// changed\n")
    _build(names=["etcd", "kueue"])
    assert fake_go() == ["./cmd/etcd", "sigs.k8s.io/kueue/cmd/kueue"]


def test_another_go_version_rebuilds(fake_go, monkeypatch):
    _build(names=["etcd"])
    fake_go()
    monkeypatch.setenv("FAKE_GOVERSION", "go1.26.9")
    _build(names=["etcd"])
    assert fake_go() == ["./cmd/etcd"]


def test_a_missing_or_replaced_binary_is_built_again_and_force_rebuilds_all(fake_go):
    _build()
    fake_go()
    layout.binary("kwok").unlink()
    layout.binary("etcd").write_text("something else entirely\n")
    lines = _build()
    assert sorted(fake_go()) == ["./cmd/etcd", "sigs.k8s.io/kwok/cmd/kwok"]
    assert "built etcd, kwok; 5 up to date" in lines[-1]
    _build(force=True)
    assert len(fake_go()) == len(layout.COMPONENTS)


def test_a_failed_build_keeps_the_previous_binary_and_its_stamp(fake_go, monkeypatch):
    _build(names=["kueue"])
    fake_go()
    before = layout.binary("kueue").read_text()
    monkeypatch.setenv("FAKE_FAIL", "sigs.k8s.io/kueue/cmd/kueue")
    with pytest.raises(build.TestbedError, match=r"go build sigs\.k8s\.io/kueue/cmd/kueue failed"):
        _build(names=["kueue"], force=True)
    assert layout.binary("kueue").read_text() == before
    assert not list(layout.BIN_DIR.glob(".*.partial"))
    monkeypatch.delenv("FAKE_FAIL")
    fake_go()
    _build(names=["kueue"])
    assert fake_go() == []  # the stamp of the good binary still holds


def test_manifests_are_copied_again_when_missing(fake_go):
    _build(names=["etcd"])
    shutil.rmtree(layout.JOBSET_MANIFESTS)
    _build(names=["etcd"])
    assert (layout.JOBSET_MANIFESTS / "config/components/webhook/manifests.yaml").exists()
    info = json.loads(layout.BUILD_INFO.read_text())
    assert info["manifests"] == build.module_fingerprint()
    assert info["components"]["etcd"]["size"] == layout.binary("etcd").stat().st_size
