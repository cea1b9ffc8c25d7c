"""The labels and annotations the portal puts on what it sends to a cluster, and Kueue's it uses."""

from __future__ import annotations

MANAGED_BY = "app.kubernetes.io/managed-by"
PORTAL = "gpu-pool-portal"
PREFIX = "gpu-pool-portal.io"
JOB_ID_LABEL = f"{PREFIX}/job-id"
TEAM_LABEL = f"{PREFIX}/team"
CLASS_LABEL = f"{PREFIX}/class"
#: The pod set (pools.workload_kinds) a pod belongs to, on every pod template.
POD_SET_LABEL = f"{PREFIX}/pod-set"
#: How to reach a development session (JSON: port-forward command, URL), on the session's Pod.
ACCESS_ANNOTATION = f"{PREFIX}/access"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
#: Label selector of everything the portal submitted.
PORTAL_JOBS_SELECTOR = JOB_ID_LABEL


def managed_labels(**extra: str) -> dict[str, str]:
    """The portal's ownership label, with ``extra``."""
    return {MANAGED_BY: PORTAL, **extra}
