"""The in-cluster connection: the pod's ServiceAccount token and CA, over HTTPS, against the emulator.

Inside a pod the kubernetes client reads ``KUBERNETES_SERVICE_HOST``/``_PORT`` and the token and CA files
Kubernetes mounts (``KUBE_SERVICE_ACCOUNT_DIR``). Here the emulator serves HTTPS with a certificate from a test CA
(trustme) and the files are written to a temporary directory; everything else is the production path.
"""

from __future__ import annotations

import ssl

import pytest
import trustme

from clusters.backends.k8s.client import KubeClient, forget_client
from clusters.kube_sync.api import NODES, KubeUnavailable
from clusters.kube_sync.sync import ClusterSync
from pools.models import Cluster, Node
from tests.kube.cluster import gpu_node
from tests.kube.emulator import Emulator
from tests.kube.schemas import validate

pytestmark = pytest.mark.django_db
TOKEN = "eyJhbGciOiJSUzI1NiJ9.service-account-token"


def _tls_emulator(ca: trustme.CA) -> Emulator:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    emu = Emulator(validator=validate, bookmark_interval=0.2, ssl_context=context)
    emu.start()
    return emu


@pytest.fixture
def ca():
    return trustme.CA()


@pytest.fixture
def https_emulator(ca, _schemas_loaded):
    """The emulator over HTTPS; like ``emulator``, fails the test if it rejected anything not cleared."""
    emu = _tls_emulator(ca)
    yield emu
    emu.stop()
    if emu.rejected:
        pytest.fail(f"the emulator rejected what the client sent: {emu.rejected}", pytrace=False)


@pytest.fixture
def mounted_service_account(tmp_path, monkeypatch, settings, ca):
    """What Kubernetes gives a pod: the service's address in the environment, a token and the cluster's CA."""
    (tmp_path / "token").write_text(TOKEN)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    settings.KUBE_SERVICE_ACCOUNT_DIR = str(tmp_path)

    def serve_at(emu: Emulator) -> None:
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(emu.port))

    return serve_at


@pytest.fixture
def in_cluster():
    cluster = Cluster.objects.create(name="home", backend=Cluster.Backend.KUBERNETES, in_cluster=True)
    forget_client(cluster)
    yield cluster
    forget_client(cluster)


def test_in_cluster_connection_uses_the_service_account_over_tls(https_emulator, mounted_service_account, in_cluster):
    mounted_service_account(https_emulator)
    https_emulator.put(gpu_node("gpu-a1"))
    report = ClusterSync(in_cluster, KubeClient(in_cluster)).run(watch_seconds=0)
    assert report.unreachable == ""
    assert Node.objects.filter(cluster=in_cluster, name="gpu-a1", gone_at__isnull=True).exists()
    assert https_emulator.requests
    assert {r["authorization"].lower() for r in https_emulator.requests} == {f"bearer {TOKEN}".lower()}
    in_cluster.refresh_from_db()
    assert in_cluster.last_synced_at is not None
    assert in_cluster.last_sync_error == ""


@pytest.mark.usefixtures("_schemas_loaded")
def test_a_server_certificate_from_another_ca_is_refused(mounted_service_account, in_cluster):
    impostor = _tls_emulator(trustme.CA())  # the pod trusts ``ca``, not this one
    try:
        mounted_service_account(impostor)
        impostor.put(gpu_node("gpu-a1"))
        report = ClusterSync(in_cluster, KubeClient(in_cluster)).run(watch_seconds=0)
    finally:
        impostor.stop()
    assert "CERTIFICATE_VERIFY_FAILED" in report.unreachable
    assert not Node.objects.filter(cluster=in_cluster).exists()
    in_cluster.refresh_from_db()
    assert in_cluster.last_sync_error
    assert in_cluster.last_synced_at is None


def test_in_cluster_outside_a_pod_says_why(monkeypatch, settings, tmp_path, in_cluster):
    settings.KUBE_SERVICE_ACCOUNT_DIR = str(tmp_path)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    with pytest.raises(KubeUnavailable, match="cannot load the connection settings of cluster home"):
        KubeClient(in_cluster).list_page(NODES)
