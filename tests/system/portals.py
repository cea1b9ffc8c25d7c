"""The portal as deployed, in real processes, for the system tests (the interface: tests/system/README.md).

Two shapes:

* :class:`EmbeddedPortal`: what ``scripts/demo`` runs (``scripts/embedded.py``: the web server and a separate
  Celery worker with beat under its supervisor, the embedded broker, SQLite), on a copy of the seeded demo database.
* :class:`ProductionPortal`: the deployed shape (``deploy/base``): gunicorn behind nginx with the sidecar's
  configuration, a separate Celery worker, a separate beat, Redis and PostgreSQL, with the commands read from the
  manifests.

Every process runs in a session of its own with its output in a log file; :meth:`Portal.log_problems` finds
tracebacks, critical errors and "database is locked" in them (the fixtures fail a test that leaves any it did not
allow), and :meth:`Portal.log_report` gives each log's tail for a failure report.
"""

from __future__ import annotations

import http.cookiejar
import os
import re
import secrets
import shutil
import subprocess
from pathlib import Path

import requests
import yaml

from tests.system.processes import (
    PYTHON,
    ROOT,
    START_TIMEOUT,
    HarnessError,
    LogFile,
    Proc,
    base_env,
    free_port,
    problems_in,
    spawn,
    wait_until,
)
from tests.system.services import PostgresServer, RedisServer

DEMO_PASSWORD = "demo-password"


