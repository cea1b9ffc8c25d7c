"""Settings of the kubernetes backend, read at call time with defaults that work without any configuration."""

from __future__ import annotations

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # HTTP client
    "KUBE_API_CONNECT_TIMEOUT": 5.0,
    "KUBE_API_READ_TIMEOUT": 30.0,
    "KUBE_API_RETRIES": 4,
    "KUBE_API_BACKOFF_BASE": 0.5,
    "KUBE_API_BACKOFF_MAX": 8.0,
    # in-cluster: where Kubernetes mounts the pod's ServiceAccount token and the cluster's CA
    "KUBE_SERVICE_ACCOUNT_DIR": "/var/run/secrets/kubernetes.io/serviceaccount",
    # list + watch
    "KUBE_LIST_PAGE_SIZE": 500,
    "KUBE_WATCH_TIMEOUT_SECONDS": 300,
    "KUBE_SYNC_WATCH_SECONDS": 5,
    "KUBE_SYNC_IDLE_SECONDS": 2.0,
    "KUBE_STALE_AFTER_SECONDS": 300,
    # submission
    "KUBE_FIELD_MANAGER": "gpu-pool-portal",
    "KUBE_DELETE_PROPAGATION": "Background",
    "KUBE_JOB_BACKOFF_LIMIT": 0,
    "KUBE_JOB_TTL_SECONDS_AFTER_FINISHED": 3600,
    "KUBE_TERMINATION_GRACE_SECONDS": 30,
    "KUBE_CHECKPOINT_GRACE_SECONDS": 300,
    "KUBE_RESUBMIT_AFTER_SECONDS": 120,
    # Kueue's manager ConfigMap ("namespace/name", key controller_manager_config.yaml): read to check that the
    # cluster's fair-sharing switch matches Kueue's own configuration (deploy/base/rbac.yaml grants only this one)
    "KUEUE_CONFIG_MAP": "kueue-system/kueue-manager-config",
    # reconciliation
    "KUBE_RECONCILE_REPORTS_KEPT": 50,
    "KUBE_DEAD_NODE_SECONDS": 600,
}


def kube_setting(name: str) -> Any:
    """``settings.<name>`` if set, else the backend's default."""
    return getattr(settings, name, DEFAULTS[name])
