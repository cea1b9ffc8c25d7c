"""The web tier under load: requests/s, p50/p99 and server CPU per request of the hot pages, over loopback.

Builds a throwaway PostgreSQL database (``--database-url``, default DATABASE_URL) with ``_worlds.queue_world``
(``--pending`` jobs queued behind a pool of ``--nodes`` nodes full of running jobs), stores the cluster's
diagnosis once (as the worker would after the last change), then starts the portal as deployed — gunicorn,
``--workers`` x ``--threads`` (gthread), DEBUG off, persistent database connections, Celery sending to
``--redis-url`` — bound to 127.0.0.1:``--port`` only, signs a member of every team in, and for each hot page runs
``--connections`` concurrent keep-alive connections for ``--seconds`` seconds (aiohttp; the load generator shares
the machine's cores, as it did for the figures in issue #40). Prints, per page: requests, requests/s, p50 and p99
latency, the server's CPU per request (utime + stime of the gunicorn processes, from /proc, divided by the
requests answered) and the answers' statuses.

Pages: the job list, a pending job's page, its live fragment as a browser polls it (``If-None-Match`` sent back:
304 while nothing changed) and rendered each time (no validator), and the class catalogue.

    .venv/bin/python benchmarks/web_load.py --database-url postgres://postgres@127.0.0.1:5432/bench_web
    .venv/bin/python benchmarks/web_load.py --pending 100000 --seconds 20 --database-url ...
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from _setup import ROOT, add_database_argument, setup_django


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=75)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0, help="load per page (bounded)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--port", type=int, default=8765, help="on 127.0.0.1 only")
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    parser.add_argument("--reuse", action="store_true", help="keep the database as the last run left it")
    add_database_argument(parser, "bench_web.sqlite3")
    args = parser.parse_args()
    if args.seconds <= 0 or args.seconds > 120:
        parser.error("--seconds must be more than 0 and at most 120")
    if not 1 <= args.connections <= 256:
        parser.error("--connections must be from 1 to 256")
    return args


ARGS = parse_args()
setup_django(ARGS.database_url)

import aiohttp  # noqa: E402
from _worlds import queue_world  # noqa: E402
from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.urls import reverse  # noqa: E402

from pools.models import Cluster  # noqa: E402
from queues import diagnosis  # noqa: E402
from queues.models import Job  # noqa: E402

BASE = f"http://127.0.0.1:{ARGS.port}"
HTMX = {"HX-Request": "true", "HX-Trigger": "queues-job-live"}


@dataclass
class Run:
    """What one page's load gave."""

    latencies: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    errors: int = 0


