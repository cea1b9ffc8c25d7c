"""Django admin of the cluster integration: Kueue configuration drift (re-apply / adopt) and reconcile reports."""

from clusters import drift_admin  # noqa: F401  (registers the drift admin)
from clusters.kube_sync import admin as kube_sync_admin  # noqa: F401  (registers the reconciler's reports)
