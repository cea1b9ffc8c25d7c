"""Start, check and stop a testbed: etcd, kube-apiserver and Kueue (webhooks on), and with nodes
kube-controller-manager, kube-scheduler and KWOK with fake GPU nodes. All on 127.0.0.1, in one run directory.

The run directory holds everything of one testbed: ``state.json`` (ports, process ids), ``kubeconfig`` (the admin,
``system:masters``), ``pki/``, each component's ``*.log`` and etcd's data. ``up`` refuses a directory whose
testbed still runs; ``down`` stops exactly the processes ``state.json`` names (after checking each is still the
binary it started).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import requests
import yaml

from testbed import build, jobset, kueue, kwok, layout, pki, ports
from testbed.errors import ApiError, TestbedError
from testbed.kubeapi import KubeApi, wait_for

STATE = "state.json"
ORDER = ("etcd", "kube-apiserver", "kueue", "kube-controller-manager", "kube-scheduler", "kwok", "jobset")
LOG_TAIL = 40
SERVICE_CIDR = "10.96.0.0/16"

_PROBE = requests.Session()
_PROBE.trust_env = False  # no proxy from the environment between us and 127.0.0.1


def log_tail(path: Path, lines: int = LOG_TAIL) -> str:
    """The last ``lines`` lines of a log file (or a note that it is empty)."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text[-lines:]) if text else f"({path} is empty)"


class ComponentFailed(TestbedError):
    """A component exited or did not become ready; the message carries its log tail."""

    def __init__(self, name: str, why: str, log: Path) -> None:
        super().__init__(f"{name} {why}. Last lines of {log}:\n{log_tail(log)}")
        self.component = name


