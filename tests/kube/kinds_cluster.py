"""The cluster side for the workload kinds: Kueue's integrations and each kind's controller, as real objects.

What Kueue's integration for a kind does with the object the portal created (a Workload owned by it, one pod set
per replicated Job / replica type / Ray group / LWS role, admission, unsuspending) and what the kind's controller
and the kubelet then write (pods bound to nodes, the kind's own status), all through the emulator like
:class:`tests.kube.cluster.FakeKueue` does for batch Jobs.
"""

from __future__ import annotations

import copy
from datetime import datetime

from pools.workload_kinds import kind_spec
from queues.models import Job
from queues.pod_sets import primary_requests
from queues.services import JobSpec, job_submit
from tests.kube.cluster import at, condition, ts, workload_name
from tests.kube.emulator import Emulator


def companions(kind: str, rc, devices_per_pod: int) -> list[dict]:
    """A kind's companion pod sets resolved as a submission stores them (``Job.companion_pod_sets``)."""
    out = []
    for c in kind_spec(kind).companions:
        if c.devices_like_primary:
            cpu, memory = primary_requests(rc, devices_per_pod)
            devices = devices_per_pod
        else:
            cpu, memory, devices = c.cpu, c.memory, c.devices_per_pod
        out.append({"name": c.name, "count": c.count, "devices_per_pod": devices, "cpu": cpu, "memory": memory})
    return out


def submit_kind_job(portal, capture, kind: str, *, pods: int, gpus: int, name: str = "train", **kwargs) -> Job:
    """Submit a job of ``kind`` through the portal's service (``capture``: django_capture_on_commit_callbacks);
    the kind and its companion pod sets are set as a submission of that kind stores them before the backend
    creates the object after commit."""
    spec = JobSpec(
        name=name,
        image=kind_spec(kind).default_image or "registry.example.com/vision/train:1.0",
        resource_class=portal.rc,
        devices_per_pod=gpus,
        pod_count=pods,
        command=kwargs.pop("command", ["python", "train.py"]),
        **kwargs,
    )
    with capture(execute=False) as callbacks:
        job = job_submit(owner=portal.user, team=portal.team, spec=spec, now=at(0))
    Job.objects.filter(pk=job.pk).update(kind=kind, companion_pod_sets=companions(kind, portal.rc, gpus))
    for callback in callbacks:
        callback()
    return Job.objects.get(pk=job.pk)


def pod_sets_of(obj: dict) -> list[tuple[str, int, dict]]:
    """(name, count, pod template) of each pod set Kueue's integration reads from an object of a portal kind."""
    spec = obj["spec"]
    kind = obj["kind"]
    if kind == "Job":
        return [("main", spec["parallelism"], spec["template"])]
    if kind == "JobSet":
        return [
            (rj["name"], rj["replicas"] * rj["template"]["spec"]["parallelism"], rj["template"]["spec"]["template"])
            for rj in spec["replicatedJobs"]
        ]
    if kind == "PyTorchJob":
        return [(name.lower(), r["replicas"], r["template"]) for name, r in spec["pytorchReplicaSpecs"].items()]
    if kind == "RayJob":
        ray = spec["rayClusterSpec"]
        head = ("head", 1, ray["headGroupSpec"]["template"])
        return [head, *((g["groupName"], g["replicas"], g["template"]) for g in ray["workerGroupSpecs"])]
    if kind == "Pod":
        return [("main", 1, {"metadata": {"labels": obj["metadata"]["labels"]}, "spec": spec})]
    if kind == "Deployment":
        return [("main", spec["replicas"], spec["template"])]
    if kind == "LeaderWorkerSet":
        lwt = spec["leaderWorkerTemplate"]
        return [("leader", 1, lwt["leaderTemplate"]), ("workers", lwt["size"] - 1, lwt["workerTemplate"])]
    raise ValueError(kind)


def owner_ref(obj: dict) -> dict:
    """A controller owner reference to ``obj``."""
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


