"""KWOK's part of a testbed: fake GPU nodes as the device plugin and GPU feature discovery publish them, and the
stages that move their pods along (there is no kubelet and no device: KWOK writes the statuses).

Pod lifecycle (the Stage objects below, KWOK's ``kwok.x-k8s.io/v1alpha1`` API):

- a pod bound to a fake node starts running half a second later;
- a Job's pod whose container runs ``sleep <d>`` (command or args; ``<d>`` in seconds or a Go duration such as
  ``90s``, ``5m``) succeeds ``<d>`` after it started; one that runs ``false`` fails (exit code 1) at once; any
  other Job pod succeeds after ``DEFAULT_RUN``; pods of other owners run until deleted;
- a deleted pod that still runs is stopped a second later (phase Failed, exit code 137, as the kubelet ends a
  pod it was asked to delete); a deleted pod that ended is removed once no finalizer is left (the Job controller
  takes its ``batch.kubernetes.io/job-tracking`` off when it has counted the pod);
- node heartbeats keep the nodes Ready (and KWOK renews their leases), so kube-controller-manager never taints
  them unreachable.
"""

from __future__ import annotations

import yaml

#: The annotation KWOK's ``--manage-nodes-with-annotation-selector`` picks its nodes by.
NODE_ANNOTATION = "kwok.x-k8s.io/node"
DEFAULT_RUN = "5s"
BLOCK_LABEL = "cloud.provider.com/topology-block"
RACK_LABEL = "cloud.provider.com/topology-rack"
HOSTNAME_LABEL = "kubernetes.io/hostname"
TOPOLOGY_LEVELS = (BLOCK_LABEL, RACK_LABEL, HOSTNAME_LABEL)

#: GPU products the nodes can have: GFD's product label, memory per card (MiB) and family.
PRODUCTS = {
    "NVIDIA-H100-80GB-HBM3": ("81559", "hopper", "9", "0"),
    "NVIDIA-A100-SXM4-80GB": ("81920", "ampere", "8", "0"),
    "NVIDIA-L4": ("23034", "ada-lovelace", "8", "9"),
}

_SLEEP_SECONDS = (
    '.spec.containers.[0] | ((.command // []) + (.args // [])) | index("sleep") as $i '
    "| if $i == null then empty else .[$i + 1] // empty end "
    '| if test("^[0-9]+$") then . + "s" else . end'
)
_PROGRAM = '(.spec.containers.[0].command // .spec.containers.[0].args // [""]) | .[0] // ""'

_POD_RUNNING = """
{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: PodReadyToStartContainers
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: ContainersReady
{{ range .spec.readinessGates }}
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: {{ .conditionType | Quote }}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  started: true
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
{{ with NodeIPWith .spec.nodeName }}
hostIP: {{ . | Quote }}
hostIPs:
- ip: {{ . | Quote }}
{{ end }}
{{ with PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" )
  ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
podIP: {{ . | Quote }}
podIPs:
- ip: {{ . | Quote }}
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
"""


def _pod_ended(phase: str, exit_code: int, reason: str) -> str:
    return f"""
{{{{ $now := Now }}}}
{{{{ $root := . }}}}
conditions:
- lastTransitionTime: {{{{ $now | Quote }}}}
  status: "True"
  type: Initialized
- lastTransitionTime: {{{{ $now | Quote }}}}
  reason: PodCompleted
  status: "False"
  type: Ready
- lastTransitionTime: {{{{ $now | Quote }}}}
  reason: PodCompleted
  status: "False"
  type: ContainersReady
containerStatuses:
{{{{ range $index, $item := .spec.containers }}}}
{{{{ $started := $now }}}}
{{{{ with $root.status.containerStatuses }}}}{{{{ with (index . $index).state.running }}}}
{{{{ $started = .startedAt }}}}
{{{{ end }}}}{{{{ end }}}}
- image: {{{{ $item.image | Quote }}}}
  name: {{{{ $item.name | Quote }}}}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: {exit_code}
      finishedAt: {{{{ $now | Quote }}}}
      reason: {reason}
      startedAt: {{{{ $started | Quote }}}}
{{{{ end }}}}
phase: {phase}
"""


