"""Where the testbed's pieces are: its Go module, the built binaries, run directories; the pinned versions."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from testbed.errors import TestbedError

MODULE_DIR = Path(__file__).resolve().parent
REPO_ROOT = MODULE_DIR.parent
#: Ignored by git (``var/``): binaries, the manifests taken from the Kueue module, run directories.
OUT_DIR = Path(os.environ.get("TESTBED_OUT", REPO_ROOT / "var" / "testbed"))
BIN_DIR = OUT_DIR / "bin"
DEFAULT_RUN_DIR = OUT_DIR / "run"
#: Kueue's and JobSet's CRDs and webhook manifests, copied out of their modules at build time (``up`` needs no Go).
KUEUE_MANIFESTS = BIN_DIR / "kueue-manifests"
JOBSET_MANIFESTS = BIN_DIR / "jobset-manifests"
BUILD_INFO = BIN_DIR / "build.json"


@dataclass(frozen=True)
class Component:
    """One binary the testbed builds: its name, Go package and which ``up`` needs it."""

    name: str
    package: str
    with_nodes_only: bool  # only ``up --nodes N`` runs it


COMPONENTS = (
    Component("etcd", "./cmd/etcd", False),
    Component("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver", False),
    Component("kueue", "sigs.k8s.io/kueue/cmd/kueue", False),
    Component("kube-controller-manager", "k8s.io/kubernetes/cmd/kube-controller-manager", True),
    Component("kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler", True),
    Component("kwok", "sigs.k8s.io/kwok/cmd/kwok", True),
    # JobSet's controller: started by ``up --nodes N --framework jobset.x-k8s.io/jobset`` only.
    Component("jobset", "sigs.k8s.io/jobset", True),
)
BY_NAME = {c.name: c for c in COMPONENTS}


def pinned_versions() -> dict[str, str]:
    """The module versions go.mod pins: kubernetes, kueue, kwok, etcd, and the Go version it asks for."""
    text = (MODULE_DIR / "go.mod").read_text()
    wanted = {
        "kubernetes": r"k8s\.io/kubernetes (v\S+)",
        "kueue": r"sigs\.k8s\.io/kueue (v\S+)",
        "kwok": r"sigs\.k8s\.io/kwok (v\S+)",
        "etcd": r"go\.etcd\.io/etcd/server/v3 (v\S+)",
        "jobset": r"sigs\.k8s\.io/jobset (v\S+)",
        "go": r"^go (\S+)",
    }
    found = {}
    for key, pattern in wanted.items():
        match = re.search(pattern, text, re.MULTILINE)
        if not match:
            raise TestbedError(f"testbed/go.mod does not pin {key} ({pattern})")
        found[key] = match.group(1)
    return found


def binary(name: str) -> Path:
    """The built binary of a component."""
    return BIN_DIR / name
