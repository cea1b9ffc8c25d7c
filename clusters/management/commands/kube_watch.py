"""``python manage.py kube_watch [--cluster NAME ...] [--kind KIND ...] [--seconds N]``.

The low-latency half of the kubernetes sync (the beat task ``clusters.kube_sync_clusters`` is the other): for every
kubernetes cluster, one thread per watched kind (nodes, resourceslices, clusterqueues, jobs, pods, workloads,
events) holds a watch open from its resourceVersion bookmark and commits each batch with its bookmark; one more
thread per cluster evaluates the jobs whose snapshots changed. SIGTERM / SIGINT stop it; since every batch is
committed with its bookmark, a kill at any moment loses nothing and the next start resumes where it stopped.
Run one replica: a second one does no harm (the sync is idempotent) but doubles the API server's load.
"""

from __future__ import annotations

import logging
import signal
import threading
import time

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from clusters.backends.kubernetes import KubernetesBackend
from clusters.kube_sync.loops import WATCHED_KINDS, kube_evaluate_loop, kube_watch_loop
from pools.models import Cluster

log = logging.getLogger(__name__)


def _thread_main(target, **kwargs) -> None:
    """Run a loop in a thread, closing the thread's database connection at the end."""
    try:
        target(**kwargs)
    except Exception:  # a loop that dies must say so; the others go on
        log.exception("kube_watch: %s stopped", kwargs.get("kind", "evaluation"))
    finally:
        connection.close()


class Command(BaseCommand):
    help = "Watch the kubernetes clusters (one thread per cluster and kind) and apply changes within a second."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", action="append", default=[], help="cluster name (repeatable); default all")
        parser.add_argument(
            "--kind", action="append", default=[], choices=WATCHED_KINDS, help="kind to watch (repeatable)"
        )
        parser.add_argument("--seconds", type=float, default=0, help="stop after this long (0: until a signal)")
        parser.add_argument("--watch-timeout", type=int, default=0, help="timeoutSeconds of each watch request")

    def handle(self, *args, **options) -> None:
        kubernetes = Cluster.objects.filter(backend=Cluster.Backend.KUBERNETES).order_by("name")
        if options["cluster"]:
            kubernetes = kubernetes.filter(name__in=options["cluster"])
            missing = set(options["cluster"]) - set(kubernetes.values_list("name", flat=True))
            if missing:
                raise CommandError(f"--cluster: no kubernetes cluster named {', '.join(sorted(missing))}")
        clusters = list(kubernetes)
        if not clusters:
            raise CommandError("no kubernetes cluster to watch (add a Cluster with backend 'kubernetes')")
        kinds = options["kind"] or list(WATCHED_KINDS)
        stopping = threading.Event()
        deadline = time.monotonic() + options["seconds"] if options["seconds"] else None

        def stop() -> bool:
            return stopping.is_set() or (deadline is not None and time.monotonic() >= deadline)

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: stopping.set())
        threads = []
        for cluster in clusters:
            api = KubernetesBackend(cluster).api
            for kind in kinds:
                kwargs = {"cluster": cluster, "api": api, "kind": kind, "stop": stop}
                if options["watch_timeout"]:
                    kwargs["timeout_seconds"] = options["watch_timeout"]
                threads.append(
                    threading.Thread(
                        target=_thread_main,
                        args=(kube_watch_loop,),
                        kwargs=kwargs,
                        name=f"watch-{cluster.name}-{kind}",
                        daemon=True,
                    )
                )
            threads.append(
                threading.Thread(
                    target=_thread_main,
                    args=(kube_evaluate_loop,),
                    kwargs={"cluster": cluster, "api": api, "stop": stop},
                    name=f"evaluate-{cluster.name}",
                    daemon=True,
                )
            )
        for thread in threads:
            thread.start()
        self.stdout.write(
            f"watching {', '.join(c.name for c in clusters)}: {', '.join(kinds)} ({len(threads)} threads)"
        )
        while not stop() and any(t.is_alive() for t in threads):
            time.sleep(0.2)
        stopping.set()
        # a watch blocked on a quiet stream notices the stop at its next event; every committed batch is safe,
        # so the process need not wait for it
        for thread in threads:
            thread.join(timeout=2)
        alive = [t.name for t in threads if t.is_alive()]
        self.stdout.write(f"stopped{f' ({len(alive)} watches left to the exit)' if alive else ''}")
