"""Cluster integration: the backends that talk to a cluster (simulated and Kubernetes + Kueue), the sync of
workloads, the push of queue configuration and the repair steps that move jobs. It sits above ``queues``."""
