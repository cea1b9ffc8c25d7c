"""The cluster connection over the official ``kubernetes`` client: one ApiClient per Cluster row.

The generated typed APIs are not used: every request goes through ``ApiClient.call_api`` with
``_preload_content=False`` and the JSON is parsed here, so the sync layer gets plain dicts (the same dicts
``kubectl get -o json`` prints) and 50,000 workloads are not turned into model objects first.

Retries: transient failures (5xx, 429, timeouts, connection errors) are retried with exponential backoff and
jitter, honouring ``Retry-After``; other 4xx are raised at once (409 and 410 as their own exceptions, which
callers handle). A watch that breaks mid-stream simply ends: the caller resumes from the last resourceVersion.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes.client  # noqa: TID251 - this package is the cluster backend
import kubernetes.config  # noqa: TID251
import urllib3
from kubernetes.client.exceptions import ApiException  # noqa: TID251
from kubernetes.config.incluster_config import InClusterConfigLoader  # noqa: TID251

from clusters.kube_sync.api import (
    KubeConflict,
    KubeError,
    KubeGone,
    KubeNotFound,
    KubeRejected,
    KubeUnavailable,
    Obj,
    Page,
    Resource,
    WatchEvent,
)
from clusters.kube_sync.conf import kube_setting
from pools.models import Cluster

log = logging.getLogger(__name__)

TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
IDLE = WatchEvent("IDLE", {})
_clients: dict[tuple, kubernetes.client.ApiClient] = {}
_clients_lock = threading.Lock()


def _connection_key(cluster: Cluster) -> tuple:
    """What identifies a connection: a changed kubeconfig path, context or mode gets a new client."""
    return (cluster.pk, cluster.kubeconfig_path, cluster.kube_context, cluster.in_cluster)


def api_client_for(cluster: Cluster) -> kubernetes.client.ApiClient:
    """The cluster's ApiClient (created once per process and connection settings)."""
    key = _connection_key(cluster)
    with _clients_lock:
        client = _clients.get(key)
        if client is not None:
            return client
        configuration = kubernetes.client.Configuration()
        try:
            if cluster.in_cluster:
                mounted = Path(kube_setting("KUBE_SERVICE_ACCOUNT_DIR"))
                InClusterConfigLoader(
                    token_filename=str(mounted / "token"), cert_filename=str(mounted / "ca.crt"), try_refresh_token=True
                ).load_and_set(configuration)
            else:
                kubernetes.config.load_kube_config(
                    config_file=cluster.kubeconfig_path or None,
                    context=cluster.kube_context or None,
                    client_configuration=configuration,
                    persist_config=False,
                )
        except (kubernetes.config.ConfigException, OSError, ValueError, TypeError) as exc:
            raise KubeUnavailable(f"cannot load the connection settings of cluster {cluster.name}: {exc}") from exc
        configuration.retries = False  # retried here, with backoff, and only when it is safe
        configuration.connection_pool_maxsize = 16  # the watch process holds one connection per kind
        client = kubernetes.client.ApiClient(configuration)
        for stale in [k for k in _clients if k[0] == cluster.pk]:
            _clients.pop(stale).close()
        _clients[key] = client
        return client


def forget_client(cluster: Cluster) -> None:
    """Drop the cached client of a cluster (after its connection settings changed)."""
    with _clients_lock:
        for key in [k for k in _clients if k[0] == cluster.pk]:
            _clients.pop(key).close()


def _status_body(exc: ApiException) -> dict:
    """The Status object of an error response (empty when the body is not one)."""
    body = exc.body
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    try:
        parsed = json.loads(body or "{}")
    except (TypeError, ValueError):
        return {"message": str(body or "")[:500]}
    return parsed if isinstance(parsed, dict) else {}


def _error(exc: ApiException, what: str) -> KubeError:
    """The project's exception for an API error response."""
    body = _status_body(exc)
    status = int(exc.status or 0)
    reason = str(body.get("reason") or exc.reason or "")
    message = f"{what}: HTTP {status} {reason}: {body.get('message', '')}".strip()
    if status == 404:
        return KubeNotFound(message, status=status, reason=reason, body=body)
    if status == 409:
        return KubeConflict(message, status=status, reason=reason, body=body)
    if status == 410:
        return KubeGone(message, status=status, reason=reason, body=body)
    if status in TRANSIENT_STATUSES or status == 0:
        return KubeUnavailable(message, status=status, reason=reason, body=body)
    return KubeRejected(message, status=status, reason=reason, body=body)


