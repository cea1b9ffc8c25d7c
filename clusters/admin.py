"""Django admin of the cluster integration: the pools' policy models (pushed to the clusters), Kueue configuration
drift (re-apply / adopt) and reconcile reports."""

from clusters import (
    drift_admin,  # noqa: F401  (registers the drift admin)
    pool_admin,  # noqa: F401  (registers the clusters, flavors and classes)
)
from clusters.kube_sync import admin as kube_sync_admin  # noqa: F401  (registers the reconciler's reports)
