"""Supply chain (issue 33, finding 9): every Python package installed by CI, a developer's bootstrap or the image is
checked against a sha256 in requirements/*.txt (``pip install --require-hashes``), the lock agrees with
pyproject.toml and constraints.txt, and every base and sidecar image is pinned by digest."""

from __future__ import annotations

import re
import tomllib

import pytest

from tests.deploy.helm import PRODUCTION, containers, render
from tests.kube.test_deploy import PORTAL_IMAGE, REPO, render_base

LOCKS = {name: REPO / "requirements" / f"{name}.txt" for name in ("all", "runtime", "build", "pip")}
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)(\s*;[^\\]*)?\s*\\$")


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def _locked(path) -> dict[str, str]:
    """name → version of a hash-pinned requirements file; every requirement must carry at least one hash."""
    lines = path.read_text().splitlines()
    out = {}
    for i, line in enumerate(lines):
        if not line or line.startswith((" ", "#")):
            continue
        match = _PIN.match(line)
        assert match, f"{path.name}: not an exact, hashed pin: {line!r}"
        assert lines[i + 1].strip().startswith("--hash=sha256:"), f"{path.name}: {line!r} has no hash"
        out[_name(match.group(1))] = match.group(2)
    return out


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[_name(name)] = version.strip()
    return pins


def _pyproject() -> dict[str, list[str]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {"runtime": project["dependencies"], **project["optional-dependencies"]}


def _requirement(spec: str) -> tuple[str, str]:
    name, _, version = re.sub(r"\[.*?\]", "", spec).partition("==")
    return _name(name), version


@pytest.mark.parametrize("lock", ["all", "runtime", "build", "pip"])
def test_every_locked_requirement_is_an_exact_version_with_hashes_that_agrees_with_constraints(lock):
    locked = _locked(LOCKS[lock])
    assert locked
    if lock != "pip":
        constraints = _constraints()
        assert {n: v for n, v in locked.items() if constraints.get(n) != v} == {}


def test_the_locks_hold_what_pyproject_asks_at_its_pins():
    groups = _pyproject()
    wanted = {
        "runtime": groups["runtime"],
        "build": groups["runtime"] + groups["native"],
        "all": groups["runtime"] + groups["native"] + groups["dev"],
    }
    for lock, specs in wanted.items():
        locked = _locked(LOCKS[lock])
        for spec in specs:
            name, version = _requirement(spec)
            assert locked.get(name) == version, f"{lock}: {spec} (locked {locked.get(name)})"
    runtime = set(_locked(LOCKS["runtime"]))
    assert (
        not {"pytest", "playwright", "schemathesis", "ruff", "hypothesis", "mypy", "uv"} & runtime
    )  # not in the image


def test_every_install_checks_hashes():
    """The bootstrap (developers, CI) and both stages of the image install with --require-hashes, from the locks."""
    for path in (REPO / "scripts" / "bootstrap", REPO / "deploy" / "Dockerfile"):
        installs = [line for line in path.read_text().splitlines() if "pip install" in line and "#" not in line]
        assert installs, path
        for line in installs:
            assert "--require-hashes -r requirements/" in line, f"{path.name}: {line.strip()}"
            assert "-c constraints.txt" not in line


def test_base_images_are_pinned_by_digest():
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", dockerfile, re.M))
    bases = re.findall(r"^FROM (\S+)", dockerfile, re.M)
    assert bases
    for base in bases:
        image = args.get(base.strip("${}"), base)
        assert DIGEST.search(image), f"FROM {base} ({image}) is not pinned by digest"


@pytest.mark.parametrize("where", ["kustomize", "helm", "helm-production"])
def test_deployed_images_other_than_the_portals_are_pinned_by_digest(chart, where):
    """The nginx sidecar (and any other image that is not the portal's own, which each site builds and may pin with
    kustomize's images.digest or Helm's image.digest) is pulled by digest."""
    docs = {
        "kustomize": render_base,
        "helm": lambda: render(chart),
        "helm-production": lambda: render(chart, PRODUCTION),
    }
    images = {c["image"] for d in docs[where]() if d["kind"] in ("Deployment", "Job") for c in containers(d)}
    others = {i for i in images if not i.startswith(PORTAL_IMAGE)}
    assert others
    assert {i for i in others if not DIGEST.search(i)} == set()
    digested = render(chart, {"image": {"digest": "sha256:" + "ab" * 32}})
    pods = [d for d in digested if d["kind"] in ("Deployment", "Job")]
    portal = {c["image"] for d in pods for c in containers(d) if c["image"].startswith(PORTAL_IMAGE)}
    assert portal == {f"{PORTAL_IMAGE}:0.1.0@sha256:{'ab' * 32}"}