_NODE_STATUS = """
{{ $now := Now }}
{{ $lastTransitionTime := or .metadata.creationTimestamp $now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $lastTransitionTime | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
addresses:
{{ with NodeIP }}
- address: {{ . | Quote }}
  type: InternalIP
{{ end }}
- address: {{ .metadata.name | Quote }}
  type: Hostname
allocatable:
{{ YAML .status.allocatable 1 }}
capacity:
{{ YAML .status.capacity 1 }}
nodeInfo:
  architecture: amd64
  containerRuntimeVersion: {{ printf "kwok-%s" Version | Quote }}
  kernelVersion: {{ printf "kwok-%s" Version | Quote }}
  kubeletVersion: {{ printf "kwok-%s" Version | Quote }}
  operatingSystem: linux
  osImage: "KWOK fake GPU node"
phase: Running
"""


def _stage(name: str, kind: str, selector: list[dict], nxt: dict, delay: dict | None = None) -> dict:
    spec: dict = {"resourceRef": {"apiGroup": "v1", "kind": kind}, "selector": {"matchExpressions": selector}}
    if delay:
        spec["delay"] = delay
    spec["next"] = nxt
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name}, "spec": spec}


def _expr(key: str, operator: str, *values: str) -> dict:
    out = {"key": key, "operator": operator}
    if values:
        out["values"] = list(values)
    return out


_NOT_DELETING = _expr(".metadata.deletionTimestamp", "DoesNotExist")
_RUNNING_READY = [
    _NOT_DELETING,
    _expr(".status.phase", "In", "Running"),
    _expr('.status.conditions.[] | select( .type == "Ready" ) | .status', "In", "True"),
    _expr(".metadata.ownerReferences.[].kind", "In", "Job"),
]


def stages() -> list[dict]:
    """The Stage objects of the testbed's node and pod lifecycle (see the module docstring)."""
    return [
        _stage(
            "node-initialize",
            "Node",
            [_expr('.status.conditions.[] | select( .type == "Ready" ) | .status', "NotIn", "True")],
            {"statusTemplate": _NODE_STATUS},
        ),
        _stage(
            "node-heartbeat",
            "Node",
            [
                _expr(".status.phase", "In", "Running"),
                _expr('.status.conditions.[] | select( .type == "Ready" ) | .status', "In", "True"),
            ],
            {"statusTemplate": _NODE_STATUS},
            {"durationMilliseconds": 20000, "jitterDurationMilliseconds": 25000},
        ),
        _stage(
            "pod-running",
            "Pod",
            [
                _NOT_DELETING,
                _expr(".status.phase", "In", "Pending"),
                _expr('.status.conditions.[] | select( .type == "Ready" ) | .status', "NotIn", "True"),
            ],
            {
                "event": {"type": "Normal", "reason": "Started", "message": "Started container (KWOK)"},
                "statusTemplate": _POD_RUNNING,
            },
            {"durationMilliseconds": 500},
        ),
        _stage(
            "pod-fail",
            "Pod",
            [*_RUNNING_READY, _expr(_PROGRAM, "In", "false")],
            {
                "event": {"type": "Warning", "reason": "Failed", "message": "Container exited with code 1 (KWOK)"},
                "statusTemplate": _pod_ended("Failed", 1, "Error"),
            },
            {"durationMilliseconds": 200},
        ),
        _stage(
            "pod-complete",
            "Pod",
            [*_RUNNING_READY, _expr(_PROGRAM, "NotIn", "false")],
            {"statusTemplate": _pod_ended("Succeeded", 0, "Completed")},
            {"durationMilliseconds": _millis(DEFAULT_RUN), "durationFrom": {"jq": {"expression": _SLEEP_SECONDS}}},
        ),
        _stage(
            "pod-terminate",
            "Pod",
            [
                _expr(".metadata.deletionTimestamp", "Exists"),
                _expr(".status.phase", "NotIn", "Succeeded", "Failed"),
            ],
            {
                "event": {"type": "Normal", "reason": "Killing", "message": "Stopping container (KWOK)"},
                "statusTemplate": _pod_ended("Failed", 137, "Error"),
            },
            {"durationMilliseconds": 1000},
        ),
        _stage(
            "pod-delete",
            "Pod",
            [
                _expr(".metadata.deletionTimestamp", "Exists"),
                _expr(".status.phase", "In", "Succeeded", "Failed"),
                _expr(".metadata.finalizers", "DoesNotExist"),
            ],
            {"delete": True},
        ),
    ]


