"""``scripts/testbed build``: the components built from their Go modules into ``var/testbed/bin``.

Each binary is one ``go build`` of the wrapper module (``testbed/go.mod``), so Go's build cache is shared between
them and between runs. A second ``build`` does nothing for a binary that is up to date: ``build.json`` keeps each
binary's stamp (the Go version and platform, go.mod, go.sum, the wrapper's own Go sources, the link flags, the
package) and size, and a binary whose stamp and size still match is not built again (``--force`` rebuilds).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable

from testbed import layout
from testbed.errors import TestbedError

#: The files ``up`` installs from Kueue's and JobSet's modules (read from there, never committed).
MANIFESTS = {
    "sigs.k8s.io/kueue": (
        "KUEUE_MANIFESTS",
        ("config/components/crd/bases", "config/components/webhook/manifests.yaml"),
    ),
    "sigs.k8s.io/jobset": (
        "JOBSET_MANIFESTS",
        ("config/components/crd/bases", "config/components/webhook/manifests.yaml"),
    ),
}


def go_binary() -> str:
    """The ``go`` command to use ($GO or the one on PATH), or a TestbedError saying how to get it."""
    name = os.environ.get("GO", "go")
    found = shutil.which(name)
    if not found:
        wanted = layout.pinned_versions()["go"]
        raise TestbedError(
            f"Go is missing: {name!r} is not on PATH. The testbed builds etcd, kube-apiserver, Kueue and KWOK from "
            f"their Go modules and needs Go >= {wanted} (testbed/go.mod); install it (https://go.dev/dl/) or set "
            "GO=/path/to/go."
        )
    return found


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def check_go(go: str) -> str:
    """The Go version (``go1.26.8``), or an error when it is older than go.mod asks."""
    try:
        version = subprocess.run(
            [go, "env", "GOVERSION"], capture_output=True, text=True, check=True, timeout=60
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        raise TestbedError(f"Go is not usable ({go} env GOVERSION failed: {exc})") from exc
    wanted = layout.pinned_versions()["go"]
    if _version_tuple(version) < _version_tuple(wanted):
        raise TestbedError(f"Go {version} is too old: testbed/go.mod needs go >= {wanted}")
    return version


def ldflags(versions: dict[str, str]) -> str:
    """Stripped binaries that report the pinned versions (Kubernetes' component-base, Kueue's, KWOK's)."""
    kube = versions["kubernetes"]
    major, minor = kube.lstrip("v").split(".")[:2]
    base = "k8s.io/component-base/version"
    return " ".join(
        [
            "-s -w",
            f"-X {base}.gitVersion={kube}",
            f"-X {base}.gitMajor={major}",
            f"-X {base}.gitMinor={minor}",
            f"-X {base}.gitTreeState=clean",
            f"-X {base}.gitCommit=unknown",
            f"-X {base}.buildDate=1970-01-01T00:00:00Z",
            f"-X sigs.k8s.io/kueue/pkg/version.GitVersion={versions['kueue']}",
            f"-X sigs.k8s.io/kwok/pkg/consts.Version={versions['kwok'].lstrip('v')}",
            f"-X sigs.k8s.io/jobset/pkg/version.GitVersion={versions['jobset']}",
        ]
    )


def _module_dir(go: str, module: str) -> str:
    result = subprocess.run(
        [go, "list", "-m", "-f", "{{.Dir}}", module],
        cwd=layout.MODULE_DIR,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if result.returncode != 0 or not result.stdout.strip():
        raise TestbedError(f"go list -m {module} failed: {result.stderr.strip()}")
    return result.stdout.strip()


def copy_manifests(go: str) -> None:
    """Kueue's and JobSet's CRDs and webhook configurations, from the modules go.mod pins, into the ignored output."""
    for module, (attribute, files) in MANIFESTS.items():
        source = _module_dir(go, module)
        target = getattr(layout, attribute)
        if target.exists():
            shutil.rmtree(target)
        for relative in files:
            src = os.path.join(source, relative)
            dst = target / relative
            dst.parent.mkdir(parents=True, exist_ok=True)
            if os.path.isdir(src):
                shutil.copytree(src, dst)
            else:
                shutil.copyfile(src, dst)
        for path in target.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)  # the module cache is read-only


def _go_env(go: str) -> dict[str, str]:
    """The Go settings that change what a build produces: version, platform, cgo."""
    keys = ("GOVERSION", "GOOS", "GOARCH", "CGO_ENABLED")
    try:
        values = subprocess.run(
            [go, "env", *keys], capture_output=True, text=True, check=True, timeout=60
        ).stdout.splitlines()
    except (OSError, subprocess.SubprocessError) as exc:
        raise TestbedError(f"Go is not usable ({go} env failed: {exc})") from exc
    return dict(zip(keys, values, strict=False))


def module_fingerprint() -> str:
    """What every binary depends on in this checkout: go.mod, go.sum and the wrapper's own Go sources."""
    digest = hashlib.sha256()
    paths = [layout.MODULE_DIR / "go.mod", layout.MODULE_DIR / "go.sum"]
    paths += sorted((layout.MODULE_DIR / "cmd").rglob("*.go"))
    for path in paths:
        digest.update(str(path.relative_to(layout.MODULE_DIR)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def stamp(component: layout.Component, *, go_env: dict[str, str], module: str, flags: str) -> str:
    """The stamp of one binary: the same stamp builds the same binary."""
    text = json.dumps([component.package, go_env, module, flags], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _read_info() -> dict:
    try:
        return json.loads(layout.BUILD_INFO.read_text())
    except (OSError, ValueError):
        return {}


def up_to_date(name: str, wanted: str, info: dict) -> bool:
    """Whether the binary ``name`` exists and was built with the stamp ``wanted`` (and is still that file)."""
    record = (info.get("components") or {}).get(name) or {}
    path = layout.binary(name)
    return record.get("stamp") == wanted and path.is_file() and path.stat().st_size == record.get("size")


def build(
    names: Iterable[str] | None = None, *, force: bool = False, echo: Callable[[str], None] = print
) -> dict[str, float]:
    """Build the named components (all by default) that are not up to date; return the seconds each took
    (0 for one that was up to date)."""
    begun = time.monotonic()
    go = go_binary()
    go_version = check_go(go)
    go_env = _go_env(go)
    versions = layout.pinned_versions()
    selected = [layout.BY_NAME[n] for n in names] if names else list(layout.COMPONENTS)
    layout.BIN_DIR.mkdir(parents=True, exist_ok=True)
    flags = ldflags(versions)
    module = module_fingerprint()
    info = _read_info()
    records = info.setdefault("components", {})
    echo(
        f"building {', '.join(c.name for c in selected)} with {go_version} (Kubernetes {versions['kubernetes']}, "
        f"Kueue {versions['kueue']}, etcd {versions['etcd']}, KWOK {versions['kwok']}) into {layout.BIN_DIR}"
    )
    timings: dict[str, float] = {}
    built: list[str] = []
    for component in selected:
        wanted = stamp(component, go_env=go_env, module=module, flags=flags)
        if not force and up_to_date(component.name, wanted, info):
            timings[component.name] = 0.0
            echo(f"  {component.name:<24} up to date")
            continue
        started = time.monotonic()
        target = layout.binary(component.name)
        partial = target.with_name(f".{component.name}.partial")
        result = subprocess.run(
            [go, "build", "-trimpath", "-ldflags", flags, "-o", str(partial), component.package],
            cwd=layout.MODULE_DIR,
            check=False,
        )
        if result.returncode != 0:
            partial.unlink(missing_ok=True)
            raise TestbedError(f"go build {component.package} failed (exit {result.returncode}); its output is above")
        partial.replace(target)  # a binary is either the old one or the whole new one, never half-written
        timings[component.name] = round(time.monotonic() - started, 1)
        built.append(component.name)
        records[component.name] = {"stamp": wanted, "size": target.stat().st_size, "seconds": timings[component.name]}
        layout.BUILD_INFO.write_text(json.dumps(info, indent=2))  # each binary's stamp as soon as it is built
        echo(f"  {component.name:<24} {timings[component.name]:7.1f} s   load {_load()}")
    if force or info.get("manifests") != module or missing_manifests():
        copy_manifests(go)
        info["manifests"] = module
    info.update({"go": go_version, "versions": versions, "built_at": time.time()})
    layout.BUILD_INFO.write_text(json.dumps(info, indent=2))
    echo(
        f"done in {time.monotonic() - begun:.1f} s: "
        + (f"built {', '.join(built)}" if built else "nothing to build")
        + (f"; {len(timings) - len(built)} up to date" if len(built) < len(timings) else "")
    )
    return timings


def _load() -> str:
    try:
        with open("/proc/loadavg") as handle:
            return " ".join(handle.read().split()[:3])
    except OSError:
        return "?"


def missing_manifests() -> list[str]:
    """The manifest folders ``build`` copies that are not there."""
    return [p.name for p in (layout.KUEUE_MANIFESTS, layout.JOBSET_MANIFESTS) if not p.exists()]


def missing(names: Iterable[str]) -> list[str]:
    """The components among ``names`` that are not built yet."""
    names = list(names)
    absent = [n for n in names if not layout.binary(n).exists()]
    if not layout.KUEUE_MANIFESTS.exists():
        absent.append("kueue-manifests")
    if "jobset" in names and not layout.JOBSET_MANIFESTS.exists():
        absent.append("jobset-manifests")
    return absent
