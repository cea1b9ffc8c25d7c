"""``scripts/testbed`` without the Go components: its clear errors (Go missing, not built, a port taken, a component
that exits), its port blocks, and the objects it writes (Kueue's webhooks on loopback, KWOK's nodes and stages)."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed import build, kueue, kwok, layout, ports
from testbed.cluster import ComponentFailed, Testbed
from testbed.errors import TestbedError

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(ROOT / "scripts" / "testbed"), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
        check=False,
    )


@pytest.fixture
def bin_dir(tmp_path, monkeypatch):
    """An empty output folder standing for var/testbed/bin."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setattr(layout, "BIN_DIR", folder)
    monkeypatch.setattr(layout, "KUEUE_MANIFESTS", folder / "kueue-manifests")
    return folder


def test_go_missing_is_said_plainly():
    result = _cli("build", env={"GO": "go-not-installed"})
    assert result.returncode == 2
    assert "Go is missing: 'go-not-installed' is not on PATH" in result.stderr
    assert "Go >= 1.26" in result.stderr


def test_an_unknown_component_is_refused():
    result = _cli("build", "kubelet")
    assert result.returncode == 2
    assert "unknown component kubelet" in result.stderr


def test_up_before_build_names_what_is_missing(tmp_path):
    result = _cli("up", "--run-dir", str(tmp_path / "run"), env={"TESTBED_OUT": str(tmp_path / "out")})
    assert result.returncode == 2
    assert "not built: etcd, kube-apiserver, kueue" in result.stderr
    assert "scripts/testbed build" in result.stderr


def test_integrations_that_need_another_are_refused(tmp_path):
    result = _cli("up", "--nodes", "1", "--framework", "deployment", "--run-dir", str(tmp_path))
    assert result.returncode == 2
    assert "deployment needs pod" in result.stderr
    result = _cli("up", "--framework", "jobset.x-k8s.io/jobset", "--run-dir", str(tmp_path))
    assert result.returncode == 2
    assert "needs --nodes" in result.stderr


def test_status_of_a_folder_without_a_testbed(tmp_path):
    result = _cli("status", "--run-dir", str(tmp_path))
    assert result.returncode == 1
    assert "no testbed was started" in result.stdout


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("18400", "expected FIRST-LAST"),
        ("80-90", "must lie within 1024-65535"),
        ("18400-18402", "a testbed needs 12"),
    ],
)
def test_port_ranges_are_checked(text, message):
    with pytest.raises(TestbedError, match=message):
        ports.parse_range(text)


def _listen() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_a_block_with_a_taken_port_is_skipped():
    with _listen() as sock:
        taken = sock.getsockname()[1]
        low = taken - 3
        with ports.allocate(f"{low}-{low + 10 * ports.BLOCK}") as chosen:
            assert taken not in chosen.values()
            assert min(chosen.values()) >= low + ports.BLOCK  # the first block holds the taken port
            assert len(set(chosen.values())) == ports.BLOCK


def test_a_taken_port_of_an_exact_block_names_its_holder():
    with _listen() as sock:
        taken = sock.getsockname()[1]
        with pytest.raises(TestbedError) as info, ports.allocate("1024-65535", base=taken - 2):
            pass
    assert f"port {taken} (kube-apiserver) is taken by pid {os.getpid()}" in str(info.value)


def test_parallel_testbeds_take_different_blocks():
    with ports.allocate("18400-18499") as first, ports.allocate("18400-18499") as second:
        assert not set(first.values()) & set(second.values())