def _millis(duration: str) -> int:
    return int(float(duration.rstrip("s")) * 1000)


def config_yaml() -> str:
    """KWOK's ``--config`` file: the stages only (a KwokConfiguration in the file would replace KWOK's defaults
    whole, parallelism included; the pod and node addresses are flags)."""
    return yaml.safe_dump_all(stages(), sort_keys=False)


#: KWOK's flags for the fake pods' and nodes' addresses.
ADDRESS_FLAGS = ("--cidr=10.64.0.0/12", "--node-ip=10.32.0.1")


def gpu_node(
    name: str,
    *,
    gpus: int = 8,
    product: str = "NVIDIA-H100-80GB-HBM3",
    block: str = "block-a",
    rack: str = "rack-1",
    driver: str = "550.54.15",
    cuda: str = "12.4",
    labels: dict[str, str] | None = None,
    taints: list[dict] | None = None,
    cpu: str = "128",
    memory: str = "2Ti",
) -> dict:
    """A fake GPU node as the NVIDIA device plugin (capacity ``nvidia.com/gpu``) and GPU feature discovery
    (``nvidia.com/gpu.*`` and ``nvidia.com/cuda.*`` labels) publish it, with block / rack / host topology labels.

    Created with this status; KWOK's node-initialize stage marks it Ready and keeps the capacity.
    """
    memory_mib, family, compute_major, compute_minor = PRODUCTS.get(product, ("81559", "hopper", "9", "0"))
    major, minor, revision = [*driver.split("."), "0", "0"][:3]
    all_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        BLOCK_LABEL: block,
        RACK_LABEL: rack,
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.memory": memory_mib,
        "nvidia.com/gpu.family": family,
        "nvidia.com/gpu.compute.major": compute_major,
        "nvidia.com/gpu.compute.minor": compute_minor,
        "nvidia.com/gpu.machine": "KWOK-Fake-GPU-Server",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/cuda.driver-version.full": driver,
        "nvidia.com/cuda.driver-version.major": major,
        "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": revision,
        "nvidia.com/cuda.runtime-version.full": cuda,
        "nvidia.com/cuda.runtime-version.major": cuda.split(".")[0],
        "nvidia.com/cuda.runtime-version.minor": [*cuda.split("."), "0"][1],
        "nvidia.com/gpu.deploy.device-plugin": "true",
        "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
        **(labels or {}),
    }
    resources = {"cpu": cpu, "memory": memory, "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": all_labels,
            "annotations": {NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"taints": taints} if taints else {},
        "status": {"capacity": resources, "allocatable": dict(resources)},
    }


def gpu_nodes(count: int, *, per_rack: int = 2, racks_per_block: int = 2, prefix: str = "gpu") -> list[dict]:
    """``count`` H100 nodes of 8 GPUs, ``per_rack`` to a rack and ``racks_per_block`` racks to a block."""
    nodes = []
    for i in range(count):
        rack = i // per_rack
        block = rack // racks_per_block
        nodes.append(gpu_node(f"{prefix}-{i:03d}", block=f"block-{block}", rack=f"rack-{rack}"))
    return nodes