def _die_with_parent() -> None:
    """Child side of an attached start: killed when the starting process dies (Linux prctl PR_SET_PDEATHSIG).

    SIGKILL, not SIGTERM: kube-apiserver's graceful termination waits minutes for an etcd that is gone too.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


@dataclass
class Testbed:
    """One testbed in ``run_dir``; ``attached`` ties the processes' lives to this Python process (tests)."""

    __test__ = False  # not a pytest test class despite its name

    run_dir: Path = layout.DEFAULT_RUN_DIR
    port_range: str = ports.DEFAULT_RANGE
    port_base: int | None = None
    nodes: int = 0
    frameworks: tuple[str, ...] = kueue.DEFAULT_FRAMEWORKS
    fair_sharing: bool = False
    attached: bool = False
    echo: Callable[[str], None] = print
    state: dict = field(default_factory=dict)
    _processes: dict[str, subprocess.Popen] = field(default_factory=dict, init=False, repr=False)
    _ca: pki.Authority | None = field(default=None, init=False, repr=False)

    # --- paths ---------------------------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig of this testbed."""
        return self.run_dir / "kubeconfig"

    @property
    def pki_dir(self) -> Path:
        return self.run_dir / "pki"

    def log(self, name: str) -> Path:
        """A component's log file."""
        return self.run_dir / f"{name}.log"

    def api(self) -> KubeApi:
        """A client of this testbed's API server, as its admin."""
        return KubeApi.from_kubeconfig(self.kubeconfig)

    @property
    def server(self) -> str:
        """The API server's URL."""
        return f"https://127.0.0.1:{self.state['ports']['kube-apiserver']}"

    # --- state ---------------------------------------------------------------------------------------------

    def load(self) -> dict:
        """The state of the testbed last started in ``run_dir`` ({} when none)."""
        path = self.run_dir / STATE
        self.state = json.loads(path.read_text()) if path.exists() else {}
        return self.state

    def _save(self) -> None:
        (self.run_dir / STATE).write_text(json.dumps(self.state, indent=2))

    def running(self) -> dict[str, int]:
        """The components of the recorded state whose process still runs: {name: pid}."""
        alive = {}
        for name, pid in (self.state.get("pids") or {}).items():
            if _is_ours(pid, name):
                alive[name] = pid
        return alive

    # --- up ------------------------------------------------------------------------------------------------

    def up(self) -> dict:
        """Start the testbed; return its state. On any failure everything started is stopped again."""
        wanted = [n for n in ORDER if self.nodes or not layout.BY_NAME[n].with_nodes_only]
        if jobset.FRAMEWORK in self.frameworks and not self.nodes:
            raise TestbedError(f"--framework {jobset.FRAMEWORK} needs --nodes: JobSets run as Jobs, with their pods")
        if jobset.FRAMEWORK not in self.frameworks and "jobset" in wanted:
            wanted.remove("jobset")
        needs = [
            f"{f} needs {n}" for f, n in kueue.REQUIRES.items() if f in self.frameworks and n not in self.frameworks
        ]
        if needs:
            raise TestbedError(f"--framework: {'; '.join(needs)} (add --framework for it)")
        absent = build.missing(wanted)
        if absent:
            raise TestbedError(
                f"not built: {', '.join(absent)} (in {layout.BIN_DIR}). Run scripts/testbed build first."
            )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.load() and self.running():
            raise TestbedError(
                f"a testbed already runs in {self.run_dir} ({', '.join(self.running())}): scripts/testbed down first"
            )
        for stale in ("etcd-data", "kueue", "kube-controller-manager", "kube-scheduler"):
            shutil.rmtree(self.run_dir / stale, ignore_errors=True)
        started = time.monotonic()
        with ports.allocate(self.port_range, base=self.port_base) as chosen:
            self.state = {
                "run_dir": str(self.run_dir),
                "ports": chosen,
                "pids": {},
                "nodes": self.nodes,
                "frameworks": list(self.frameworks),
                "fair_sharing": self.fair_sharing,
                "versions": layout.pinned_versions(),
                "kubeconfig": str(self.kubeconfig),
                "started_at": time.time(),
                "seconds": {},
            }
            self._save()
            try:
                self._certificates()
                for name in wanted:
                    step = time.monotonic()
                    getattr(self, f"_start_{name.replace('-', '_')}")()
                    self.state["seconds"][name] = round(time.monotonic() - step, 1)
                    self._save()
                    self.echo(f"  {name:<24} ready in {self.state['seconds'][name]:5.1f} s")
                if self.nodes:
                    step = time.monotonic()
                    self._add_nodes()
                    self.state["seconds"]["nodes"] = round(time.monotonic() - step, 1)
                    self.echo(f"  {self.nodes} KWOK GPU nodes{'':<8} ready in {self.state['seconds']['nodes']:5.1f} s")
            except BaseException:
                self.down(quiet=True)
                raise
        self.state["seconds"]["total"] = round(time.monotonic() - started, 1)
        self._save()
        return self.state

    def _certificates(self) -> None:
        ca = pki.Authority(self.pki_dir)
        self._ca = ca
        ca.issue(
            "apiserver",
            common_name="kube-apiserver",
            hosts=("127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "10.96.0.1"),
        )
        ca.issue("admin", common_name="testbed-admin", organization="system:masters", client=True)
        for component in ("kube-controller-manager", "kube-scheduler"):
            ca.issue(component, common_name=component, hosts=("127.0.0.1", "localhost"))
        ca.issue(
            "kueue-webhook",
            common_name="kueue-webhook",
            hosts=("127.0.0.1", "localhost"),
            directory=self.run_dir / "kueue" / "webhook-certs",
            names=("tls.crt", "tls.key"),
        )
        ca.issue(
            "jobset-webhook",
            common_name="jobset-webhook",
            hosts=("127.0.0.1", "localhost"),
            directory=self.run_dir / "jobset" / "webhook-certs",
            names=("tls.crt", "tls.key"),
        )
        pki.service_account_keys(self.pki_dir)
        self._metrics_certificate(ca)
        server = f"https://127.0.0.1:{self.state['ports']['kube-apiserver']}"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "testbed", "cluster": {"server": server, "certificate-authority": str(ca.cert_path)}}
            ],
            "users": [
                {
                    "name": "testbed-admin",
                    "user": {
                        "client-certificate": str(self.pki_dir / "admin.crt"),
                        "client-key": str(self.pki_dir / "admin.key"),
                    },
                }
            ],
            "contexts": [{"name": "testbed", "context": {"cluster": "testbed", "user": "testbed-admin"}}],
            "current-context": "testbed",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))

    def _metrics_certificate(self, ca: pki.Authority) -> None:
        """Kueue reads its metrics certificate from a fixed path; shared by every testbed on the machine."""
        target = kueue.METRICS_CERT_DIR
        if all((target / name).exists() for name in ("tls.crt", "tls.key", "ca.crt")):
            return
        try:
            target.mkdir(parents=True, exist_ok=True)
            (target / "ca.crt").write_bytes(ca.pem)
            ca.issue(
                "metrics",
                common_name="kueue-metrics",
                hosts=("127.0.0.1", "localhost"),
                directory=target,
                names=("tls.crt", "tls.key"),
            )
        except OSError as exc:
            raise TestbedError(
                f"Kueue {self.state['versions']['kueue']} reads its metrics certificate from {target} (fixed in "
                f"cmd/kueue when internal certificate management is off) and it cannot be written here ({exc}). "
                f"Create it once as root: sudo mkdir -p {target} && sudo chown $USER {target}"
            ) from exc

    def _spawn(self, name: str, args: list[str], *, cwd: Path | None = None, env: dict | None = None) -> None:
        log = self.log(name).open("ab")
        log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(args)}\n".encode())
        log.flush()
        process = subprocess.Popen(
            [str(layout.binary(name)), *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd or self.run_dir,
            env={**os.environ, **(env or {})},
            start_new_session=True,
            preexec_fn=_die_with_parent if self.attached else None,
        )
        log.close()
        self._processes[name] = process
        self.state["pids"][name] = process.pid
        self._save()

    def _await(self, name: str, check: Callable[[], bool], timeout: float) -> None:
        """Wait until ``check`` passes; ComponentFailed (with the log tail) if the process exits or time runs out."""
        process = self._processes[name]
        deadline = time.monotonic() + timeout
        while True:
            code = process.poll()
            if code is not None:
                raise ComponentFailed(name, f"exited with status {code} while starting", self.log(name))
            try:
                if check():
                    return
            except (requests.RequestException, TestbedError):
                pass
            if time.monotonic() > deadline:
                raise ComponentFailed(name, f"did not become ready within {timeout:.0f} s", self.log(name))
            time.sleep(0.2)

    def _secure_healthz(self, port: int) -> bool:
        """kube-controller-manager's or kube-scheduler's /healthz (their serving certificates are the testbed CA's)."""
        return self._http_ok(f"https://127.0.0.1:{port}/healthz", verify=str(self.pki_dir / "ca.crt"))

    def _port(self, name: str) -> int:
        return self.state["ports"][name]

    @staticmethod
    def _http_ok(url: str, **kwargs) -> bool:
        return _PROBE.get(url, timeout=2, **kwargs).status_code == 200

    def _start_etcd(self) -> None:
        client = f"http://127.0.0.1:{self._port('etcd')}"
        peer = f"http://127.0.0.1:{self._port('etcd-peer')}"
        self._spawn(
            "etcd",
            [
                "--name=testbed",
                f"--data-dir={self.run_dir / 'etcd-data'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=testbed={peer}",
                "--unsafe-no-fsync",  # a throw-away store: no durability wanted, speed is
                "--quota-backend-bytes=4294967296",
                "--log-level=warn",
            ],
        )
        self._await("etcd", lambda: self._http_ok(f"{client}/health"), 60)

    def _start_kube_apiserver(self) -> None:
        pki_dir = self.pki_dir
        self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{self._port('etcd')}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self._port('kube-apiserver')}",
                f"--tls-cert-file={pki_dir / 'apiserver.crt'}",
                f"--tls-private-key-file={pki_dir / 'apiserver.key'}",
                f"--client-ca-file={pki_dir / 'ca.crt'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={pki_dir / 'sa.pub'}",
                f"--service-account-signing-key-file={pki_dir / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=RBAC",
                "--endpoint-reconciler-type=none",  # 127.0.0.1 is not a valid Endpoints address
                "--allow-privileged=true",
                "--profiling=false",
                f"--cert-dir={self.run_dir / 'apiserver-certs'}",
                "--v=1",
            ],
        )
        api = self.api()
        self._await("kube-apiserver", api.healthy, 120)

    def _start_kueue(self) -> None:
        api = self.api()
        url = f"https://127.0.0.1:{self._port('kueue-webhook')}"
        config = kueue.configuration(
            ports=self.state["ports"],
            webhook_cert_dir=self.run_dir / "kueue" / "webhook-certs",
            frameworks=self.frameworks,
            fair_sharing=self.fair_sharing,
        )
        api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": kueue.NAMESPACE}})
        api.apply(kueue.config_map(config))
        # served before Kueue starts, so it sets its JobSet integration up at once
        extra = jobset.crds() if jobset.FRAMEWORK in self.frameworks else []
        for crd in [*kueue.crds(webhook_url=url, ca_pem=self._ca.pem), *extra]:
            api.apply(crd)
        for crd in [*kueue.crds(webhook_url=url, ca_pem=self._ca.pem), *extra]:
            name = crd["metadata"]["name"]
            wait_for(f"CRD {name} established", lambda n=name: _established(api, n), timeout=60)
        for hooks in kueue.webhook_configurations(webhook_url=url, ca_pem=self._ca.pem, frameworks=self.frameworks):
            api.apply(hooks)
        config_path = self.run_dir / "kueue" / "config.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self._spawn(
            "kueue",
            [f"--config={config_path}", "--zap-log-level=2"],
            cwd=self.run_dir / "kueue",
            env={"KUBECONFIG": str(self.kubeconfig)},
        )
        health = f"http://127.0.0.1:{self._port('kueue-health')}/readyz"
        self._await("kueue", lambda: self._http_ok(health), 120)
        # Ready means the webhook server listens; prove the API server reaches it (admission and conversion).
        probe = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "testbed-webhook-probe"},
        }
        self._await("kueue", lambda: bool(api.create(probe, dry_run=True)), 60)
        self._metrics_reader(api)

    def _metrics_reader(self, api: KubeApi) -> None:
        """A ServiceAccount allowed to read Kueue's /metrics (its filter asks the API server about bearer tokens
        only) and a token for it in ``metrics-token``."""
        name, namespace = "testbed-metrics-reader", kueue.NAMESPACE
        api.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}})
        rbac = "rbac.authorization.k8s.io/v1"
        api.apply(
            {
                "apiVersion": rbac,
                "kind": "ClusterRole",
                "metadata": {"name": name},
                "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
            }
        )
        api.apply(
            {
                "apiVersion": rbac,
                "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
            }
        )
        token = api.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            body={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 86400},
            },
        )["status"]["token"]
        path = self.run_dir / "metrics-token"
        path.write_text(token)
        path.chmod(0o600)

    def kueue_metrics(self) -> str:
        """Kueue's Prometheus metrics, as the testbed's metrics reader."""
        token = (self.run_dir / "metrics-token").read_text()
        response = _PROBE.get(
            f"https://127.0.0.1:{self.state['ports']['kueue-metrics']}/metrics",
            headers={"Authorization": f"Bearer {token}"},
            verify=str(kueue.METRICS_CERT_DIR / "ca.crt"),
            timeout=10,
        )
        response.raise_for_status()
        return response.text

    def _component_args(self, name: str) -> list[str]:
        return [
            f"--tls-cert-file={self.pki_dir / f'{name}.crt'}",
            f"--tls-private-key-file={self.pki_dir / f'{name}.key'}",
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
        ]

    def _start_kube_controller_manager(self) -> None:
        port = self._port("kube-controller-manager")
        self._spawn(
            "kube-controller-manager",
            [
                *self._component_args("kube-controller-manager"),
                f"--secure-port={port}",
                f"--service-account-private-key-file={self.pki_dir / 'sa.key'}",
                f"--root-ca-file={self.pki_dir / 'ca.crt'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--use-service-account-credentials=false",
                "--v=1",
            ],
        )
        self._await("kube-controller-manager", lambda: self._secure_healthz(port), 120)

    def _start_kube_scheduler(self) -> None:
        port = self._port("kube-scheduler")
        self._spawn(
            "kube-scheduler",
            [
                *self._component_args("kube-scheduler"),
                f"--secure-port={port}",
                "--v=1",
            ],
        )
        self._await("kube-scheduler", lambda: self._secure_healthz(port), 120)

    def _start_kwok(self) -> None:
        port = self._port("kwok")
        config = self.run_dir / "kwok.yaml"
        config.write_text(kwok.config_yaml())
        self._spawn(
            "kwok",
            [
                f"--kubeconfig={self.kubeconfig}",
                f"--config={config}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={kwok.NODE_ANNOTATION}=fake",
                "--node-lease-duration-seconds=40",
                f"--server-address=127.0.0.1:{port}",
                *kwok.ADDRESS_FLAGS,
            ],
        )
        self._await("kwok", lambda: self._http_ok(f"http://127.0.0.1:{port}/healthz"), 60)

    def _start_jobset(self) -> None:
        api = self.api()
        url = f"https://127.0.0.1:{self._port('jobset-webhook')}"
        for hooks in jobset.webhook_configurations(webhook_url=url, ca_pem=self._ca.pem):
            api.apply(hooks)
        config = jobset.configuration(
            ports=self.state["ports"], webhook_cert_dir=self.run_dir / "jobset" / "webhook-certs"
        )
        config_path = self.run_dir / "jobset" / "config.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self._spawn(
            "jobset",
            [f"--config={config_path}"],
            cwd=self.run_dir / "jobset",
            env={"KUBECONFIG": str(self.kubeconfig)},
        )
        health = f"http://127.0.0.1:{self._port('jobset-health')}/readyz"
        self._await("jobset", lambda: self._http_ok(health), 120)
        probe = {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "testbed-webhook-probe", "namespace": "default"},
            "spec": {"replicatedJobs": []},
        }

        def webhooks_answer() -> bool:
            try:
                api.create(probe, dry_run=True)
            except ApiError as exc:  # an answer from JobSet's validating webhook is an answer
                return exc.status == 422 and "admission webhook" in exc.body
            return True

        self._await("jobset", webhooks_answer, 60)

    def _add_nodes(self) -> None:
        api = self.api()
        for node in kwok.gpu_nodes(self.nodes):
            api.apply(node)
        wait_for(f"{self.nodes} KWOK nodes Ready", lambda: _ready_nodes(api) >= self.nodes, timeout=120)

    # --- down / status -------------------------------------------------------------------------------------

    def down(self, *, quiet: bool = False) -> list[str]:
        """Stop every process the state names (newest first); return the names stopped."""
        if not self.state:
            self.load()
        stopped = []
        pids = self.state.get("pids") or {}
        for name in reversed(ORDER):
            pid = pids.get(name)
            if pid and _is_ours(pid, name):
                _terminate(pid)
                stopped.append(name)
        for process in self._processes.values():
            with contextlib.suppress(Exception):
                process.wait(timeout=1)
        if self.state:
            self.state["pids"] = {}
            self.state["stopped_at"] = time.time()
            with contextlib.suppress(OSError):
                self._save()
        shutil.rmtree(self.run_dir / "etcd-data", ignore_errors=True)
        if not quiet:
            self.echo(f"stopped {', '.join(stopped)}" if stopped else f"nothing runs in {self.run_dir}")
        return stopped

    def status(self) -> dict[str, str]:
        """{component: "up" | "not ready" | "stopped"} of the recorded testbed (probes each health endpoint)."""
        self.load()
        if not self.state:
            return {}
        out = {}
        pids = self.state.get("pids") or {}
        checks = self._health_checks()
        for name in ORDER:
            if name not in (self.state.get("seconds") or {}) and name not in pids:
                continue
            pid = pids.get(name)
            if not pid or not _is_ours(pid, name):
                out[name] = "stopped"
                continue
            try:
                out[name] = "up" if checks[name]() else "not ready"
            except (requests.RequestException, TestbedError):
                out[name] = "not ready"
        return out

    def _health_checks(self) -> dict[str, Callable[[], bool]]:
        p = self.state["ports"]
        return {
            "etcd": lambda: self._http_ok(f"http://127.0.0.1:{p['etcd']}/health"),
            "kube-apiserver": lambda: self.api().healthy(),
            "kueue": lambda: self._http_ok(f"http://127.0.0.1:{p['kueue-health']}/readyz"),
            "kube-controller-manager": lambda: self._secure_healthz(p["kube-controller-manager"]),
            "kube-scheduler": lambda: self._secure_healthz(p["kube-scheduler"]),
            "kwok": lambda: self._http_ok(f"http://127.0.0.1:{p['kwok']}/healthz"),
            "jobset": lambda: self._http_ok(f"http://127.0.0.1:{p['jobset-health']}/readyz"),
        }


def _established(api: KubeApi, name: str) -> bool:
    crd = api.get("CustomResourceDefinition", name)
    return any(
        c.get("type") == "Established" and c.get("status") == "True"
        for c in crd.get("status", {}).get("conditions", [])
    )


def _ready_nodes(api: KubeApi) -> int:
    count = 0
    for node in api.list("Node", label_selector="type=kwok"):
        if any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in node.get("status", {}).get("conditions", [])
        ):
            count += 1
    return count


def _is_ours(pid: int, name: str) -> bool:
    """Whether ``pid`` runs the testbed's ``name`` binary (a recycled pid is left alone)."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    return Path(exe.removesuffix(" (deleted)")).name == name and Path(exe).parent.resolve() == layout.BIN_DIR.resolve()


def _terminate(pid: int, grace: float = 10.0) -> None:
    """SIGTERM the process group ``pid`` leads, SIGKILL it after ``grace`` seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