def world() -> tuple[Job, str]:
    """The queue (built unless ``--reuse``), its diagnosis stored, and a session cookie of the user ``bench``."""
    if ARGS.reuse and Cluster.objects.filter(name="bench").exists():
        watched = Job.objects.filter(state=Job.State.PENDING).order_by("pk")[ARGS.pending // 2]
    else:
        watched = queue_world(pending=ARGS.pending, nodes=ARGS.nodes).watched
    diagnosis.cluster_diagnosis_refresh(watched.cluster)
    client = Client()
    client.force_login(watched.owner)
    return watched, client.cookies[settings.SESSION_COOKIE_NAME].value


def start_server() -> subprocess.Popen:
    """gunicorn as deployed, on loopback; returns once it answers."""
    env = {
        **os.environ,
        "DATABASE_URL": ARGS.database_url,
        "DEBUG": "0",
        "DB_CONN_MAX_AGE": "60",
        "CELERY_BROKER_URL": ARGS.redis_url,
        "REDIS_URL": ARGS.redis_url,
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
    }
    argv = [sys.executable, "-m", "gunicorn", "portal.wsgi:application", f"--bind=127.0.0.1:{ARGS.port}"]
    argv += [f"--workers={ARGS.workers}", f"--threads={ARGS.threads}", "--worker-class=gthread", "--log-level=warning"]
    server = subprocess.Popen(argv, cwd=ROOT, env=env, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{BASE}/healthz", timeout=2).close()
            return server
        except urllib.error.HTTPError:
            return server  # it answers (whatever the status)
        except OSError:
            if server.poll() is not None:
                raise SystemExit(f"gunicorn exited with {server.returncode}") from None
            time.sleep(0.5)
    stop_server(server)
    raise SystemExit("gunicorn did not answer within 60 s")


def stop_server(server: subprocess.Popen) -> None:
    """Stop gunicorn and its workers (its own process group)."""
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def server_cpu(server: subprocess.Popen) -> float:
    """CPU seconds (user + system) of gunicorn's master and workers so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pids = [server.pid]
    try:
        children = Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split()
        pids += [int(p) for p in children]
    except OSError:
        pass
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return total


async def load(url: str, headers: dict[str, str], cookie: str, *, conditional: bool, seconds: float) -> Run:
    """``--connections`` clients asking for ``url`` in turn for ``--seconds``; with ``conditional`` each sends back
    the ETag it last got, as a browser does."""
    run = Run()
    deadline = time.monotonic() + seconds
    jar = aiohttp.CookieJar(unsafe=True)
    jar.update_cookies({settings.SESSION_COOKIE_NAME: cookie})
    connector = aiohttp.TCPConnector(limit=ARGS.connections)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(cookie_jar=jar, connector=connector, timeout=timeout) as session:

        async def client() -> None:
            tag = None
            while time.monotonic() < deadline:
                asked = {**headers, "If-None-Match": tag} if conditional and tag else headers
                began = time.perf_counter()
                try:
                    async with session.get(url, headers=asked, allow_redirects=False) as response:
                        await response.read()
                        tag = response.headers.get("ETag", tag)
                        status = response.status
                except (aiohttp.ClientError, TimeoutError):
                    run.errors += 1
                    continue
                run.latencies.append(time.perf_counter() - began)
                run.statuses[status] = run.statuses.get(status, 0) + 1

        await asyncio.gather(*(client() for _ in range(ARGS.connections)))
    return run


def measure(server: subprocess.Popen, name: str, url: str, headers: dict[str, str], cookie: str, **kw) -> None:  # type: ignore[no-untyped-def]
    """One page under load: its line of figures."""
    conditional = kw.get("conditional", False)
    asyncio.run(load(url, headers, cookie, conditional=conditional, seconds=2.0))  # warm-up: imports, caches
    before, started = server_cpu(server), time.perf_counter()
    run = asyncio.run(load(url, headers, cookie, conditional=conditional, seconds=ARGS.seconds))
    wall, spent = time.perf_counter() - started, server_cpu(server) - before
    done = len(run.latencies)
    if not done:
        print(f"  {name:<38} no answer ({run.errors} errors)")
        return
    ms = sorted(x * 1000 for x in run.latencies)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    print(
        f"  {name:<38} {done:6d} req  {done / wall:6.1f} req/s  p50 {statistics.median(ms):6.0f} ms  p99 {p99:6.0f} ms"
        f"  server CPU {spent / done * 1000:5.1f} ms/req  answers {dict(sorted(run.statuses.items()))}"
        + (f"  errors {run.errors}" if run.errors else "")
    )


def main() -> None:
    """Build, serve, load each page in turn, stop the server."""
    if connection.vendor != "postgresql":
        print("note: not PostgreSQL; the figures of issue #40 are on PostgreSQL (--database-url postgres://...)")
    watched, cookie = world()
    pages = [
        ("job list", reverse("queues:jobs"), {}, False),
        ("pending job page", reverse("queues:job_detail", args=[watched.pk]), {}, False),
        ("live fragment, as a browser polls", reverse("queues:job_detail", args=[watched.pk]), HTMX, True),
        ("live fragment, rendered each time", reverse("queues:job_detail", args=[watched.pk]), HTMX, False),
        ("class catalogue", reverse("queues:classes"), {}, False),
    ]
    connection.close()
    print(
        f"{ARGS.pending} pending, {ARGS.nodes} nodes; gunicorn {ARGS.workers} x {ARGS.threads} threads on "
        f"127.0.0.1:{ARGS.port}, {ARGS.connections} connections, {ARGS.seconds:g} s per page, {os.cpu_count()} CPUs "
        "shared with the load generator:"
    )
    server = start_server()
    try:
        for name, path, headers, conditional in pages:
            measure(server, name, BASE + path, headers, cookie, conditional=conditional)
    finally:
        stop_server(server)


if __name__ == "__main__":
    main()