def test_a_component_that_exits_is_reported_with_its_log_tail(bin_dir, tmp_path):
    """A fake etcd that fails as a real one does when its data folder is unusable."""
    fake = bin_dir / "etcd"
    fake.write_text("#!/bin/sh\necho 'member testbed: cannot access data directory: permission denied' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    for name in ("kube-apiserver", "kueue"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "kueue-manifests").mkdir()
    bed = Testbed(run_dir=tmp_path / "run", attached=True, echo=lambda line: None)
    with pytest.raises(ComponentFailed) as info:
        bed.up()
    assert info.value.component == "etcd"
    assert "etcd exited with status 1 while starting" in str(info.value)
    assert "cannot access data directory" in str(info.value)
    assert bed.running() == {}


def test_ldflags_carry_the_pinned_versions():
    flags = build.ldflags(layout.pinned_versions())
    assert "-X k8s.io/component-base/version.gitVersion=v1.36.3" in flags
    assert "-X k8s.io/component-base/version.gitMinor=36" in flags
    assert "-X sigs.k8s.io/kueue/pkg/version.GitVersion=v0.19.2" in flags
    assert "-X sigs.k8s.io/jobset/pkg/version.GitVersion=v0.12.0" in flags
    assert "-s -w" in flags


@pytest.mark.skipif(not layout.KUEUE_MANIFESTS.exists(), reason="Kueue's manifests are copied by scripts/testbed build")
def test_kueue_webhooks_point_at_loopback_for_enabled_integrations_only():
    hooks = kueue.webhook_configurations(webhook_url="https://127.0.0.1:18403", ca_pem=b"CA", frameworks=("batch/job",))
    names = {doc["metadata"]["name"]: [h["name"] for h in doc["webhooks"]] for doc in hooks}
    assert set(names) == {"kueue-mutating-webhook-configuration", "kueue-validating-webhook-configuration"}
    mutating = names["kueue-mutating-webhook-configuration"]
    assert "mjob.kb.io" in mutating
    assert "mclusterqueue.kb.io" in mutating
    assert "mpod.kb.io" not in mutating  # the pod integration is not enabled
    for doc in hooks:
        for hook in doc["webhooks"]:
            assert hook["clientConfig"]["url"].startswith("https://127.0.0.1:18403/")
    job = next(h for doc in hooks for h in doc["webhooks"] if h["name"] == "vjob.kb.io")
    assert job["namespaceSelector"] == kueue.SYSTEM_NAMESPACES_EXCLUDED
    crds = {c["spec"]["names"]["plural"]: c for c in kueue.crds(webhook_url="https://127.0.0.1:18403", ca_pem=b"CA")}
    assert (
        crds["workloads"]["spec"]["conversion"]["webhook"]["clientConfig"]["url"] == "https://127.0.0.1:18403/convert"
    )
    assert "conversion" not in crds["resourceflavors"]["spec"]


def test_kueue_configuration_matches_what_the_portal_parses():
    config = kueue.configuration(
        ports=dict.fromkeys(ports.COMPONENT_PORTS, 1), webhook_cert_dir=Path("/x"), frameworks=("batch/job",)
    )
    text = kueue.config_map(config)["data"][kueue.CONFIG_KEY]
    parsed = yaml.safe_load(text)
    assert parsed["integrations"]["frameworks"] == ["batch/job"]
    assert parsed["internalCertManagement"] == {"enable": False}
    assert "fairSharing" not in parsed


def test_kwok_gpu_nodes_are_what_the_device_plugin_and_gfd_publish():
    (node,) = kwok.gpu_nodes(1)
    labels = node["metadata"]["labels"]
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/cuda.driver-version.major"] == "550"
    assert {kwok.BLOCK_LABEL, kwok.RACK_LABEL, kwok.HOSTNAME_LABEL} <= labels.keys()
    assert node["metadata"]["annotations"][kwok.NODE_ANNOTATION] == "fake"
    stages = {s["metadata"]["name"] for s in yaml.safe_load_all(kwok.config_yaml())}
    assert stages == {
        "node-initialize",
        "node-heartbeat",
        "pod-running",
        "pod-fail",
        "pod-complete",
        "pod-terminate",
        "pod-delete",
    }


def test_the_cli_module_runs_with_the_project_python():
    result = subprocess.run(
        [sys.executable, "-m", "testbed", "--help"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    )
    assert "build,up,down,status" in result.stdout
