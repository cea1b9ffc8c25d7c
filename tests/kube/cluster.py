"""The cluster side of the tests: what Kueue's controllers and the kubelet write, as real objects in the emulator.

The portal only ever talks HTTP to the emulator; these helpers write the objects a real cluster would create
(Workloads with Kueue's conditions and messages, Pods bound to nodes, Job status), validated like everything
else (Workloads against Kueue's CRD).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

from tests.kube.emulator import Emulator
from tests.kube.schemas import validate

T0 = datetime(2026, 9, 1, 8, 0, tzinfo=UTC)


def ts(when: datetime) -> str:
    """RFC 3339."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def at(minutes: float) -> datetime:
    """T0 + minutes."""
    return T0 + timedelta(minutes=minutes)


def gpu_node(
    name: str,
    *,
    gpus: int = 8,
    product: str = "NVIDIA-H100-80GB-HBM3",
    labels: dict | None = None,
    ready: bool = True,
    taints: list | None = None,
) -> dict:
    """A GPU node as the kubelet and GPU feature discovery publish it."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.count": str(gpus),
                "nvidia.com/gpu.memory": "81559",
                "nvidia.com/cuda.driver-version.major": "550",
                "nvidia.com/cuda.driver-version.full": "550.54.15",
                "nvidia.com/cuda.runtime-version.full": "12.4",
                **(labels or {}),
            },
        },
        "spec": {"taints": taints} if taints else {},
        "status": {
            "capacity": {"cpu": "128", "memory": "2Ti", "nvidia.com/gpu": str(gpus), "pods": "110"},
            "allocatable": {"cpu": "127", "memory": "2000Gi", "nvidia.com/gpu": str(gpus), "pods": "110"},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "NodeStatusUnknown",
                    "message": "kubelet is posting ready status" if ready else "Kubelet stopped posting node status.",
                    "lastHeartbeatTime": ts(T0),
                    "lastTransitionTime": ts(T0 - timedelta(days=1)),
                }
            ],
        },
    }


def kueue_config_map(
    configuration: str, *, name: str = "kueue-manager-config", namespace: str = "kueue-system"
) -> dict:
    """Kueue's manager ConfigMap as its release manifest installs it, with ``configuration`` as the YAML text.

    Validated against the ConfigMap schema (kubernetes-validate), as the emulator validates what clients send.
    """
    obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "kueue", "control-plane": "controller-manager"},
        },
        "data": {"controller_manager_config.yaml": configuration},
    }
    problems = validate(obj)
    assert problems == [], problems
    return obj


def workload_name(owner_name: str, owner_uid: str, *, kind: str = "Job", group: str = "batch") -> str:
    """Kueue's name for the Workload of an object: ``<kind>-<name>-<5 hex>``, the hex from the object's kind, group,
    name *and UID* (jobframework.GetWorkloadNameForOwnerWithGVK at v0.19.2; on the testbed Kueue named the Job
    ``j1`` of UID ``af99d9ca-…`` ``job-j1-36f1b``, as this does). A Job deleted and created again under the same
    name gets a new Workload name."""
    digest = hashlib.sha1(f"{kind}\n{group}\n{owner_name}\n{owner_uid}".encode()).hexdigest()
    return f"{kind.lower()}-{owner_name}-{digest[:5]}"


def condition(kind: str, status: str, reason: str, message: str, when: datetime) -> dict:
    """A metav1.Condition."""
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": ts(when)}


def _pending_after_eviction(wl: dict) -> str:
    """What Kueue writes on a Workload it just evicted, at its next attempt: the quota it held is not free (its
    preemptor holds it), every resource it asks for listed."""
    reasons = []
    for assignment in (wl.get("status", {}).get("admission") or {}).get("podSetAssignments") or []:
        for resource, amount in sorted((assignment.get("resourceUsage") or {}).items()):
            flavor = (assignment.get("flavors") or {}).get(resource, "")
            reasons.append(f"insufficient unused quota for {resource} in flavor {flavor}, {amount} more needed")
    if not reasons:
        return "couldn't assign flavors to pod set main: insufficient unused quota"
    return "couldn't assign flavors to pod set main: " + ", ".join(reasons)


class FakeKueue:
    """Kueue and the kubelet, for one emulator: create Workloads for Jobs, admit, run, finish, evict."""

    def __init__(self, emulator: Emulator) -> None:
        self.emu = emulator

    def job(self, name: str, namespace: str) -> dict:
        """The stored batch Job."""
        obj = self.emu.get_obj("Job", name, namespace)
        assert obj is not None, f"no Job {namespace}/{name}"
        return obj

    def workload(self, job_name: str, namespace: str) -> dict | None:
        """The stored Workload of a Job (found by its owner, as the Job may be gone)."""
        for wl in self.emu.all("Workload"):
            meta = wl["metadata"]
            if meta.get("namespace") == namespace and any(
                o.get("kind") == "Job" and o.get("name") == job_name for o in meta.get("ownerReferences") or []
            ):
                return wl
        return None

    def create_workload(
        self, job_name: str, namespace: str, *, conditions: list | None = None, when: datetime = T0
    ) -> dict:
        """What Kueue does when it sees a labelled Job: a Workload owned by it."""
        job = self.job(job_name, namespace)
        labels = job["metadata"].get("labels") or {}
        template = job["spec"]["template"]
        wl = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {
                "name": workload_name(job_name, job["metadata"]["uid"]),
                "namespace": namespace,
                "creationTimestamp": ts(when),
                "labels": {"kueue.x-k8s.io/job-uid": job["metadata"]["uid"]},
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": job_name,
                        "uid": job["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {
                "queueName": labels.get("kueue.x-k8s.io/queue-name", ""),
                "podSets": [{"name": "main", "count": job["spec"].get("parallelism", 1), "template": template}],
                "active": True,
            },
            "status": {"conditions": conditions or []},
        }
        if labels.get("kueue.x-k8s.io/priority-class"):
            wl["spec"]["priorityClassRef"] = {
                "group": "kueue.x-k8s.io",
                "kind": "WorkloadPriorityClass",
                "name": labels["kueue.x-k8s.io/priority-class"],
            }
        return self.emu.put(wl, manager="kueue")

    def set_status(self, job_name: str, namespace: str, **status) -> dict:
        """Replace parts of the Workload's status."""
        wl = self.workload(job_name, namespace)
        assert wl is not None
        wl["status"] = {**(wl.get("status") or {}), **status}
        return self.emu.put(wl)

    def pending(
        self, job_name: str, namespace: str, message: str, *, reason: str = "Pending", when: datetime = T0
    ) -> dict:
        """QuotaReserved=False with Kueue's message."""
        return self.set_status(
            job_name, namespace, conditions=[condition("QuotaReserved", "False", reason, message, when)]
        )

    def admit(
        self,
        job_name: str,
        namespace: str,
        *,
        cluster_queue: str,
        flavor: str,
        nodes: list[str],
        gpus_per_pod: int,
        when: datetime,
        resource: str = "nvidia.com/gpu",
    ) -> None:
        """Reserve quota, admit, unsuspend the Job, create its pods on ``nodes`` (one per pod)."""
        count = len(nodes)
        admission = {
            "clusterQueue": cluster_queue,
            "podSetAssignments": [
                {
                    "name": "main",
                    "count": count,
                    "flavors": {resource: flavor, "cpu": flavor, "memory": flavor},
                    "resourceUsage": {resource: str(gpus_per_pod * count)},
                }
            ],
        }
        self.set_status(
            job_name,
            namespace,
            admission=admission,
            conditions=[
                condition(
                    "QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {cluster_queue}", when
                ),
                condition("Admitted", "True", "Admitted", "The workload is admitted", when),
                # Kueue writes PodsReady from the admission on; False until every pod runs
                condition("PodsReady", "False", "WaitForStart", "Not all pods are ready or succeeded", when),
            ],
        )
        job = self.job(job_name, namespace)
        job["spec"]["suspend"] = False
        job["status"] = {"active": count, "startTime": ts(when)}
        self.emu.put(job)
        for i, node in enumerate(nodes):
            self.pod(job_name, namespace, i, node=node, phase="Pending", when=when)

    def pod(
        self,
        job_name: str,
        namespace: str,
        index: int,
        *,
        node: str = "",
        phase: str = "Running",
        when: datetime = T0,
        unschedulable: str = "",
        finished: datetime | None = None,
        exit_code: int = 0,
    ) -> dict:
        """A pod of the Job (created, bound, running, finished)."""
        job = self.job(job_name, namespace)
        labels = dict(job["spec"]["template"]["metadata"].get("labels") or {})
        labels["batch.kubernetes.io/job-name"] = job_name
        name = f"{job_name}-{index}-pod{index:02d}"
        status: dict = {"phase": phase, "conditions": []}
        if unschedulable:
            status["conditions"].append(
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": unschedulable,
                    "lastTransitionTime": ts(when),
                }
            )
        else:
            status["conditions"].append({"type": "PodScheduled", "status": "True", "lastTransitionTime": ts(when)})
        if phase == "Running":
            status["startTime"] = ts(when)
            status["conditions"].append({"type": "Ready", "status": "True", "lastTransitionTime": ts(when)})
            status["containerStatuses"] = [
                {
                    "name": "main",
                    "ready": True,
                    "restartCount": 0,
                    "image": "x",
                    "imageID": "x",
                    "state": {"running": {"startedAt": ts(when)}},
                }
            ]
        elif phase in ("Succeeded", "Failed"):
            status["containerStatuses"] = [
                {
                    "name": "main",
                    "ready": False,
                    "restartCount": 0,
                    "image": "x",
                    "imageID": "x",
                    "state": {
                        "terminated": {"exitCode": exit_code, "startedAt": ts(when), "finishedAt": ts(finished or when)}
                    },
                }
            ]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": labels,
                "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": job_name,
                        "uid": job["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": {"containers": [{"name": "main", "image": "x"}], **({"nodeName": node} if node else {})},
            "status": status,
        }
        return self.emu.put(pod)

    def run_pods(self, job_name: str, namespace: str, nodes: list[str], *, when: datetime) -> None:
        """All pods Running; PodsReady=True on the Workload."""
        for i, node in enumerate(nodes):
            self.pod(job_name, namespace, i, node=node, phase="Running", when=when)
        wl = self.workload(job_name, namespace)
        conditions = [c for c in wl["status"]["conditions"] if c["type"] != "PodsReady"]
        conditions.append(
            condition("PodsReady", "True", "Started", "All pods reached readiness and the workload is running", when)
        )
        self.set_status(job_name, namespace, conditions=conditions)

    def complete(self, job_name: str, namespace: str, nodes: list[str], *, started: datetime, when: datetime) -> None:
        """Pods succeeded; the Job is Complete; the Workload Finished."""
        for i, node in enumerate(nodes):
            self.pod(job_name, namespace, i, node=node, phase="Succeeded", when=started, finished=when)
        job = self.job(job_name, namespace)
        job["status"] = {
            "succeeded": len(nodes),
            "startTime": ts(started),
            "completionTime": ts(when),
            "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": ts(when)},
                {"type": "Complete", "status": "True", "lastTransitionTime": ts(when)},
            ],
        }
        self.emu.put(job)
        wl = self.workload(job_name, namespace)
        conditions = [
            *wl["status"]["conditions"],
            condition("Finished", "True", "Succeeded", "Reached expected number of succeeded pods", when),
        ]
        self.set_status(
            job_name, namespace, conditions=conditions, reclaimablePods=[{"name": "main", "count": len(nodes)}]
        )

    def evict(
        self,
        job_name: str,
        namespace: str,
        *,
        reason: str,
        message: str,
        when: datetime,
        preempted_reason: str = "",
        pending_message: str | None = None,
    ) -> None:
        """Kueue evicts: Evicted=True (+Preempted), quota released, Job suspended, pods deleted.

        As on the testbed: the requeued Workload's QuotaReserved=False carries the message of its next attempt
        (``pending_message``; by default, for a preemption: the quota it held is not free, its preemptor holds it;
        for other reasons the eviction's message), Admitted turns
        False (NoReservation), PodsReady False again, and its eviction is counted in ``schedulingStats``.
        """
        wl = self.workload(job_name, namespace)
        if pending_message is None:
            # measured for preemption only; other evictions (a stopped ClusterQueue…) keep the eviction's text
            pending_message = _pending_after_eviction(wl) if reason == "Preempted" else message
        conditions = [
            c for c in wl["status"]["conditions"] if c["type"] not in ("Admitted", "QuotaReserved", "PodsReady")
        ]
        conditions.append(condition("Evicted", "True", reason, message, when))
        if preempted_reason:
            conditions.append(condition("Preempted", "True", preempted_reason, message, when))
        conditions.append(condition("QuotaReserved", "False", "Pending", pending_message, when))
        conditions.append(condition("Admitted", "False", "NoReservation", "The workload has no reservation", when))
        conditions.append(
            condition("Requeued", "True" if reason in ("Preempted", "NodeFailures") else "False", reason, message, when)
        )
        conditions.append(condition("PodsReady", "False", "WaitForStart", "Not all pods are ready or succeeded", when))
        wl["status"]["conditions"] = conditions
        wl["status"]["schedulingStats"] = {"evictions": [{"reason": reason, "underlyingCause": "", "count": 1}]}
        wl["status"].pop("admission", None)
        self.emu.put(wl)
        job = self.job(job_name, namespace)
        job["spec"]["suspend"] = True
        job["status"] = {"active": 0}
        self.emu.put(job)
        self.delete_pods(job_name, namespace, when=when)

    def pods_of(self, job_name: str, namespace: str) -> list[dict]:
        """The Job's pods."""
        return [
            p
            for p in self.emu.all("Pod")
            if p["metadata"]["namespace"] == namespace
            and any(o.get("name") == job_name for o in p["metadata"].get("ownerReferences") or [])
        ]

    def delete_pods(self, job_name: str, namespace: str, *, when: datetime) -> None:
        """Graceful deletion: a deletionTimestamp first (what the watch sees), then the pod is gone."""
        for pod in self.pods_of(job_name, namespace):
            pod["metadata"]["deletionTimestamp"] = ts(when)
            self.emu.put(pod)
            self.emu.remove("Pod", pod["metadata"]["name"], namespace)

    def delete_job(self, job_name: str, namespace: str, *, when: datetime) -> None:
        """``kubectl delete job``: pods terminate at ``when``, the Job and its Workload go."""
        self.delete_pods(job_name, namespace, when=when)
        wl = self.workload(job_name, namespace)
        self.emu.remove("Job", job_name, namespace)
        if wl is not None:
            self.emu.remove("Workload", wl["metadata"]["name"], namespace)
