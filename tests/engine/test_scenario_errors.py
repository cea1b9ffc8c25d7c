"""Bad scenario input: a clear error naming the object (kind/name) and the field path."""

from __future__ import annotations

import json

import pytest

from queues.engine.scenario import ScenarioError, load_scenario, loads_scenario, parse_duration, run_scenario

FLAVOR = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: a100}\nspec: {}\n"


def cq(quota: str = "8", flavor: str = "a100") -> str:
    return f"""apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: team-a}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: {flavor}
      resources:
      - {{name: nvidia.com/gpu, nominalQuota: '{quota}'}}
"""


def workload(extra_annotations: str = "", request: str = "1") -> str:
    return f"""apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata:
  name: job
  namespace: team-a
  annotations: {{{extra_annotations}}}
spec:
  queueName: main
  podSets:
  - name: main
    count: 1
    template:
      spec:
        containers:
        - name: c
          resources: {{requests: {{nvidia.com/gpu: '{request}'}}}}
"""


def join(*docs: str) -> str:
    return "\n---\n".join(docs)


def test_unknown_kind():
    text = join(FLAVOR, "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\n")
    with pytest.raises(ScenarioError) as info:
        loads_scenario(text)
    assert str(info.value) == "Job/j: kind: unknown kind 'Job' (apiVersion 'batch/v1')"


def test_invalid_quantity_names_object_and_path():
    with pytest.raises(ScenarioError) as info:
        loads_scenario(join(FLAVOR, cq(quota="8GB")))
    message = str(info.value)
    assert message.startswith(
        "ClusterQueue/team-a: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: invalid quantity '8GB'"
    )
    assert info.value.kind == "ClusterQueue"
    assert info.value.path == "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"


def test_invalid_workload_request_quantity():
    with pytest.raises(ScenarioError) as info:
        loads_scenario(join(FLAVOR, cq(), workload(request="lots")))
    assert str(info.value).startswith(
        "Workload/team-a/job: spec.podSets[0].template.spec.containers[0].resources.requests.nvidia.com/gpu: "
        "invalid quantity 'lots'"
    )


def test_queue_naming_missing_flavor():
    with pytest.raises(ScenarioError) as info:
        loads_scenario(cq(flavor="h200"))
    assert (
        str(info.value)
        == "ClusterQueue/team-a: spec.resourceGroups[0].flavors[0].name: ResourceFlavor 'h200' not found"
    )


def test_missing_required_field():
    text = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {name: main, namespace: team-a}\nspec: {}\n"
    with pytest.raises(ScenarioError) as info:
        loads_scenario(text)
    assert str(info.value) == "LocalQueue/team-a/main: spec.clusterQueue: required field is missing"
    with pytest.raises(ScenarioError, match=r"ResourceFlavor: metadata.name: required field is missing"):
        loads_scenario("apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {}\n")


def test_bad_duration_annotation():
    with pytest.raises(ScenarioError) as info:
        loads_scenario(join(FLAVOR, cq(), workload('"sim.portal/runtime": "soon"')))
    assert 'metadata.annotations["sim.portal/runtime"]' in str(info.value)
    assert "invalid duration 'soon'" in str(info.value)


def test_wrong_api_version():
    with pytest.raises(ScenarioError, match=r"ResourceFlavor/a100: apiVersion: expected kueue.x-k8s.io/v1beta2"):
        loads_scenario(FLAVOR.replace("kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1alpha1"))


def test_unparseable_file(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"kind": "List", "items": [')
    with pytest.raises(ScenarioError, match="cannot parse"):
        load_scenario(path)
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "missing.yaml")


def test_json_list_and_single_object(tmp_path):
    doc = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}],
    }
    path = tmp_path / "list.json"
    path.write_text(json.dumps(doc))
    assert load_scenario(path).state.namespaces[0].name == "x"
    single = tmp_path / "one.json"
    single.write_text(json.dumps(doc["items"][0]))
    assert load_scenario(single).state.namespaces[0].name == "x"


def test_parse_duration():
    assert parse_duration("90s") == 90
    assert parse_duration("1500ms") == 1.5
    assert parse_duration("10m") == 600
    assert parse_duration("1h30m") == 5400
    assert parse_duration(45) == 45
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration("1 hour")


def test_template_annotations_give_topology_and_limits_act_as_requests():
    text = join(
        FLAVOR,
        cq(),
        """apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {name: job, namespace: team-a}
spec:
  queueName: main
  podSets:
  - name: main
    count: 2
    template:
      metadata:
        annotations: {kueue.x-k8s.io/podset-preferred-topology: cloud/rack}
      spec:
        containers:
        - {name: a, resources: {limits: {nvidia.com/gpu: '2'}}}
        - {name: b, resources: {requests: {cpu: 500m}, limits: {cpu: '1'}}}
""",
    )
    scenario = loads_scenario(text)
    ps = scenario.state.workloads[0].pod_sets[0]
    assert ps.requests == {"nvidia.com/gpu": 2, "cpu": 500}
    assert ps.topology is not None
    assert ps.topology.preferred == "cloud/rack"
    assert run_scenario(scenario)["workloads"][0]["reason"]["code"] == "misconfigured"


def _node(label: str) -> str:
    return f"""apiVersion: v1
kind: Node
metadata:
  name: n0
  labels: {{gpu-pool-portal.io/degraded-devices: '{label}'}}
status:
  capacity: {{nvidia.com/gpu: '8'}}
"""


def test_degraded_devices_label_is_read_as_a_count():
    scenario = loads_scenario(join(FLAVOR, cq(), _node("2")))
    assert [n.degraded_devices for n in scenario.state.nodes] == [2]


def test_degraded_devices_label_must_be_a_count():
    with pytest.raises(ScenarioError) as info:
        loads_scenario(join(FLAVOR, cq(), _node("yes")))
    assert str(info.value) == (
        "Node/n0: metadata.labels.gpu-pool-portal.io/degraded-devices: must be a count of devices, got 'yes'"
    )
