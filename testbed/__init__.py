"""The testbed: real Kubernetes (etcd, kube-apiserver, kube-controller-manager, kube-scheduler), real Kueue and
KWOK's fake GPU nodes, built from their Go modules (``testbed/go.mod``) and run on loopback for the ``realcluster``
tests and the engine-vs-Kueue benchmark. See docs/testbed.md.
"""
