"""A ClusterQueue's ``spec.fairSharing.weight`` in a scenario file reaches the engine (issue 16, item 3).

Worked example: two queues of a cohort borrow the same 4 GPUs over their nominal 4 each out of a cohort of 16.
Kueue's weightedShare is borrowed ÷ lendable (in thousandths) ÷ weight: 4 × 1000 / 16 = 250 with weight 1,
125 with weight 2, and the weight-2 queue wins the admission tournament over an equally borrowing peer.
"""

from __future__ import annotations

from queues.engine.scenario import loads_scenario, run_scenario

FAIR = """
apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
fairSharing: {{enable: true}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: h100}}
{queues}
"""

QUEUE = """---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: {name}}}
spec:
  cohortName: lab
  namespaceSelector: {{}}
  {weight}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources:
      - {{name: nvidia.com/gpu, nominalQuota: {nominal}}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: main, namespace: {name}}}
spec: {{clusterQueue: {name}}}
"""

WORKLOAD = """---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {{name: {name}, namespace: {ns}, creationTimestamp: "2026-01-01T00:00:0{second}Z"}}
spec:
  queueName: main
  podSets:
  - name: main
    count: 1
    template:
      spec:
        containers:
        - name: c
          resources: {{requests: {{nvidia.com/gpu: "{gpus}"}}}}
"""


def _scenario(weight_b: str, workloads: str = "") -> str:
    queues = "".join(
        [
            QUEUE.format(name="a", weight="", nominal=4),
            QUEUE.format(name="b", weight=f"fairSharing: {{weight: {weight_b}}}", nominal=4),
            QUEUE.format(name="idle", weight="", nominal=8),
        ]
    )
    return FAIR.format(queues=queues) + workloads


def _borrowers(weight_b: str) -> str:
    running = "".join(WORKLOAD.format(name=f"run-{ns}", ns=ns, second=0, gpus=8) for ns in ("a", "b"))
    return _scenario(weight_b, running)


def test_queue_weight_divides_its_weighted_share():
    shares = {}
    for weight in ("1", "2"):
        doc = run_scenario(loads_scenario(_borrowers(weight), source="weights.yaml"))
        queues = doc["summary"]["clusterQueues"]
        shares[weight] = (queues["a"]["weightedShare"], queues["b"]["weightedShare"])
    assert shares["1"] == (250, 250)
    assert shares["2"] == (250, 125)


def test_heavier_queue_wins_the_tournament():
    # The idle queue holds 8 of the cohort's 16 GPUs; a and b each ask for 8 (4 over nominal): only one of them
    # fits. Equal weights: the older (a) goes first; b with weight 2 has the lower share and wins.
    workloads = WORKLOAD.format(name="hold", ns="idle", second=0, gpus=8) + "".join(
        WORKLOAD.format(name=f"want-{ns}", ns=ns, second=i + 1, gpus=8) for i, ns in enumerate(("a", "b"))
    )
    for weight, winner in (("1", "a/want-a"), ("2", "b/want-b")):
        doc = run_scenario(loads_scenario(_scenario(weight, workloads), source="weights.yaml"), mode="once")
        admitted = sorted(w["name"] for w in doc["workloads"] if w["state"] == "admitted" and "want" in w["name"])
        assert admitted == [winner], (weight, admitted)