class Portal:
    """A running portal: its URL, processes, logs, and helpers to use it as a person or a script would.

    Subclasses start the processes; every portal has ``web`` and ``worker`` (and ``beat``, which in the embedded
    shape is the worker's ``--beat`` child: freezing the worker leaves it running, as in production).
    """

    shape = ""

    def __init__(self, workdir: Path, *, env: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.logs_dir = workdir / "logs"
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.var_dir = workdir / "var"
        self.var_dir.mkdir(parents=True, exist_ok=True)
        self.extra_env = dict(env or {})
        self.env: dict[str, str] = {}
        self.processes: dict[str, Proc] = {}
        self.base_url = ""
        self.public_url = ""  # the origin the portal believes it is served at (https behind the TLS proxy)
        # Django logs a refused request's PermissionDenied with its traceback: an answer (403), not a problem.
        self.allowed: list[re.Pattern] = [re.compile(r"Forbidden \(Permission denied\): ")]
        self.headers: dict[str, str] = {}

    # -- processes
    @property
    def web(self) -> Proc:
        """The web server's process (runserver, or gunicorn's master)."""
        return self.processes["web"]

    @property
    def worker(self) -> Proc:
        """The Celery worker's main process."""
        return self.processes["worker"]

    def logs(self) -> list[LogFile]:
        """Every log of this portal's processes."""
        return [p.log for p in self.processes.values()]

    def stop(self) -> None:
        """Stop every process (reverse start order)."""
        for proc in reversed(list(self.processes.values())):
            proc.stop()

    # -- logs
    def allow_in_logs(self, pattern: str) -> None:
        """Let problems (tracebacks…) whose excerpt matches ``pattern`` pass the end-of-test log check."""
        self.allowed.append(re.compile(pattern))

    def log_marks(self) -> dict[str, int]:
        """Where each log ends now (give it to :meth:`log_problems` to look only at what follows)."""
        return {log.name: log.size() for log in self.logs()}

    def log_problems(self, since: dict[str, int] | None = None, *, allowed: bool = False) -> list[str]:
        """Problems in the logs (since the marks), "log name: excerpt"; those matching an allowed pattern are
        left out unless ``allowed``."""
        found = []
        for log in self.logs():
            for excerpt in problems_in(log.text((since or {}).get(log.name, 0))):
                if allowed or not any(p.search(excerpt) for p in self.allowed):
                    found.append(f"{log.name}: {excerpt}")
        return found

    def log_report(self, lines: int = 60) -> str:
        """Each log's last ``lines`` lines, for a failure report."""
        parts = [f"----- {log.name} ({log.path}) -----\n{log.tail(lines)}" for log in self.logs()]
        return "\n".join(parts)

    # -- HTTP
    def url(self, path: str) -> str:
        """The absolute URL of ``path``."""
        return self.base_url + path

    def session(self, username: str | None = None, password: str = DEMO_PASSWORD) -> requests.Session:
        """A requests session with the headers the shape needs; signed in as ``username`` when given."""
        s = _Session()
        s.headers.update(self.headers)
        s.cookies.set_policy(_CookiePolicy())
        if username:
            page = s.get(self.url("/accounts/login/"), timeout=30)
            page.raise_for_status()
            answer = s.post(
                self.url("/accounts/login/"),
                data={"username": username, "password": password, "csrfmiddlewaretoken": s.cookies["csrftoken"]},
                headers={"Referer": self.public_url + "/accounts/login/"},
                timeout=30,
            )
            if "sessionid" not in s.cookies:
                raise HarnessError(f"sign-in as {username} failed: HTTP {answer.status_code}")
            s.headers["X-CSRFToken"] = s.cookies["csrftoken"]
            s.headers["Referer"] = self.public_url + "/"
        return s

    def healthy(self) -> bool:
        """Whether ``/healthz`` answers 200."""
        try:
            return requests.get(self.url("/healthz"), headers=self.headers, timeout=5).status_code == 200
        except requests.RequestException:
            return False

    def metrics(self) -> str:
        """``GET /metrics`` as Prometheus scrapes it (with ``METRICS_TOKEN`` when the portal has one)."""
        token = self.env.get("METRICS_TOKEN")
        headers = self.headers | ({"Authorization": f"Bearer {token}"} if token else {})
        answer = requests.get(self.url("/metrics"), headers=headers, timeout=30)
        answer.raise_for_status()
        return answer.text

    def status(self, session: requests.Session) -> dict:
        """``GET /status.json`` with a signed-in session."""
        answer = session.get(self.url("/status.json"), timeout=30)
        answer.raise_for_status()
        return answer.json()

    # -- the same database from outside
    def manage(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
        """``manage.py ARGS`` with this portal's settings (database, broker, var directory)."""
        result = subprocess.run(
            [PYTHON, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and result.returncode != 0:
            raise HarnessError(
                f"manage.py {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
            )
        return result

    def shell(self, code: str, *, timeout: float = 600) -> str:
        """Run Python ``code`` in ``manage.py shell`` against this portal's database; what it printed."""
        return self.manage("shell", "-c", code, timeout=timeout).stdout

    def api_token(self, username: str, team: str) -> str:
        """A new API token of ``username`` for team ``team`` (slug), made with the product's own service."""
        code = (
            "from django.contrib.auth import get_user_model\n"
            "from queues.api.tokens import api_token_create\n"
            "from queues.models import Team\n"
            f"user = get_user_model().objects.get(username={username!r})\n"
            f"team = Team.objects.get(slug={team!r})\n"
            "issued = api_token_create(user=user, team=team, name='system test')\n"
            "print('KEY=' + issued.key)\n"
        )
        out = self.shell(code)
        match = re.search(r"KEY=(\S+)", out)
        if not match:
            raise HarnessError(f"no token key in: {out}")
        return match.group(1)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.base_url}>"


class _Session(requests.Session):
    """A session whose own cookie jar (and its policy) decides which cookies each request sends.

    requests copies the jar into a default one for every request, whose policy keeps Secure cookies off http.
    """

    def prepare_request(self, request: requests.Request) -> requests.PreparedRequest:
        """The request, its Cookie header made from this session's jar."""
        prepared = super().prepare_request(request)
        prepared.headers.pop("Cookie", None)
        prepared.prepare_cookies(self.cookies)
        return prepared


class _CookiePolicy(http.cookiejar.DefaultCookiePolicy):
    """Send Secure cookies over http too: the tests play the TLS proxy, which the production shape trusts."""

    def return_ok_secure(self, cookie, request) -> bool:
        return True

    def set_ok(self, cookie, request) -> bool:
        return True


class EmbeddedPortal(Portal):
    """``scripts/embedded.py`` (what ``scripts/demo`` runs after its setup) on a copy of a database file.

    ``processes``: ``supervisor`` (scripts/embedded.py), ``worker`` and ``web`` (its children, found by their pid
    files: a restarted worker is the new process). The supervisor's own messages are in its log.
    """

    shape = "embedded"

    def __init__(self, workdir: Path, *, database: Path | None, env: dict[str, str] | None = None) -> None:
        super().__init__(workdir, env=env)
        self.database = database
        self.port = free_port()
        self.base_url = self.public_url = f"http://127.0.0.1:{self.port}"

    def start(self) -> EmbeddedPortal:
        """Copy the database, migrate it, start the supervisor and wait for the web server and the worker."""
        db = self.workdir / "db.sqlite3"
        if self.database is not None:
            shutil.copyfile(self.database, db)
        self.env = (
            base_env()
            | {
                "DATABASE_URL": f"sqlite:///{db}",
                "PORTAL_VAR_DIR": str(self.var_dir),
                "CELERY_BROKER_URL": f"sqla+sqlite:///{self.var_dir / 'celery-broker.sqlite3'}",
                "SHOW_DEMO_LOGINS": "1",
                "DEBUG": "0",
            }
            | self.extra_env
        )
        self.manage("migrate", "--noinput")
        argv = [PYTHON, "scripts/embedded.py", "--no-setup", "--port", str(self.port)]
        argv += ["--web-log", str(self.logs_dir / "web.log")]
        supervisor = spawn("supervisor", argv, env=self.env, log=self.logs_dir / "supervisor.log")
        self.processes = {
            "supervisor": supervisor,
            "worker": Proc(
                "worker", LogFile("worker", self.var_dir / "worker.log"), pid_file=self.var_dir / "worker.pid"
            ),
            "web": Proc("web", LogFile("web", self.logs_dir / "web.log"), pid_file=self.var_dir / "web.pid"),
        }
        try:
            wait_until(self.healthy, timeout=START_TIMEOUT, what="the web server's /healthz")
            self.worker.wait_for_log(r"celery@\S+ ready\.")
        except HarnessError as exc:
            raise HarnessError(f"{exc}\n{self.log_report()}") from exc
        return self

    @property
    def supervisor(self) -> Proc:
        """scripts/embedded.py."""
        return self.processes["supervisor"]

    @property
    def beat(self) -> Proc:
        """The embedded beat runs inside the worker (``--beat``): its process is the worker's."""
        return self.worker

    def logs(self) -> list[LogFile]:
        """The supervisor's, the worker's (appended over restarts) and the web server's logs."""
        return [p.log for p in self.processes.values()]

    def stop(self) -> None:
        """Stop the supervisor (which stops its children), then anything left."""
        self.supervisor.stop(timeout=40)
        for name in ("worker", "web"):
            proc = self.processes[name]
            if proc.alive():
                proc.kill()


def deployed_command(manifest: str, container: str) -> list[str]:
    """The command of ``container`` in ``deploy/base/<manifest>`` (the deployed process, as the image runs it)."""
    for doc in yaml.safe_load_all((ROOT / "deploy" / "base" / manifest).read_text()):
        for spec in (doc or {}).get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            if spec["name"] == container:
                return list(spec["command"])
    raise HarnessError(f"deploy/base/{manifest} has no container {container}")


def _with_options(argv: list[str], **options: str) -> list[str]:
    """``argv`` with ``--name=value`` options replaced (or added): ``_with_options(a, workers="2")``."""
    out, seen = [], set()
    for arg in argv:
        name = arg[2:].split("=", 1)[0].replace("-", "_") if arg.startswith("--") else None
        if name in options:
            out.append(f"--{name.replace('_', '-')}={options[name]}")
            seen.add(name)
        else:
            out.append(arg)
    out += [f"--{k.replace('_', '-')}={v}" for k, v in options.items() if k not in seen]
    return out


def _runnable(argv: list[str]) -> list[str]:
    """A manifest's command run from this virtualenv (``celery`` → ``python -m celery``)."""
    head, rest = argv[0], argv[1:]
    if head in ("celery", "gunicorn"):
        return [PYTHON, "-m", head, *rest]
    if head == "python":
        return [PYTHON, *rest]
    return argv


class ProductionPortal(Portal):
    """The deployed shape: nginx (the sidecar's configuration) → gunicorn, a worker, a beat, Redis, PostgreSQL.

    The commands are the containers' in ``deploy/base`` (web, worker, beat), with the bind address and the process
    counts set for a small machine. The tests play the TLS-terminating ingress: requests come from 127.0.0.1 (made
    an edge-proxy address in nginx's configuration) with ``X-Forwarded-Proto: https`` (``portal.headers``; give
    them to a browser context as ``extra_http_headers``).
    """

    shape = "production"

    def __init__(
        self,
        workdir: Path,
        *,
        redis: RedisServer,
        postgres: PostgresServer,
        database: str,
        env: dict[str, str] | None = None,
        web_workers: int = 2,
        worker_concurrency: int = 2,
    ) -> None:
        super().__init__(workdir, env=env)
        self.redis = redis
        self.postgres = postgres
        self.database = database
        self.port = free_port()
        self.gunicorn_port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.public_url = f"https://127.0.0.1:{self.port}"
        self.headers = {"X-Forwarded-Proto": "https"}
        self.commands: dict[str, list[str]] = {}
        self.web_workers = web_workers
        self.worker_concurrency = worker_concurrency

    @property
    def beat(self) -> Proc:
        """The beat process."""
        return self.processes["beat"]

    @property
    def nginx(self) -> Proc:
        """The static-file and proxy sidecar."""
        return self.processes["nginx"]

    def start(self) -> ProductionPortal:
        """Collect the static files, then start gunicorn, nginx, the worker and beat; wait for each."""
        static = self.workdir / "static"
        self.env = (
            base_env()
            | {
                "PORTAL_MODE": "production",
                "SECRET_KEY": secrets.token_urlsafe(50),
                "METRICS_TOKEN": secrets.token_urlsafe(32),  # production refuses scrapes without one
                "DATABASE_URL": self.postgres.url(self.database),
                "CELERY_BROKER_URL": self.redis.url(0),
                "CACHE_URL": self.redis.url(1),
                "ALLOWED_HOSTS": "127.0.0.1,localhost",
                "CSRF_TRUSTED_ORIGINS": f"https://127.0.0.1:{self.port},http://127.0.0.1:{self.port}",
                "BEHIND_TLS_PROXY": "true",
                "TRUSTED_PROXY_COUNT": "1",
                "STATIC_ROOT": str(static),
                "PORTAL_VAR_DIR": str(self.var_dir),
                "PORTAL_DEFAULT_BACKEND": "simulated",
                "DB_CONN_MAX_AGE": "60",
            }
            | self.extra_env
        )
        self.manage("migrate", "--noinput")
        self.manage("collectstatic", "--noinput")
        web = _with_options(
            _runnable(deployed_command("web.yaml", "web")),
            bind=f"127.0.0.1:{self.gunicorn_port}",
            workers=str(self.web_workers),
            worker_tmp_dir=str(self.workdir),
        )
        web.append("--no-control-socket")  # its default is one path in $HOME, and several portals may run at once
        worker = _with_options(
            _runnable(deployed_command("worker.yaml", "worker")), concurrency=str(self.worker_concurrency)
        )
        beat = _with_options(
            _runnable(deployed_command("beat.yaml", "beat")), schedule=str(self.var_dir / "celerybeat-schedule")
        )
        self.commands = {"web": web, "worker": worker, "beat": beat}
        self.processes["web"] = spawn("web", web, env=self.env, log=self.logs_dir / "web.log")
        self.processes["nginx"] = self._start_nginx(static)
        self.processes["worker"] = spawn("worker", worker, env=self.env, log=self.logs_dir / "worker.log")
        self.processes["beat"] = spawn("beat", beat, env=self.env, log=self.logs_dir / "beat.log")
        try:
            wait_until(self.healthy, timeout=START_TIMEOUT, what="/healthz through nginx")
            self.worker.wait_for_log(r"celery@\S+ ready\.")
            self.beat.wait_for_log(r"beat: Starting")
        except HarnessError as exc:
            raise HarnessError(f"{exc}\n{self.log_report()}") from exc
        return self

    def restart(self, name: str) -> Proc:
        """Start ``web``, ``worker`` or ``beat`` again with its command, as Kubernetes restarts a container (the
        old process is stopped first if it still runs); the log goes on in the same file."""
        old = self.processes[name]
        if old.alive():
            old.stop()
        self.processes[name] = spawn(name, self.commands[name], env=self.env, log=old.log.path)
        return self.processes[name]

    def _start_nginx(self, static: Path) -> Proc:
        """nginx with the sidecar's server block (deploy/base/nginx-configmap.yaml), ports and paths made local."""
        binary = shutil.which("nginx") or "/usr/sbin/nginx"
        if not Path(binary).exists():
            raise HarnessError("nginx is not installed (apt-get install nginx-light)")
        doc = yaml.safe_load((ROOT / "deploy" / "base" / "nginx-configmap.yaml").read_text())
        server = doc["data"]["default.conf"]
        server = server.replace("listen 8080;", f"listen 127.0.0.1:{self.port};")
        server = server.replace("alias /app/var/static/;", f"alias {static}/;")
        server = server.replace("http://127.0.0.1:8000", f"http://127.0.0.1:{self.gunicorn_port}")
        server = server.replace("default 0;", "default 0;\n  127.0.0.0/8 1;  # the tests play the edge proxy")
        prefix = self.workdir / "nginx"
        for sub in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (prefix / sub).mkdir(parents=True, exist_ok=True)
            (prefix / sub).chmod(0o777)
        conf = prefix / "nginx.conf"
        user = "user root;\n" if os.geteuid() == 0 else ""  # its workers read the static files where the tests write
        conf.write_text(
            f"{user}daemon off;\nworker_processes 1;\npid {prefix}/nginx.pid;\nerror_log {self.logs_dir}/nginx-error.log;\n"
            "events { worker_connections 256; }\n"
            "http {\n  include /etc/nginx/mime.types;\n"
            f"  access_log {self.logs_dir}/nginx-access.log;\n"
            + "".join(
                f"  {sub}_temp_path {prefix / sub};\n" for sub in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
            )
            + server
            + "\n}\n"
        )
        return spawn(
            "nginx", [binary, "-c", str(conf), "-p", str(prefix)], env=base_env(), log=self.logs_dir / "nginx.log"
        )
