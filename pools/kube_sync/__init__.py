"""Kubernetes + Kueue sync: push quota configuration, submit jobs, read the cluster back, reconcile.

Nothing here imports ``kubernetes``: the services talk to a cluster through :class:`pools.kube_sync.api.KubeApi`,
which :mod:`pools.backends.k8s` implements with the official client.
"""