def _retry_after(exc: ApiException) -> float | None:
    """Seconds from a Retry-After header, when the server sent one."""
    headers = exc.headers or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class KubeClient:
    """:class:`clusters.kube_sync.api.KubeApi` over HTTP with the official client."""

    def __init__(self, cluster: Cluster, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self.cluster = cluster
        self._sleep = sleep
        self._served: dict[str, bool] = {}

    # --- plumbing ----------------------------------------------------------------------------------------------

    @property
    def api_client(self) -> kubernetes.client.ApiClient:
        """The shared ApiClient of this cluster."""
        return api_client_for(self.cluster)

    def _timeout(self, read: float | None = None) -> tuple[float, float]:
        return (float(kube_setting("KUBE_API_CONNECT_TIMEOUT")), float(read or kube_setting("KUBE_API_READ_TIMEOUT")))

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        read_timeout: float | None = None,
        attempts: int | None = None,
    ) -> urllib3.HTTPResponse:
        """One request, retried on transient failures (``attempts`` in all); returns the unread response."""
        attempts = attempts or int(kube_setting("KUBE_API_RETRIES")) + 1
        base, cap = float(kube_setting("KUBE_API_BACKOFF_BASE")), float(kube_setting("KUBE_API_BACKOFF_MAX"))
        what = f"{method} {path}"
        last: KubeError = KubeUnavailable(what)
        for attempt in range(attempts):
            delay: float | None = None
            try:
                return self.api_client.call_api(
                    path,
                    method,
                    query_params=query or [],
                    header_params={"Accept": "application/json", "Content-Type": content_type},
                    body=body,
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                    _request_timeout=self._timeout(read_timeout),
                )
            except ApiException as exc:
                error = _error(exc, what)
                if not isinstance(error, KubeUnavailable):
                    raise error from None
                delay = _retry_after(exc)
                last = error
            except urllib3.exceptions.HTTPError as exc:  # timeouts, refused connections, dropped sockets
                last = KubeUnavailable(f"{what}: {type(exc).__name__}: {exc}")
            except AttributeError as exc:
                # the client turns a TLS failure (an untrusted server certificate) into an ApiException without a
                # body, then fails decoding that body in call_api: the ApiException is this error's context
                cause = exc.__context__
                if not isinstance(cause, ApiException) or cause.body is not None:
                    raise
                last = KubeUnavailable(f"{what}: {str(cause.reason or '').strip()}")
            if attempt + 1 < attempts:
                backoff = min(cap, base * (2**attempt)) * (0.5 + random.random() / 2)
                self._sleep(min(cap, delay) if delay is not None else backoff)
                log.info("cluster %s: %s failed (%s); retry %d", self.cluster.name, what, last.message, attempt + 1)
        raise last

    def _json(self, method: str, path: str, **kwargs: Any) -> Obj:
        response = self._send(method, path, **kwargs)
        try:
            data = response.data
        finally:
            response.release_conn()
        return json.loads(data) if data else {}

    # --- KubeApi -----------------------------------------------------------------------------------------------

    def list_page(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 500,
        continue_token: str = "",
        read_timeout: float | None = None,
        attempts: int | None = None,
    ) -> Page:
        """One page of a list, items carrying their kind and apiVersion (``attempts``: 1 when a person waits)."""
        query: list[tuple[str, Any]] = [("limit", limit)]
        if continue_token:
            query.append(("continue", continue_token))
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        data = self._json(
            "GET", resource.path(namespace=namespace), query=query, read_timeout=read_timeout, attempts=attempts
        )
        items = data.get("items") or []
        for item in items:
            item.setdefault("kind", resource.kind)
            item.setdefault("apiVersion", resource.api_version)
        meta = data.get("metadata") or {}
        return Page(items, str(meta.get("resourceVersion") or ""), str(meta.get("continue") or ""))

    def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        timeout_seconds: int = 300,
        idle_timeout: float | None = None,
    ) -> Iterator[WatchEvent]:
        """Stream events; ends when the server closes the watch, the connection breaks (resume from the last rv)
        or, with ``idle_timeout``, when nothing arrived for that many seconds (the backlog is drained)."""
        query: list[tuple[str, Any]] = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", int(timeout_seconds)),
        ]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        read_timeout = idle_timeout if idle_timeout else timeout_seconds + 30
        response = self._send("GET", resource.path(namespace=namespace), query=query, read_timeout=read_timeout)
        try:
            yield from self._events(response, resource, idle=bool(idle_timeout))
        finally:
            if not response.closed:
                response.close()  # a consumer that stopped early: the rest of the stream is not wanted
            response.release_conn()

    def _events(
        self, response: urllib3.HTTPResponse, resource: Resource, *, idle: bool = False
    ) -> Iterator[WatchEvent]:
        buffer = b""
        try:
            for chunk in response.stream(64 * 1024, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        event = self._event(line, resource)
                        if event is not None:
                            yield event
                if not buffer:
                    yield IDLE  # everything received so far is processed: a good moment to commit
        except urllib3.exceptions.ReadTimeoutError as exc:
            # With an idle timeout this is how a caught-up watch ends: the API server sends its first BOOKMARK
            # only 2 s before the watch's own timeout (or after a minute), not when the backlog is sent.
            if idle and not buffer:
                log.debug(
                    "cluster %s: watch of %s drained (quiet for the idle timeout)", self.cluster.name, resource.key
                )
            else:
                log.info("cluster %s: watch of %s broke (%s); resuming later", self.cluster.name, resource.key, exc)
            return
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            log.info("cluster %s: watch of %s broke (%s); resuming later", self.cluster.name, resource.key, exc)
            return
        if buffer.strip():
            event = self._event(buffer, resource)
            if event is not None:
                yield event

    def _event(self, line: bytes, resource: Resource) -> WatchEvent | None:
        try:
            raw = json.loads(line)
        except ValueError:
            log.warning("cluster %s: unreadable watch line for %s dropped", self.cluster.name, resource.key)
            return None
        kind, obj = raw.get("type", ""), raw.get("object") or {}
        if kind == "ERROR":
            code = int(obj.get("code") or 0)
            message = f"watch {resource.key}: {obj.get('reason', '')}: {obj.get('message', '')}"
            if code == 410:
                raise KubeGone(message, status=410, reason=str(obj.get("reason", "")), body=obj)
            if code in TRANSIENT_STATUSES:
                raise KubeUnavailable(message, status=code, body=obj)
            raise KubeRejected(message, status=code, body=obj)
        obj.setdefault("kind", resource.kind)
        obj.setdefault("apiVersion", resource.api_version)
        return WatchEvent(kind, obj)

    def get(self, resource: Resource, *, name: str, namespace: str | None = None) -> Obj:
        """One object."""
        obj = self._json("GET", resource.path(namespace=namespace, name=name))
        obj.setdefault("kind", resource.kind)
        obj.setdefault("apiVersion", resource.api_version)
        return obj

    def create(self, resource: Resource, body: Obj) -> Obj:
        """POST an object to its collection."""
        namespace = (body.get("metadata") or {}).get("namespace")
        return self._json(
            "POST",
            resource.path(namespace=namespace),
            body=body,
            query=[("fieldManager", kube_setting("KUBE_FIELD_MANAGER"))],
        )

    def apply(self, resource: Resource, body: Obj, *, force: bool = False) -> Obj:
        """Server-side apply (``application/apply-patch+yaml``; JSON is YAML)."""
        meta = body.get("metadata") or {}
        query: list[tuple[str, Any]] = [("fieldManager", kube_setting("KUBE_FIELD_MANAGER"))]
        if force:
            query.append(("force", "true"))
        return self._json(
            "PATCH",
            resource.path(namespace=meta.get("namespace"), name=meta["name"]),
            body=body,
            query=query,
            content_type="application/apply-patch+yaml",
        )

    def patch(self, resource: Resource, *, name: str, namespace: str | None = None, body: Obj) -> Obj:
        """JSON merge patch."""
        return self._json(
            "PATCH",
            resource.path(namespace=namespace, name=name),
            body=body,
            query=[("fieldManager", kube_setting("KUBE_FIELD_MANAGER"))],
            content_type="application/merge-patch+json",
        )

    def delete(
        self,
        resource: Resource,
        *,
        name: str,
        namespace: str | None = None,
        propagation_policy: str = "Background",
        uid: str = "",
    ) -> None:
        """DELETE with a propagation policy; absent already is fine."""
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation_policy}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            self._json("DELETE", resource.path(namespace=namespace, name=name), body=body)
        except KubeNotFound:
            return

    def pod_log(self, *, namespace: str, name: str, container: str, tail_lines: int, read_timeout: float) -> str:
        """The last ``tail_lines`` lines of a pod's container (``CoreV1Api.read_namespaced_pod_log``), with their
        timestamps; one attempt, as a person is waiting (KubeUnavailable on a timeout or refused connection)."""
        what = f"GET log of pod {namespace}/{name}"
        core = kubernetes.client.CoreV1Api(self.api_client)
        try:
            response = core.read_namespaced_pod_log(
                name,
                namespace,
                container=container or None,
                tail_lines=tail_lines,
                timestamps=True,
                _preload_content=False,
                _request_timeout=self._timeout(read_timeout),
            )
        except ApiException as exc:
            raise _error(exc, what) from None
        except urllib3.exceptions.HTTPError as exc:
            raise KubeUnavailable(f"{what}: {type(exc).__name__}: {exc}") from None
        try:
            return response.data.decode("utf-8", "replace")
        finally:
            response.release_conn()

    def serves(self, group_version: str) -> bool:
        """Whether ``/apis/<group>/<version>`` exists (cached per client)."""
        if group_version not in self._served:
            try:
                self._json("GET", f"/apis/{group_version}")
                self._served[group_version] = True
            except (KubeNotFound, KubeRejected):
                self._served[group_version] = False
        return self._served[group_version]

    def server_version(self) -> str:
        """``gitVersion`` of the API server (a connection check)."""
        return str(self._json("GET", "/version").get("gitVersion", ""))