class KindCluster:
    """Kueue and the controllers of one kind's object, in one emulator."""

    def __init__(self, emulator: Emulator, kind: str, name: str, namespace: str) -> None:
        self.emu, self.kind, self.name, self.namespace = emulator, kind, name, namespace

    def obj(self) -> dict:
        """The stored top-level object."""
        found = self.emu.get_obj(self.kind, self.name, self.namespace)
        assert found is not None, f"no {self.kind} {self.namespace}/{self.name}"
        return found

    @property
    def workload_name(self) -> str:
        """Kueue's name for the object's Workload (its kind, API group, name and UID)."""
        obj = self.obj()
        group = obj["apiVersion"].rpartition("/")[0]
        return workload_name(self.name, obj["metadata"]["uid"], kind=self.kind, group=group)

    def workload(self) -> dict | None:
        """The stored Workload (found by its owner: the object may be gone)."""
        for wl in self.emu.all("Workload"):
            meta = wl["metadata"]
            if meta.get("namespace") == self.namespace and any(
                o.get("kind") == self.kind and o.get("name") == self.name for o in meta.get("ownerReferences") or []
            ):
                return wl
        return None

    def create_workload(self, *, when: datetime) -> dict:
        """What Kueue's integration does when it sees the labelled object: a Workload owned by it, its pod sets."""
        obj = self.obj()
        labels = obj["metadata"]["labels"]
        wl = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {
                "name": self.workload_name,
                "namespace": self.namespace,
                "creationTimestamp": ts(when),
                "labels": {"kueue.x-k8s.io/job-uid": obj["metadata"]["uid"]},
                "ownerReferences": [owner_ref(obj)],
            },
            "spec": {
                "queueName": labels["kueue.x-k8s.io/queue-name"],
                "podSets": [{"name": n, "count": c, "template": t} for n, c, t in pod_sets_of(obj)],
                "active": True,
            },
            "status": {"conditions": []},
        }
        return self.emu.put(wl, manager="kueue")

    def admit(self, *, cluster_queue: str, flavor: str, when: datetime) -> None:
        """Quota reserved and admitted for every pod set; a suspended object is unsuspended."""
        wl = self.workload()
        assert wl is not None
        wl["status"] = {
            "admission": {
                "clusterQueue": cluster_queue,
                "podSetAssignments": [
                    {"name": p["name"], "count": p["count"], "flavors": self._flavors(p, flavor)}
                    for p in wl["spec"]["podSets"]
                ],
            },
            "conditions": [
                condition(
                    "QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {cluster_queue}", when
                ),
                condition("Admitted", "True", "Admitted", "The workload is admitted", when),
            ],
        }
        self.emu.put(wl)
        obj = self.obj()
        if self.kind in ("JobSet", "RayJob"):
            obj["spec"]["suspend"] = False
        elif self.kind == "PyTorchJob":
            obj["spec"]["runPolicy"]["suspend"] = False
        self.emu.put(obj)

    @staticmethod
    def _flavors(pod_set: dict, flavor: str) -> dict[str, str]:
        """A flavor for each resource the pod set's pods request, as Kueue assigns them (a launcher: no GPU)."""
        requested = {r for c in pod_set["template"]["spec"]["containers"] for r in c["resources"]["requests"]}
        return dict.fromkeys(sorted(requested), flavor)

    def run(self, nodes: list[str], *, when: datetime) -> list[str]:
        """The controller creates every pod set's pods, bound round-robin to ``nodes`` and running; the kind's
        status says so. Returns the pods' names."""
        obj = self.obj()
        names = []
        i = 0
        for pod_set, count, template in pod_sets_of(obj):
            for index in range(count):
                name = self.name if self.kind == "Pod" else f"{self.name}-{pod_set}-{index}"
                self._pod(name, template, node=nodes[i % len(nodes)], when=when, owner=obj)
                names.append(name)
                i += 1
        self._status_running(obj, len(names), when)
        wl = self.workload()
        wl["status"]["conditions"].append(
            condition("PodsReady", "True", "Started", "All pods reached readiness and the workload is running", when)
        )
        self.emu.put(wl)
        return names

    def _pod(self, name: str, template: dict, *, node: str, when: datetime, owner: dict) -> None:
        if self.kind == "Pod":
            pod = copy.deepcopy(owner)
        else:
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": self.namespace,
                    "labels": dict(template["metadata"]["labels"]),
                    "ownerReferences": [owner_ref(owner)],
                },
                "spec": copy.deepcopy(template["spec"]),
            }
        pod["spec"]["nodeName"] = node
        pod["status"] = {
            "phase": "Running",
            "startTime": ts(when),
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": ts(when)},
                {"type": "Ready", "status": "True", "lastTransitionTime": ts(when)},
            ],
            "containerStatuses": [
                {
                    "name": c["name"],
                    "ready": True,
                    "restartCount": 0,
                    "image": c["image"],
                    "imageID": c["image"],
                    "state": {"running": {"startedAt": ts(when)}},
                }
                for c in pod["spec"]["containers"]
            ],
        }
        self.emu.put(pod)

    def _status_running(self, obj: dict, pods: int, when: datetime) -> None:
        if self.kind == "PyTorchJob":
            obj["status"] = {
                "startTime": ts(when),
                "conditions": [
                    {
                        "type": "Created",
                        "status": "True",
                        "reason": "PyTorchJobCreated",
                        "lastTransitionTime": ts(when),
                    },
                    {
                        "type": "Running",
                        "status": "True",
                        "reason": "PyTorchJobRunning",
                        "lastTransitionTime": ts(when),
                    },
                ],
                "replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": pods - 1}},
            }
        elif self.kind == "RayJob":
            obj["status"] = {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running", "startTime": ts(when)}
        elif self.kind == "Deployment":
            obj["status"] = {"replicas": pods, "readyReplicas": pods, "availableReplicas": pods}
        elif self.kind == "LeaderWorkerSet":
            obj["status"] = {"replicas": 1, "readyReplicas": 1}
        else:
            return
        self.emu.put(obj)

    def finish(self, *, when: datetime, failed: bool = False, message: str = "") -> None:
        """The kind's controller says the job ended (as that controller writes it)."""
        obj = self.obj()
        status = obj.setdefault("status", {})
        if self.kind == "JobSet":
            kind = "Failed" if failed else "Completed"
            status["conditions"] = [condition(kind, "True", f"AllJobs{kind}", message or kind, when)]
            status["terminalState"] = kind
        elif self.kind == "PyTorchJob":
            kind = "Failed" if failed else "Succeeded"
            status["conditions"] = [c for c in status.get("conditions", []) if c["type"] != "Running"] + [
                {
                    "type": kind,
                    "status": "True",
                    "reason": f"PyTorchJob{kind}",
                    "message": message,
                    "lastTransitionTime": ts(when),
                }
            ]
            status["completionTime"] = ts(when)
        elif self.kind == "RayJob":
            status.update(
                {
                    "jobStatus": "FAILED" if failed else "SUCCEEDED",
                    "jobDeploymentStatus": "Failed" if failed else "Complete",
                    "endTime": ts(when),
                    "message": message,
                }
            )
        else:
            raise ValueError(f"a {self.kind} runs until it is stopped")
        self.emu.put(obj)
