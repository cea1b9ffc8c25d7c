"""Kubernetes + Kueue sync: push quota configuration, submit jobs, read the cluster back, reconcile.

Nothing here imports ``kubernetes``: the services talk to a cluster through :class:`clusters.kube_sync.api.KubeApi`,
which :mod:`clusters.backends.k8s` implements with the official client.
"""
